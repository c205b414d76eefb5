"""What one watched process knows: its settings (from `bench watch`, through the environment, or the Python API's
defaults), a meter per loader, and how it reports: a line every `every` steps on rank 0, and a rank file written
every FLUSH_S seconds and at exit (a crash, Ctrl-C or a rank killed by torchrun keeps what was measured)."""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import socket
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from .meter import StepMeter, now

ENV = "GPUFEED_WATCH"  # JSON of Settings, set by `bench watch` for the program and every process below it
FLUSH_S = 10.0  # rank files are rewritten this often: a killed rank loses at most this much


@dataclass
class Settings:
    out: str | None = None  # where rank files go; None: keep figures in memory only (the Python API on its own)
    warmup: int = 20  # requests left out of the figures: compilation, cuDNN autotuning, worker start-up
    every: int = 0  # a progress line every N steps on rank 0 (0: none)
    loader_name: str | None = None  # substring of the loader label to measure (default: the most consumed)
    data_free: bool = False  # replay the first batches instead of loading
    replay_batches: int = 8  # how many distinct batches the replay cycles through
    tensorboard: str | None = None  # event files here: the live line's figures as scalars (rank 0)


def _settings_from_env() -> Settings:
    raw = os.environ.get(ENV)
    return Settings(**json.loads(raw)) if raw else Settings()


@dataclass
class ProcessState:
    settings: Settings = field(default_factory=_settings_from_env)
    meters: dict = field(default_factory=dict)
    pid: int | None = None  # the process that measures; a forked worker inherits this state but must stay quiet
    error: str | None = None
    _last_flush: float = 0.0
    _flush_every: float = FLUSH_S

    def started(self) -> None:
        if self.pid is None:
            self.pid = os.getpid()
            self._last_flush = now()
            atexit.register(self.flush, True)
            _chain_excepthook()

    def after_step(self, meter: StepMeter) -> None:
        every = self.settings.every
        if every and meter.requests % every == 0 and rank() == 0 and meter is self.chosen():
            _print_line(meter, every)
        if self.settings.out and now() - self._last_flush > self._flush_every:
            t0 = now()
            self.flush()
            # figures cost O(steps): space the flushes so they take under 0.1% of the program's time however long
            self._flush_every = max(FLUSH_S, 1000 * (now() - t0))

    def chosen(self) -> StepMeter | None:
        """The training loader: the one named by loader_name, else the one consumed most."""
        cands = [m for m in self.meters.values() if selected(m.label)]
        return max(cands, key=lambda m: m.requests, default=None)

    def record(self, final: bool = False) -> dict:
        chosen = self.chosen()
        return {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "rank": rank(),
            "local_rank": int(os.environ.get("LOCAL_RANK", 0)),
            "world_size": int(os.environ.get("WORLD_SIZE", 1)),
            "argv": sys.argv,
            "data_free": self.settings.data_free,
            "chosen": chosen.label if chosen else None,
            "loaders": [
                {"label": m.label, "requests": m.requests, "figures": m.figures(final=final)}
                for m in sorted(self.meters.values(), key=lambda m: -m.requests)
            ],
            "error": self.error,
            "final": final,
        } | _where()

    def flush(self, final: bool = False) -> None:
        if not self.settings.out or self.pid != os.getpid() or not self.meters:
            return
        self._last_flush = now()
        rec = self.record(final)
        path = os.path.join(self.settings.out, f"rank-{rec['host']}-{rec['pid']}.json")
        os.makedirs(self.settings.out, exist_ok=True)
        _common("atomic").write_json(path, rec)


def _common(name: str):
    """A module of gpufeed's `common` that imports nothing of gpufeed (the atomic writer, the run record), loaded from
    its file under a private name: inside a watched program the package names of gpufeed stay the program's own."""
    private = f"_gpufeed_{name}"
    if private not in sys.modules:
        path = Path(__file__).resolve().parents[2] / "common" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(private, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[private] = module
    return sys.modules[private]


def _where() -> dict:
    """The device this process computed on, and the libraries it ran with."""
    out: dict = {"versions": _common("run_record").versions()}
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        try:
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            out |= {"device": f"cuda:{torch.cuda.current_device()}", "gpu": props.name, "gpu_uuid": str(props.uuid)}
        except Exception:  # a broken CUDA context after a crash: the figures still count
            out["device"] = "cuda"
    else:
        out["device"] = "cpu"
    return out


def rank() -> int:
    return int(os.environ.get("RANK", 0))


def selected(label: str) -> bool:
    name = STATE.settings.loader_name
    return not name or name in label


def _print_line(meter: StepMeter, every: int) -> None:
    from .verdict import live_line

    recent = meter.figures(last=every)  # the last `every` steps: the line shows the present, not the average
    if recent is None:
        return
    print(live_line(meter.requests, recent), file=sys.stderr, flush=True)
    if STATE.settings.tensorboard:
        _board_scalars(meter.requests, recent)


_BOARD: list = []  # the SummaryWriter, made on first use


def _board_scalars(step: int, f: dict) -> None:
    """The same tags as `train --tensorboard` (training/metrics.py BOARD_TAGS), so a watched program and gpufeed's
    loop draw on one chart; not imported from there, since a top-level `training` here may be the program's own."""
    if not _BOARD:
        from torch.utils.tensorboard import SummaryWriter

        _BOARD.append(SummaryWriter(STATE.settings.tensorboard))
        atexit.register(_BOARD[0].close)
    values = {
        "speed/images_per_s": f["samples_per_s"],
        "speed/starvation": f["starvation"],
        "speed/host_wait_ms": f["wait_median_ms"],
    }
    for tag, value in values.items():
        _BOARD[0].add_scalar(tag, value, step)
    if f["host_behind"] is not None:
        _BOARD[0].add_scalar("speed/host_behind", f["host_behind"], step)
    _BOARD[0].flush()


def _chain_excepthook() -> None:
    previous = sys.excepthook

    def hook(kind, value, tb):
        STATE.error = "".join(traceback.format_exception(kind, value, tb))[-4000:]
        previous(kind, value, tb)

    sys.excepthook = hook


STATE = ProcessState()
