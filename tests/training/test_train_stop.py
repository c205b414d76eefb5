"""Every `train` ends within 5 s of the first SIGINT or SIGTERM, whatever it is doing: between steps it checkpoints
and exits 130/143 as before; blocked in open() of a FIFO, or inside a first compiled step that takes minutes, it
exits 130/143 anyway, the last checkpoint intact and no partial file left; a second signal ends it at once. Under
torchrun every rank stops at the same step, with a checkpoint, whether torchrun or a single rank got the signal. A
checkpoint write killed midway leaves a temporary file that the next run removes, and says so; a live writer's is
kept. Real signals to real processes."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import torch
from training_helpers import tiny_cfg

from training.checkpoint import CKPT_NAME
from training.loop import main

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 5.0
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]

# the real hdf5 loader, except that the batch after `after` waits in open() of a FIFO that no one writes to, inside
# a run that checkpoints every 2 steps, with `train`'s deadline on its process
STALLS = """
import sys
from pathlib import Path
from loaders import build_loader
from training.config import TrainConfig
from training.loop import main
from common.stopping import stop_within_deadline

data, out, fifo, after = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])

class Stalls:
    def __init__(self, inner):
        self.inner, self.served = inner, 0
    def __len__(self):
        return len(self.inner)
    def set_epoch(self, epoch):
        self.inner.set_epoch(epoch)
    def close(self):
        self.inner.close()
    def __iter__(self):
        for batch in self.inner:
            if self.served == after:
                print("waiting in open()", file=sys.stderr, flush=True)
                open(fifo, "rb")
            self.served += 1
            yield batch

stop_within_deadline()
cfg = TrainConfig(data=data, out=out, loader="hdf5", model="tiny", batch_size=8, steps=1000, precision="fp32",
                  device="cpu", workers=0, pin_memory=False, sample_every=0, log_every=1, ckpt_every=2,
                  timing_warmup=1, progress=False)
main(cfg, loader=Stalls(build_loader("hdf5", data, batch_size=8, workers=0, pin_memory=False, device="cpu")))
"""


def environment() -> dict[str, str]:
    return os.environ | {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def train_args(data: Path, out: Path, *extra: str) -> list[str]:
    opts = "--loader hdf5 --model tiny --batch-size 8 --steps 100000 --precision fp32 --device cpu --workers 0"
    opts += " --no-pin-memory --sample-every 0 --log-every 1 --ckpt-every 1000 --no-progress --timing-warmup 1"
    return ["-m", "training", "--data", str(data), "--out", str(out), *opts.split(), *extra]


class Watched:
    """A process whose stderr is read as it comes, so a test can wait for a line."""

    def __init__(self, cmd: list[str], env: dict[str, str] | None = None) -> None:
        out, err = subprocess.PIPE, subprocess.PIPE
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=env or environment(), stdout=out, stderr=err, text=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stderr), daemon=True)
        self.reader.start()

    def wait_for(self, text: str, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError(f"{text!r} not seen (exit {self.proc.poll()}): {''.join(self.lines)[-3000:]}")
            time.sleep(0.05)

    def signal_and_time(self, sig: int) -> float:
        """Seconds from the signal to the process's exit."""
        t0 = time.monotonic()
        self.proc.send_signal(sig)
        self.proc.wait(timeout=60)
        took = time.monotonic() - t0
        self.reader.join(timeout=10)
        return took

    @property
    def err(self) -> str:
        return "".join(self.lines)


def logged_steps(out: Path) -> int:
    path = out / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def no_partial_files(*folders: Path) -> list[Path]:
    return [p for folder in folders if folder.exists() for p in folder.rglob("*") if ".tmp" in p.name]


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_between_steps_a_signal_checkpoints_and_exits_within_5_s(images64, tmp_path, sig):
    """The graceful path: the step ends, ckpt.pt is written at it, exit 128+signal, all within 5 s."""
    out = tmp_path / "run"
    run = Watched([sys.executable, *train_args(images64, out)])
    deadline = time.monotonic() + 180
    while logged_steps(out) < 3 and time.monotonic() < deadline and run.proc.poll() is None:
        time.sleep(0.05)
    took = run.signal_and_time(sig)
    print(f"graceful {signal.Signals(sig).name}: exited {took:.2f} s after the signal")
    assert run.proc.returncode == 128 + sig, run.err[-3000:]
    assert took < DEADLINE_S and "continue with --resume" in run.err and "Traceback" not in run.err
    assert torch.load(out / CKPT_NAME, weights_only=True)["step"] == logged_steps(out)
    assert not no_partial_files(out)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_blocked_in_open_of_a_fifo_it_still_exits_within_5_s(images64, tmp_path, sig):
    """The step that fetches batch 5 waits in open() of a FIFO for ever: the process exits 128+signal within 5 s,
    saying that it could not stop at a step and which checkpoint is left (step 4's, unchanged), no partial file."""
    out, fifo = tmp_path / "run", tmp_path / "fifo"
    os.mkfifo(fifo)
    script = tmp_path / "stalls.py"
    script.write_text(STALLS)
    run = Watched([sys.executable, str(script), str(images64), str(out), str(fifo), "5"])
    run.wait_for("waiting in open()")
    time.sleep(0.5)  # inside open() now
    before = digest(out / CKPT_NAME)
    took = run.signal_and_time(sig)
    print(f"blocked on a FIFO, {signal.Signals(sig).name}: exited {took:.2f} s after the signal")
    assert run.proc.returncode == 128 + sig and took < DEADLINE_S, (took, run.err[-3000:])
    name = signal.Signals(sig).name
    assert f"stopped by {name}: the run could not stop at a step boundary within 3 s" in run.err
    assert f"{out / CKPT_NAME} (step 4) is the last good one; continue with --resume" in run.err
    assert digest(out / CKPT_NAME) == before and not no_partial_files(out)


@pytest.mark.slow
def test_a_second_signal_ends_it_at_once(images64, tmp_path):
    """Blocked as above, a second SIGTERM is the default action: the process is gone at once, killed by it."""
    out, fifo = tmp_path / "run", tmp_path / "fifo"
    os.mkfifo(fifo)
    script = tmp_path / "stalls.py"
    script.write_text(STALLS)
    run = Watched([sys.executable, str(script), str(images64), str(out), str(fifo), "1"])
    run.wait_for("waiting in open()")
    time.sleep(0.5)
    run.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    took = run.signal_and_time(signal.SIGTERM)
    assert run.proc.returncode == -signal.SIGTERM and took < 1.0, (took, run.err[-2000:])


@pytest.mark.slow
def test_a_long_first_compiled_step_stops_within_5_s(images64, tmp_path):
    """SIGTERM while the first compiled step compiles (empty local and gpufeed caches, so Inductor really builds):
    exit 143 within 5 s, no checkpoint, no partial file in the run directory or the compile cache, and no child
    process (Inductor's compile workers) left behind."""
    out, cache = tmp_path / "run", tmp_path / "cache"
    local = environment() | {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    args = train_args(
        images64, out, "--compile", "--compile-cache", str(cache), "--precision", "bf16", "--ckpt-every", "1"
    )
    run = Watched([sys.executable, *args], env=local)
    run.wait_for("step 1: compiling the model")
    time.sleep(1.0)
    children = psutil.Process(run.proc.pid).children(recursive=True)
    took = run.signal_and_time(signal.SIGTERM)
    print(f"compiling, SIGTERM: exited {took:.2f} s after the signal")
    assert run.proc.returncode == 143 and took < DEADLINE_S, (took, run.err[-3000:])
    assert "could not stop at a step boundary" in run.err and "no checkpoint was written by this run" in run.err
    assert not (out / CKPT_NAME).exists() and not no_partial_files(out, cache)
    time.sleep(1.0)
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]


def rank_processes(launcher: subprocess.Popen, timeout: float = 120) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ranks = [p for p in psutil.Process(launcher.pid).children(recursive=True) if "training" in p.cmdline()]
        if len(ranks) == 2:
            return sorted(ranks, key=lambda p: p.environ().get("RANK", ""))
        time.sleep(0.1)
    raise AssertionError("torchrun did not start two ranks")


@pytest.mark.slow
@pytest.mark.parametrize("target", ["torchrun", "rank 1 alone"])
def test_under_torchrun_every_rank_stops_at_one_step_within_5_s(images64, tmp_path, target):
    """Two gloo ranks, no log step in sight (where ranks used to agree): SIGTERM to torchrun (which passes it on), or
    to rank 1 only; each rank ends within 5 s of the signal, both at the same step, which ckpt.pt holds."""
    out = tmp_path / "run"
    run = Watched([*TORCHRUN, *train_args(images64, out, "--log-every", "1000")])
    ranks = rank_processes(run.proc)
    time.sleep(15)  # well into the steps
    t0 = time.monotonic()
    (run.proc if target == "torchrun" else ranks[1]).send_signal(signal.SIGTERM)
    gone, _ = psutil.wait_procs(ranks, timeout=30)
    took = time.monotonic() - t0
    print(f"torchrun, SIGTERM to {target}: both ranks gone {took:.2f} s after the signal")
    run.proc.wait(timeout=60)
    run.reader.join(timeout=10)
    assert len(gone) == 2 and took < DEADLINE_S, (took, run.err[-3000:])
    stopped = [line.split(" at step ")[1].split(";")[0] for line in run.lines if line.startswith("stopped by SIGTERM")]
    state = torch.load(out / CKPT_NAME, weights_only=True)
    assert len(stopped) == 2 and set(stopped) == {str(state["step"])}, run.err[-3000:]


WRITER = """
import sys, time
from pathlib import Path
from common.atomic import written
with written(Path(sys.argv[1])) as tmp:
    tmp.write_bytes(b"half a checkpoint")
    print("writing", flush=True)
    time.sleep(600)
"""


def test_temporary_checkpoints_of_dead_writers_are_removed_and_a_live_ones_kept(synthetic_images, tmp_path, capsys):
    """A writer SIGKILLed mid-write, and a file from before the lock whose process is gone: the next run in that
    RUN_DIR removes both and says so; the temporary file of a writer still at work stays."""
    out = tmp_path / "run"
    out.mkdir()
    cmd = [sys.executable, "-c", WRITER, str(out / CKPT_NAME)]
    pipe = subprocess.PIPE
    killed, alive = (subprocess.Popen(cmd, cwd=REPO, env=environment(), stdout=pipe, text=True) for _ in range(2))
    for writer in (killed, alive):
        assert writer.stdout.readline().strip() == "writing"
    killed.kill()
    killed.wait()
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()  # reaped: its pid names no process
    old = out / f".{CKPT_NAME}.tmp-{ended.pid}"
    old.write_bytes(b"from an older version, written without a lock")
    try:
        main(tiny_cfg(synthetic_images(64), out, steps=2, ckpt_every=2, log_every=2))
        err = capsys.readouterr().err
        for pid in (killed.pid, ended.pid):
            left = out / f".{CKPT_NAME}.tmp-{pid}"
            assert not left.exists()
            assert f"removed {left}: a checkpoint that process {pid} did not finish writing (it has ended)" in err
        assert (out / f".{CKPT_NAME}.tmp-{alive.pid}").read_bytes() == b"half a checkpoint"
        assert json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 2
    finally:
        alive.kill()
        alive.wait()
