"""How long the accelerator waits for input: the one measurement gpufeed exists for.

A training loop brackets each step with `StepTimer`:

    batch = timer.fetch(loader_iter)   # host time blocked on the next batch
    timer.step_begin()                 # CUDA event, enqueued after the batch is there
    ... forward, backward, optimizer step (all enqueued asynchronously) ...
    timer.step_end()                   # CUDA event after the last kernel of the step

On CUDA the events execute on the stream in order, so `begin[i+1] - end[i]` is exactly the time the GPU had
nothing of this loop to run: it finished step i and step i+1 had not been enqueued yet, because the host was
waiting for the batch (or copying it). When the host is ahead, step i+1 is already queued and the gap is ~0.
On CPU there is no queue: starvation is the share of wall time spent blocked in `next()`.

Work between steps that is not waiting for input (sample grids, checkpoints) goes inside `with timer.paused():`
and is left out of both the idle gaps and the span.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import TypeVar

T = TypeVar("T")
# the newest StepTimer, held strongly: bench reads the training loop's own timer after training.loop.main returns
_latest: list = [None]


@dataclass
class StarvationSummary:
    steps: int  # measured steps (after warm-up)
    wall_s: float  # host wall time over the measured steps
    starvation: float  # share of time the device sat idle waiting for input (0..1)
    gpu_idle_s: float  # summed idle gaps between steps (CUDA events); equals wait time on CPU
    wait_median_ms: float  # host time blocked on the next batch, per step
    wait_p95_ms: float
    wait_max_ms: float
    source: str  # "cuda-events" or "host-wait"
    # Is the host ahead of the device? Host time to enqueue a step, and (CUDA) the share of steps the host began only
    # after the device had finished the previous one: near 1 the loop is host-bound at step boundaries, so any host
    # work between steps (fetching the batch too) idles the GPU one for one; near 0 a queued step hides it.
    enqueue_median_ms: float = 0.0
    host_behind: float | None = None
    # the share of the idle time that fell before the first step of an epoch (None: no epoch began among the measured
    # steps, or none was marked): near 1 a loader that starts its workers or readers again each epoch is the cause
    epoch_start_idle: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


class StepTimer:
    """Records, per step, the host wait for the batch and (on CUDA) events around the GPU work."""

    def __init__(self, device: str = "cpu", clock: Callable[[], float] = time.perf_counter) -> None:
        import torch

        self._torch, self._clock = torch, clock  # the host clock; a test gives one it advances itself
        self.cuda = str(device).startswith("cuda") and torch.cuda.is_available()
        self.waits: list[float] = []
        self.wall: list[float] = []  # host clock at each step_begin
        self._fetch_t0: list[float] = []
        self._end_wall: list[float] = []
        self._begin: list = []
        self._end: list = []
        self._behind: list[bool] = []  # per step_begin after the first: previous step already done on the device
        self._pauses: list[tuple] = []  # (after step index, host t0, host t1, CUDA event at start, at end)
        self._epoch_starts: set[int] = set()  # steps whose batch was the first of an epoch
        _latest[0] = self

    def fetch(self, it: Iterator[T]) -> T:
        """next(it), timing how long the host is blocked. Raises StopIteration like next()."""
        t0 = self._clock()
        self._fetch_t0.append(t0)
        item = next(it)
        self.waits.append(self._clock() - t0)
        return item

    def mark_epoch_start(self) -> None:
        """The batch just fetched is the first of an epoch."""
        self._epoch_starts.add(len(self.waits) - 1)

    def step_begin(self) -> None:
        self.wall.append(self._clock())
        if self.cuda:
            if self._end:
                self._behind.append(self._end[-1].query())  # cudaEventQuery: no sync
            self._begin.append(self._event())

    def step_end(self) -> None:
        self._end_wall.append(self._clock())
        if self.cuda:
            self._end.append(self._event())

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Between steps: time spent here (sampling, checkpointing) is neither training nor waiting for input."""
        t0, ev0 = self._clock(), self._event() if self.cuda else None
        try:
            yield
        finally:
            ev1 = self._event() if self.cuda else None
            self._pauses.append((len(self.wall) - 1, t0, self._clock(), ev0, ev1))

    def _event(self):
        ev = self._torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def window(self, skip: int = 0, stop: int | None = None) -> tuple[float, float]:
        """Host clock (perf_counter) from the fetch of step `skip` to the end of step `stop - 1`: the span to which
        other host measurements (CPU time of the process tree) are matched."""
        n = len(self.wall) if stop is None else stop
        return self._fetch_t0[skip], self._end_wall[n - 1]

    def idle_per_step(self, skip: int = 0, stop: int | None = None) -> list[float]:
        """Seconds the device waited for input before each step of [skip, stop), as `summary` counts them: the gap
        since the previous step (CUDA events; 0 for the first step recorded) or the host's wait for the batch (CPU).
        Synchronizes the device once."""
        n = len(self.wall) if stop is None else min(stop, len(self.wall))
        if not self.cuda:
            return self.waits[skip:n]
        self._torch.cuda.synchronize()
        cut = [0.0] * len(self.wall)
        for i, _, _, ev0, ev1 in self._pauses:
            cut[i] += ev0.elapsed_time(ev1) / 1e3
        gap = lambda i: self._end[i - 1].elapsed_time(self._begin[i]) / 1e3 - cut[i - 1]  # noqa: E731
        return [max(0.0, gap(i)) if i > 0 else 0.0 for i in range(skip, n)]

    def summary(self, skip: int = 0, stop: int | None = None) -> StarvationSummary:
        """Figures over steps [skip, stop) (stop defaults to every step recorded). Synchronizes the device once."""
        n = len(self.wall) if stop is None else min(stop, len(self.wall))
        if n - skip < 2:
            raise ValueError(f"need at least 2 measured steps after skipping {skip}, have {n}")
        if self.cuda:
            self._torch.cuda.synchronize()
        # waits[i] is the fetch of the batch that step i consumes
        waits = self.waits[skip:n]
        # on CUDA the span starts where step skip-1 ended, so it holds as many gaps as steps, as the host's span holds
        # as many fetches (with skip 0 there is no earlier event: one gap fewer)
        first = max(skip - 1, 0) if self.cuda else skip
        pauses = [p for p in self._pauses if first <= p[0] < n - 1]  # those before a measured step
        if self.cuda:
            cut = [0.0] * len(self.wall)
            for i, _, _, ev0, ev1 in pauses:
                cut[i] += ev0.elapsed_time(ev1) / 1e3
            gaps = [self._end[i].elapsed_time(self._begin[i + 1]) / 1e3 - cut[i] for i in range(first, n - 1)]
            start = self._end[skip - 1] if skip else self._begin[0]
            span = start.elapsed_time(self._end[n - 1]) / 1e3 - sum(cut)
            idle_before = {i + 1: max(0.0, g) for i, g in zip(range(first, n - 1), gaps)}  # gap i precedes step i+1
            wall_s, source = span, "cuda-events"
        else:
            # the CPU does the step itself, so time blocked on input is time not training
            wall_s = self._end_wall[n - 1] - self._fetch_t0[skip] - sum(t1 - t0 for _, t0, t1, _, _ in pauses)
            idle_before, source = dict(zip(range(skip, n), waits)), "host-wait"
        idle = sum(idle_before.values())
        at_starts = [idle_before.get(i, 0.0) for i in self._epoch_starts if skip <= i < n]
        behind = self._behind[skip : n - 1] if self.cuda else []  # _behind[i] is step i+1's begin
        enqueue = [self._end_wall[i] - self.wall[i] for i in range(skip, n)]
        return StarvationSummary(
            steps=n - skip,
            wall_s=wall_s,
            starvation=idle / wall_s if wall_s > 0 else 0.0,
            gpu_idle_s=idle,
            wait_median_ms=1e3 * statistics.median(waits),
            wait_p95_ms=1e3 * _percentile(waits, 0.95),
            wait_max_ms=1e3 * max(waits),
            source=source,
            enqueue_median_ms=1e3 * statistics.median(enqueue),
            host_behind=sum(behind) / len(behind) if behind else None,
            epoch_start_idle=sum(at_starts) / idle if at_starts and idle > 0 else None,
        )


def latest_timer() -> StepTimer | None:
    """The most recently created StepTimer, e.g. the one training.loop.main just used."""
    return _latest[0]
