"""What every benchmark result records about where and how it ran (hardware, versions, commit, command), and how a
record is written: atomically, so an interrupted writer leaves the old file or the new one, never half of one."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

PACKAGES = ("torch", "torchvision", "numpy", "h5py", "ffcv", "nvidia-dali-cuda120", "nvidia-dali-cuda130", "numba")


def _git(*args: str) -> subprocess.CompletedProcess:
    repo = Path(__file__).resolve().parents[1]  # the checkout: common/ is at its root
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=10)


def git_commit() -> str:
    if os.environ.get("GPUFEED_COMMIT"):  # set where the tree was copied without .git (the GPU machine)
        return os.environ["GPUFEED_COMMIT"]
    try:
        out = _git("rev-parse", "HEAD")
        dirty = _git("status", "--porcelain", "-uno").stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "") if out.returncode == 0 else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def git_diff() -> str | None:
    """The uncommitted changes to tracked files (None on a clean tree): a `+dirty` commit alone does not say what ran.
    Where the tree was copied without .git, GPUFEED_DIFF names a file holding the diff made before copying."""
    if os.environ.get("GPUFEED_DIFF"):
        return Path(os.environ["GPUFEED_DIFF"]).read_text() or None
    try:
        out = _git("diff", "HEAD")
        return (out.stdout or None) if out.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def versions() -> dict[str, str | None]:
    """Python, the packages installed, and the CUDA and NCCL torch was built with (None where it has none)."""
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    import torch

    found["torch_cuda"] = torch.version.cuda
    try:
        found["nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None
    except (AttributeError, RuntimeError):  # a build without NCCL
        found["nccl"] = None
    return found


def memory_gib() -> float | None:
    """The host's memory, from /proc/meminfo (None where there is none to read)."""
    try:
        kib = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    return round(kib / 2**20, 1)


def hardware(device: str | None = None) -> dict:
    """CPU, and the GPU `device` runs on (the current one when None; none for a CPU device)."""
    import torch

    cpu = platform.processor()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    info = {
        "cpu": cpu,
        "cpus_allowed": len(os.sched_getaffinity(0)),
        "cpus_total": os.cpu_count(),
        "memory_gib": memory_gib(),
    }
    if torch.cuda.is_available() and (device is None or device.startswith("cuda")):
        index = torch.device(device).index if device else None
        props = torch.cuda.get_device_properties(torch.cuda.current_device() if index is None else index)
        info |= {
            "gpu": props.name,
            "gpu_count": torch.cuda.device_count(),
            "cuda": torch.version.cuda,
            # which physical GPU: a resumed grid may span machines, and ratios pair runs of one GPU
            "gpu_uuid": str(props.uuid),
        }
    return info


def run_record(device: str | None = None) -> dict:
    """Where a result came from: the one provenance record every study and bench command writes beside its figures
    (bench.records.provenance checks it). A dirty tree's diff is kept, so the code that ran can be rebuilt."""
    commit = git_commit()
    return {
        "when": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join(sys.argv),
        "executable": sys.executable,
        "commit": commit,
        "hardware": hardware(device),
        "versions": versions(),
    } | ({"diff": git_diff()} if commit.endswith("+dirty") else {})
