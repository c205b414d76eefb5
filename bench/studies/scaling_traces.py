"""Where a step's time goes in `train --profile` traces of 1 and N ranks (bench/studies/scaling.py tabulates it), per
profiled step on the GPU: its span (first kernel's start to last kernel's end, over the steps), the time some kernel
ran, NCCL's kernels and the part of them no other kernel overlapped (exposed all-reduce), the idle time, and on the host
the CUDA graph launches and kernel launches per step (graph splits show as more graph launches; eager pieces as kernel
launches) and the training thread's time in its outermost operators."""

from __future__ import annotations

import gzip
from collections import defaultdict
from pathlib import Path

from ..grid.crosscheck import GPU_CATS, load_trace


def busy(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of intervals, as disjoint sorted intervals."""
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def overlap(xs: list[tuple[float, float]], ys: list[tuple[float, float]]) -> float:
    """Total length of the intersection of two disjoint sorted interval lists."""
    i = j = 0
    total = 0.0
    while i < len(xs) and j < len(ys):
        a, b = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        total += max(0.0, b - a)
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return total


def trace_breakdown(path: Path, steps: int) -> dict:
    """Per profiled step (ms): GPU span, busy, idle, NCCL's kernel time and its exposed part; graph and kernel
    launches."""
    events = load_trace(path)
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATS]
    nccl = busy([(e["ts"], e["ts"] + e.get("dur", 0)) for e in gpu if "nccl" in e["name"].lower()])
    other = busy([(e["ts"], e["ts"] + e.get("dur", 0)) for e in gpu if "nccl" not in e["name"].lower()])
    every = busy(nccl + other)
    span = (every[-1][1] - every[0][0]) if every else 0.0
    launches: dict[str, int] = defaultdict(int)
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver"):
            launches[e["name"]] += 1
    per = lambda us: round(us / 1e3 / steps, 3)  # noqa: E731
    nccl_us = sum(b - a for a, b in nccl)
    return {
        "span_ms": per(span),
        "busy_ms": per(sum(b - a for a, b in every)),
        "idle_ms": per(span - sum(b - a for a, b in every)),
        "nccl_ms": per(nccl_us),
        "nccl_exposed_ms": per(nccl_us - overlap(nccl, other)),
        "graph_launches": launches.get("cudaGraphLaunch", 0) / steps,
        "kernel_launches": sum(n for k, n in launches.items() if "LaunchKernel" in k) / steps,
        "memcpy_ms": per(sum(e.get("dur", 0) for e in gpu if e.get("cat") == "gpu_memcpy")),
    } | host_breakdown(events, steps)


HOST_CATS = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver")


def host_breakdown(events: list[dict], steps: int, top: int = 6) -> dict:
    """Per profiled step (ms): the training thread's time in its outermost operators (what it launches, and where it
    waits), and the `top` of them it spent most on. The training thread is the host thread with the most operators;
    the backward's thread and the collectives' threads are left out. The profiler's closing wait for the device
    (cudaDeviceSynchronize after the last step) is not the loop's, so it is left out too."""
    threads: dict[object, list[dict]] = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in HOST_CATS and e.get("name") != "cudaDeviceSynchronize":
            threads[e.get("tid")].append(e)
    if not threads:
        return {"host_ms": None, "host_top": []}
    outer, end = [], float("-inf")
    for e in sorted(max(threads.values(), key=len), key=lambda e: (e["ts"], -e.get("dur", 0))):
        if e["ts"] >= end:  # not inside the operator before it
            outer.append(e)
            end = e["ts"] + e.get("dur", 0)
    spent: dict[str, float] = defaultdict(float)
    for e in outer:
        spent[e["name"]] += e.get("dur", 0) / 1e3 / steps
    ranked = sorted(spent.items(), key=lambda kv: kv[1], reverse=True)[:top]
    return {"host_ms": round(sum(spent.values()), 3), "host_top": [[name, round(ms, 3)] for name, ms in ranked]}


def traces(root: Path, steps: int) -> list[dict]:
    """The breakdown of every RUN/profile/[rankN/]trace.json(.gz) under `root`, one row per rank."""
    out = []
    for path in sorted(Path(root).rglob("trace.json*")):
        ranked = path.parent.name.startswith("rank")  # RUN/profile/rankN/ under torchrun, RUN/profile/ alone
        rank, run = (path.parent.name, path.parents[2].name) if ranked else ("rank0", path.parents[1].name)
        out.append({"run": run, "rank": rank, "trace": str(path.relative_to(root))} | trace_breakdown(path, steps))
    return out


def compress_traces(root: Path) -> None:
    """gzip every trace.json under `root` in place (the archive that comes back is small)."""
    for path in Path(root).rglob("trace.json"):
        with open(path, "rb") as f, gzip.open(f"{path}.gz", "wb") as g:
            g.write(f.read())
        path.unlink()
