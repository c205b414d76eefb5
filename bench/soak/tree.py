"""What a command's process tree holds at one instant, for `bench soak`: host memory (RSS and PSS summed over the
tree), GPU memory (NVML: the tree's own processes and the whole device), open file descriptors, threads and child
processes; and every process the tree ever had, so the ones still alive after the command ended can be named."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import psutil

from ..grid.monitor import pss


@dataclass
class Tree:
    """The command's process and every descendant ever seen (pid, create time), so leftovers can be found later."""

    root: psutil.Process
    seen: dict[int, float] = field(default_factory=dict)

    def live(self) -> list[psutil.Process]:
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return []
        for p in procs:
            try:
                self.seen.setdefault(p.pid, p.create_time())
            except psutil.Error:
                pass
        return procs

    def leftovers(self) -> list[dict]:
        """Processes of the tree still alive (pid reuse is told apart by the creation time)."""
        out = []
        for pid, created in self.seen.items():
            try:
                p = psutil.Process(pid)
                if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                    out.append({"pid": pid, "cmdline": " ".join(p.cmdline())[:300]})
            except psutil.Error:
                continue
        return out


def sample(tree: Tree, t0: float, nvml) -> dict:
    procs = tree.live()
    rec = {"t_s": time.monotonic() - t0, "rss_mib": 0.0, "pss_mib": 0.0, "fds": 0, "threads": 0}
    rec["children"] = max(0, len(procs) - 1)
    for p in procs:
        try:
            with p.oneshot():
                rec["rss_mib"] += p.memory_info().rss / 2**20
                rec["pss_mib"] += pss(p) / 2**20
                rec["fds"] += p.num_fds()
                rec["threads"] += p.num_threads()
        except psutil.Error:  # exited between listing and reading
            continue
    rec |= gpu_memory(nvml, {p.pid for p in procs})
    return rec


def open_nvml():
    try:
        import pynvml

        pynvml.nvmlInit()
        return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception:  # no driver or no GPU: GPU columns stay empty
        return None


def gpu_memory(handles, pids: set[int]) -> dict:
    """Used memory of the tree's processes (None where NVML does not list them, e.g. inside a container's pid
    namespace) and of all devices."""
    if not handles:
        return {"gpu_tree_mib": None, "gpu_used_mib": None}
    import pynvml

    tree, used = 0.0, 0.0
    for h in handles:
        used += pynvml.nvmlDeviceGetMemoryInfo(h).used / 2**20
        for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
            if proc.pid in pids and proc.usedGpuMemory:
                tree += proc.usedGpuMemory / 2**20
    return {"gpu_tree_mib": tree or None, "gpu_used_mib": used}
