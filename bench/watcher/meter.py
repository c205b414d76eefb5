"""One watched loader's steps, measured the way gpufeed's own loop measures them (training/starvation.py).

A step is the time between two batch requests of the loader. At each request the meter records a CUDA event on the
current stream (R) and, once the batch is in the program's hands, another (D). Both execute on the stream in order,
so D - R on the GPU's clock is exactly how long the GPU had nothing of this program to run because the batch was not
there yet: when the host is ahead, R completes only when the previous step's kernels are done and D follows at once
(gap ~0). On a CPU-only program there is no queue: the share of wall time spent blocked in `next()` is the starvation.

Two flags per step say whether the host keeps ahead of the GPU:
- `host_behind`: the GPU had drained by the time the batch was in hand (as gpufeed's loop defines it: any host work
  between steps, the wait for the batch included, then idles the GPU one for one);
- `drained_at_request`: the GPU had drained before the program even asked for the batch. Input cannot cause that:
  the program waited for the GPU itself (a `.item()` or `.cpu()` of the loss, a copy from pageable memory) or its
  step is launch-bound.

Events are resolved as soon as they complete (`query()`, no sync), so a run of a million steps keeps a few floats per
step and a handful of live events, and figures can be read at any time while it runs.
"""

from __future__ import annotations

import statistics
import time
from array import array
from collections import deque


def percentile(values, q: float) -> float:
    """As training/starvation.py computes it. Not imported from there: this module loads inside the watched program,
    where a top-level `training` may be the program's own package."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


class StepMeter:
    """Request and delivery times of one loader's batches; figures over the steps after `warmup`."""

    def __init__(self, label: str, warmup: int = 20) -> None:
        self.label, self.warmup = label, warmup
        self.t_req, self.t_got = array("d"), array("d")  # host perf_counter at each request and delivery
        self.gpu_t = array("d")  # ms from the first request's event to each request's event (NaN: unresolved)
        self.gap = array("d")  # ms the GPU idled between each request and its delivery (NaN: unresolved / no CUDA)
        self.behind, self.drained = bytearray(), bytearray()
        self.starts = bytearray()  # 1 where a request was the first of an iterator: an epoch start
        self.batch_size: int | None = None
        self.cuda_steps = 0  # requests that carried CUDA events (none on a CPU-only program)
        self._anchor = None  # the first CUDA event: every request's GPU time is measured from it
        self._pending: deque = deque()  # (step, request event, delivery event) not yet complete

    @property
    def requests(self) -> int:
        return len(self.t_got)

    def add(
        self, t_req: float, t_got: float, ev_req=None, ev_got=None, drained: bool = False, batch_size=None, first=False
    ):
        """One delivered batch. `ev_req` was recorded at the request, `ev_got` after delivery (CUDA), or both None;
        `first`: the first batch of an iterator (an epoch)."""
        i = len(self.t_got)
        self.t_req.append(t_req)
        self.t_got.append(t_got)
        self.gpu_t.append(float("nan"))
        self.gap.append(float("nan"))
        self.drained.append(drained)
        self.starts.append(bool(first))
        self.behind.append(bool(ev_req is not None and ev_req.query()))
        if self.batch_size is None and batch_size:
            self.batch_size = batch_size
        if ev_req is not None:
            self.cuda_steps += 1
            if self._anchor is None:
                self._anchor = ev_req
            self._pending.append((i, ev_req, ev_got))
        self.resolve()

    def resolve(self, wait: bool = False) -> None:
        """Turn completed event pairs into times (all of them after a device sync when `wait`)."""
        if wait and self._pending:
            self._pending[-1][2].synchronize()
        while self._pending and self._pending[0][2].query():
            i, ev_req, ev_got = self._pending.popleft()
            self.gpu_t[i] = self._anchor.elapsed_time(ev_req)
            self.gap[i] = ev_req.elapsed_time(ev_got)

    def figures(self, final: bool = False, last: int | None = None) -> dict | None:
        """Figures over steps [warmup, last resolved request), or over the `last` N steps only; None until two
        measured requests exist."""
        if final:
            try:
                self.resolve(wait=True)
            except Exception:  # a crashed CUDA context: keep the host figures
                self._pending.clear()
        n = self.requests
        # a short run keeps at least half its steps measured, with less warm-up (stated): a warm-up that swallowed
        # all but two steps gave a verdict from two
        a = min(self.warmup, max(n - 3, 0), n // 2)
        cuda = self.cuda_steps == n and n > 0
        if cuda:
            while n > a and self.gpu_t[n - 1] != self.gpu_t[n - 1]:  # NaN: not resolved yet
                n -= 1
        if last is not None:
            a = max(a, n - 1 - last)
        if n - a < 2:
            return None
        steps = n - 1 - a  # step i spans request i to request i+1
        waits = [self.t_got[i] - self.t_req[i] for i in range(a, a + steps)]
        wall = self.t_req[n - 1] - self.t_req[a]
        if cuda:
            span = (self.gpu_t[n - 1] - self.gpu_t[a]) / 1e3
            idles = [max(0.0, self.gap[i]) / 1e3 for i in range(a, a + steps)]
            source = "cuda-events"
        else:
            span, idles, source = wall, waits, "host-wait"
        idle = sum(idles)
        at_starts = [x for x, first in zip(idles, self.starts[a : a + steps]) if first]
        behind = self.behind[a : a + steps]
        drained = self.drained[a : a + steps]
        bs = self.batch_size or 0
        return {
            "loader": self.label,
            "steps": steps,
            "warmup": a,
            "batch_size": bs,
            "samples_per_s": steps * bs / wall if wall > 0 else 0.0,
            "steps_per_s": steps / wall if wall > 0 else 0.0,
            "wall_s": wall,
            "starvation": idle / span if span > 0 else 0.0,
            "gpu_idle_s": idle,
            "wait_median_ms": 1e3 * statistics.median(waits),
            "wait_p95_ms": 1e3 * percentile(waits, 0.95),
            "wait_max_ms": 1e3 * max(waits),
            "host_behind": sum(behind) / steps if cuda else None,
            "drained_at_request": sum(drained) / steps if cuda else None,
            # the share of the idle time at the first batch of an epoch (None: no epoch began in the measured steps)
            "epoch_start_idle": sum(at_starts) / idle if at_starts and idle > 0 else None,
            "source": source,
            "window": [self.t_req[a], self.t_req[n - 1]],  # host clock (CLOCK_MONOTONIC, shared by processes)
        }


def now() -> float:
    return time.perf_counter()
