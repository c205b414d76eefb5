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


def git_commit() -> str:
    if os.environ.get("GPUFEED_COMMIT"):  # set where the tree was copied without .git (the GPU machine)
        return os.environ["GPUFEED_COMMIT"]
    repo = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "-uno"], capture_output=True, text=True, timeout=5
        ).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "") if out.returncode == 0 else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def hardware(device: str | None = None) -> dict:
    """CPU, and the GPU `device` runs on (the current one when None; none for a CPU device)."""
    import torch

    cpu = platform.processor()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    info = {"cpu": cpu, "cpus_allowed": len(os.sched_getaffinity(0)), "cpus_total": os.cpu_count()}
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
    return {
        "when": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join(sys.argv),
        "commit": git_commit(),
        "hardware": hardware(device),
        "versions": versions(),
    }
