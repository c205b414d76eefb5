"""An independent second opinion on the starvation figure: a PyTorch profiler (CUPTI) trace of the same steps.

`StepTimer` measures idle time with CUDA events the loop records on the stream. Here the same quantity comes from
the kernels themselves: `ProfiledLoader` wraps the loader the loop consumes, marks every fetch with a
`gpufeed::fetch` annotation and runs the profiler from fetch `start_at` on. In the trace, each GPU activity
(kernel, memcpy, memset) is linked through its correlation id to the host call that launched it; what was launched
between the end of fetch j and the start of fetch j+1 is training step j, what was launched inside a fetch is the
loader's own work (it counts as idle, as between the CUDA events). Then, like StepTimer:

    starvation = sum_j max(0, first_start[j+1] - last_end[j]) / (last_end[last] - last_end[0])

over steps 1..last, each with the gap before it (as StepTimer counts them). Step 0 only marks where the span starts;
the last profiled step is left out on both sides (kernels launched after the loop would join it). The trace also
gives the total idle share (all gaps, within steps too) for reference. GPU only: without CUDA there are no kernels.
"""

from __future__ import annotations

import bisect
import gzip
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

from common.atomic import written

ANNOTATION = "gpufeed::fetch"
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")


class ProfiledLoader:
    """Delegates to `loader`; profiles (CPU + CUDA) from fetch number `start_at` until `finish()`."""

    def __init__(self, loader, start_at: int, trace_path: Path) -> None:
        self.loader, self.start_at, self.trace_path = loader, start_at, Path(trace_path)
        self.fetches, self.prof = 0, None

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)

    def __iter__(self) -> Iterator:
        import torch

        it = iter(self.loader)
        for _ in range(len(self.loader)):  # the contract's batches per epoch: one mark per batch, none for the end
            if self.fetches == self.start_at and self.prof is None:
                self.prof = torch.profiler.profile(activities=_activities(), record_shapes=False)
                self.prof.__enter__()
            self.fetches += 1
            with torch.profiler.record_function(ANNOTATION) if self.prof is not None else _null():
                try:
                    batch = next(it)
                except StopIteration:
                    return
            yield batch
        for _ in it:  # the end of the epoch, outside the marks, so every mark is one batch
            pass

    def finish(self) -> Path | None:
        """Stop the profiler (after the device finished) and write the trace; None if it never started."""
        import torch

        if self.prof is None:
            return None
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.prof.__exit__(None, None, None)
        self.trace_path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as scratch:  # a folder of this process's own: nothing planted in it
            plain = Path(scratch) / "trace.json"
            self.prof.export_chrome_trace(str(plain))  # compressed here: not every torch version gzips on export
            self.prof = None
            with written(self.trace_path) as tmp, open(plain, "rb") as src, gzip.open(tmp, "wb") as dst:
                dst.write(src.read())
        return self.trace_path

    def close(self) -> None:
        self.loader.close()


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc) -> None:
        return None


def _activities() -> list:
    import torch
    from torch.profiler import ProfilerActivity

    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])


def load_trace(path: Path) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def fetch_spans(events: list[dict]) -> list[tuple[float, float]]:
    """(start, end) in microseconds of every marked fetch of the trace, in order."""
    return sorted((e["ts"], e["ts"] + e.get("dur", 0)) for e in events if _is(e, ("user_annotation",), ANNOTATION))


def trace_starvation(events: list[dict]) -> dict:
    """Starvation from a Chrome trace: see the module docstring. `steps` is how many steps the figure covers."""
    fetches = fetch_spans(events)
    launches = {
        e["args"]["correlation"]: e["ts"]
        for e in events
        if e.get("cat") in LAUNCH_CATS and "correlation" in e.get("args", {})
    }
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATS]
    if len(fetches) < 3 or not gpu:
        raise ValueError(f"trace has {len(fetches)} marked fetches and {len(gpu)} GPU activities: need 3 and some")
    starts, ends = [f[0] for f in fetches], [f[1] for f in fetches]
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    for e in gpu:
        t = launches.get(e.get("args", {}).get("correlation"))
        if t is None:
            continue
        j = bisect.bisect_right(ends, t) - 1  # the last fetch that ended before the launch
        if j < 0 or bisect.bisect_right(starts, t) - 1 != j:  # before the first fetch, or inside fetch j+1
            continue
        first[j] = min(first.get(j, e["ts"]), e["ts"])
        last[j] = max(last.get(j, 0.0), e["ts"] + e.get("dur", 0))
    steps = [j for j in range(len(fetches) - 1) if j in first]  # the last step is left out (see docstring)
    if len(steps) < 2 or steps != list(range(steps[0], steps[-1] + 1)):
        raise ValueError("fewer than 2 consecutive profiled steps launched GPU work")
    gaps = [max(0.0, first[b] - last[a]) for a, b in zip(steps, steps[1:])]
    span = last[steps[-1]] - last[steps[0]]
    busy = _union([(e["ts"], e["ts"] + e.get("dur", 0)) for e in gpu], last[steps[0]], last[steps[-1]])
    return {
        "first_fetch": steps[0] + 1,  # index among the profiled fetches of the first step the figure covers
        "steps": len(steps) - 1,
        "span_s": span / 1e6,
        "starvation": sum(gaps) / span if span > 0 else 0.0,
        "idle_total": 1.0 - busy / span if span > 0 else 0.0,
    }


def _is(e: dict, cats: tuple[str, ...], name: str) -> bool:
    return e.get("ph") == "X" and e.get("cat") in cats and e.get("name") == name


def _union(intervals: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Length of the union of intervals clipped to [lo, hi]."""
    total, cur_a, cur_b = 0.0, None, None
    for a, b in sorted(intervals):
        a, b = max(a, lo), min(b, hi)
        if b <= a:
            continue
        if cur_b is None or a > cur_b:
            total += (cur_b - cur_a) if cur_b is not None else 0.0
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    return total + ((cur_b - cur_a) if cur_b is not None else 0.0)
