"""What a configuration costs the machine: CPU time and memory of the whole process tree (the training process, its
DataLoader workers, FFCV and DALI threads live inside it or below it), and GPU utilisation, power and memory from
NVML where present. A thread samples every `interval` seconds; figures are read over a host-clock window, so the
start-up (imports, compilation, worker start) stays out of the per-image CPU cost.

CPU time per process is cumulative, so a worker that exits keeps the last value seen: the tree's total only grows.
Memory is the sum over the tree of PSS (shared pages split between the processes that map them, so forked workers
sharing the parent's libraries are not counted N times), or RSS where PSS cannot be read.

The busy time of the cores the run may use, whoever used them, is sampled too: what is not the tree's (`other_cores`)
is other programs, or a hypervisor's steal, taking cores from the run. On a busy machine the rates are noise."""

from __future__ import annotations

import bisect
import os
import threading
import time
from dataclasses import dataclass, field

import psutil

PSS_EVERY = 5  # PSS reads /proc/PID/smaps_rollup: ~1 ms per process, so every 5th sample (1 s) is enough


@dataclass
class Sample:
    t: float  # time.perf_counter()
    cpu_s: float  # cumulative CPU seconds (user + system) of every process ever seen in the tree
    mem_bytes: float  # PSS (or RSS) summed over the live tree; NaN on samples that skip the memory read
    busy_s: float = float("nan")  # cumulative busy seconds of the cores this process may use, by anyone
    gpu_util: float | None = None  # NVML: % of the last sample period in which a kernel ran
    gpu_power_w: float | None = None
    gpu_mem_bytes: float | None = None  # NVML: used on the whole device (every process)


@dataclass
class ResourceMonitor:
    interval: float = 0.2  # fine enough to see a 10 s window with 50 samples, cheap enough to stay out of the figures
    gpu_uuid: str | None = None  # NVML device to sample, as torch names it (NVML's indices ignore CUDA_VISIBLE_DEVICES)
    samples: list[Sample] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._root = psutil.Process()
        self._cores = sorted(os.sched_getaffinity(0))
        self._cpu_seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpufeed-monitor", daemon=True)
        self._nvml = _open_nvml(self.gpu_uuid) if self.gpu_uuid is not None else None

    def __enter__(self) -> ResourceMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample(len(self.samples))

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            self._sample(i)
            i += 1
            self._stop.wait(self.interval)

    def _sample(self, i: int) -> None:
        procs = [self._root]
        try:
            procs += self._root.children(recursive=True)
        except psutil.Error:
            pass
        mem = 0.0 if i % PSS_EVERY == 0 else float("nan")
        for p in procs:
            try:
                with p.oneshot():
                    t = p.cpu_times()
                    self._cpu_seen[p.pid] = max(self._cpu_seen.get(p.pid, 0.0), t.user + t.system)
                    if mem == mem:  # not NaN: a memory sample
                        mem += pss(p)
            except psutil.Error:  # exited between listing and reading: its last CPU time stays counted
                continue
        s = Sample(time.perf_counter(), sum(self._cpu_seen.values()), mem, busy_seconds(self._cores))
        if self._nvml is not None:
            s.gpu_util, s.gpu_power_w, s.gpu_mem_bytes = read_nvml(self._nvml)
        self.samples.append(s)

    def figures(self, t0: float, t1: float) -> dict:
        """CPU cores busy over [t0, t1], peak memory over the whole run, NVML means over [t0, t1]."""
        times = [s.t for s in self.samples]
        a, b = max(0, bisect.bisect_right(times, t0) - 1), min(len(times) - 1, bisect.bisect_left(times, t1))
        out: dict = {"cpu_cores": None, "peak_mem_mib": None}
        if b > a and times[b] > times[a]:
            span = times[b] - times[a]
            out["cpu_cores"] = (self.samples[b].cpu_s - self.samples[a].cpu_s) / span
            busy = (self.samples[b].busy_s - self.samples[a].busy_s) / span
            if busy == busy:  # not NaN: the machine's counters were readable
                out["other_cores"] = max(0.0, busy - out["cpu_cores"])
        mems = [s.mem_bytes for s in self.samples if s.mem_bytes == s.mem_bytes]
        out["peak_mem_mib"] = max(mems) / 2**20 if mems else None
        inside = [s for s in self.samples[a : b + 1] if s.gpu_util is not None]
        if inside:
            out["nvml_gpu_util_pct"] = sum(s.gpu_util for s in inside) / len(inside)
            out["nvml_power_w"] = sum(s.gpu_power_w for s in inside) / len(inside)
            out["nvml_gpu_mem_mib"] = max(s.gpu_mem_bytes for s in self.samples if s.gpu_mem_bytes) / 2**20
            out["nvml_samples"] = len(inside)
        return out


def busy_seconds(cores: list[int]) -> float:
    """Seconds the cores in `cores` spent busy (not idle or waiting for I/O) since boot, anyone's work and a
    hypervisor's steal included; NaN where the counters cannot be read."""
    try:
        per_core = psutil.cpu_times(percpu=True)
        return sum(
            sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
            for i, t in enumerate(per_core)
            if i in cores
        )
    except (OSError, AttributeError):
        return float("nan")


def pss(p: psutil.Process) -> float:
    try:
        return float(p.memory_full_info().pss)
    except (psutil.AccessDenied, AttributeError):
        return float(p.memory_info().rss)


def _open_nvml(uuid: str):
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    except Exception:  # no driver, no library, no device: NVML figures are simply absent
        return None


def read_nvml(handle) -> tuple[float | None, float | None, float | None]:
    import pynvml

    try:
        util = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
        power = pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3  # milliwatts
        mem = pynvml.nvmlDeviceGetMemoryInfo(handle).used
        return float(util), float(power), float(mem)
    except Exception:
        return None, None, None
