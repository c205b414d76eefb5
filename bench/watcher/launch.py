"""Running the watched program once: its environment (the sitecustomize that installs the hooks in every Python
process below it, the settings), CPU pinning, signals, and what the machine did meanwhile (CPU time and memory of the
whole process tree, NVML figures of every GPU, matched afterwards to the GPUs the ranks used)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import asdict
from pathlib import Path

from ..grid.monitor import ResourceMonitor, read_nvml
from .merge import loaders_seen, merge, read_ranks
from .state import ENV, Settings

BOOT = Path(__file__).resolve().parent / "boot"  # holds sitecustomize.py, which loads the hooks from beside it


class GpuSampler:
    """NVML utilisation, power and memory of every GPU every `interval` s (the parent does not know yet which GPUs
    the program will use, and must not start CUDA itself)."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval, self.samples, self._handles = interval, [], {}
        try:
            import pynvml

            pynvml.nvmlInit()
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                uuid = pynvml.nvmlDeviceGetUUID(h)
                self._handles[uuid.decode() if isinstance(uuid, bytes) else uuid] = h
        except Exception:  # no driver or no library: no NVML figures
            self._handles = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpufeed-nvml", daemon=True)

    def __enter__(self) -> GpuSampler:
        if self._handles:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.perf_counter(), {u: read_nvml(h) for u, h in self._handles.items()}))
            self._stop.wait(self.interval)

    def figures(self, t0: float, t1: float, uuids: list[str]) -> dict:
        want = {u if u.startswith("GPU-") else f"GPU-{u}" for u in uuids}
        reads = [
            r for t, per in self.samples if t0 <= t <= t1 for u, r in per.items() if u in want and r[0] is not None
        ]
        if not reads:
            return {}
        return {
            "nvml_gpu_util_pct": sum(r[0] for r in reads) / len(reads),
            "nvml_power_w": sum(r[1] for r in reads) / len(reads),  # per GPU
            "nvml_gpu_mem_mib": max(r[2] for r in reads) / 2**20,
        }


def program_env(settings: Settings) -> dict[str, str]:
    path = [str(BOOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.environ | {ENV: json.dumps(asdict(settings)), "PYTHONPATH": os.pathsep.join(path)}


def _pinning(cpus: int | None):
    if not cpus:
        return None
    cores = sorted(os.sched_getaffinity(0))[:cpus]
    return lambda: os.sched_setaffinity(0, cores)


def run_program(command: list[str], settings: Settings, cpus: int | None = None) -> dict:
    """Run `command` to its end under the hooks; the merged figures, per-rank figures, exit code, errors."""
    run_dir = Path(settings.out)
    run_dir.mkdir(parents=True, exist_ok=True)
    for old in run_dir.glob("rank-*.json"):
        old.unlink()
    with ResourceMonitor() as mon, GpuSampler() as gpus:
        proc = subprocess.Popen(command, env=program_env(settings), preexec_fn=_pinning(cpus))
        interrupted = _wait(proc)
    ranks = read_ranks(run_dir)
    fig = merge(ranks)
    if fig is not None:
        t0, t1 = fig["window"]
        fig |= {k: v for k, v in mon.figures(t0, t1).items() if k in ("cpu_cores", "peak_mem_mib", "other_cores")}
        if fig.get("other_cores") is not None:  # other programs' share of the cores the program may use
            fig["other_share"] = fig["other_cores"] / len(os.sched_getaffinity(0))
        fig |= gpus.figures(t0, t1, [r["gpu_uuid"] for r in ranks if r.get("gpu_uuid")])
    first = ranks[0] if ranks else {}
    return {
        "mode": "data-free" if settings.data_free else "real",
        "exit_code": proc.returncode,
        "interrupted": interrupted,
        "figures": fig,
        "per_rank": [{"rank": r["rank"], "pid": r["pid"], "chosen": r["chosen"]} | _brief(r) for r in ranks],
        "loaders": loaders_seen(ranks),
        "error": next((r["error"] for r in ranks if r.get("error")), None),
        "where": {k: first.get(k) for k in ("device", "gpu", "gpu_uuid", "versions") if first.get(k)},
    }


def _brief(rec: dict) -> dict:
    from .merge import rank_figures

    f = rank_figures(rec) or {}
    return {k: f.get(k) for k in ("steps", "samples_per_s", "starvation", "host_behind", "drained_at_request")}


def _wait(proc: subprocess.Popen) -> bool:
    """Wait for the program. Ctrl-C reaches it from the terminal too; if it is still running a moment later (a
    signal sent to this process alone), pass it on, and SIGTERM likewise: the program decides how to stop, and how
    long that takes (the `bench watch` command waits for it: common.stopping.wait_for_the_program)."""
    from common.stopping import Stopped

    interrupted = False
    old_term = signal.signal(signal.SIGTERM, lambda *_: proc.send_signal(signal.SIGTERM))
    try:
        while True:
            try:
                proc.wait()
                return interrupted
            except (KeyboardInterrupt, Stopped):
                interrupted = True
                try:
                    proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    proc.send_signal(signal.SIGINT)
                except (KeyboardInterrupt, Stopped):
                    proc.send_signal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGTERM, old_term)
