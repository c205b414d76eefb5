"""The measurement itself: StepTimer's arithmetic with a loader that sleeps a known time, the trace-based
cross-check on a hand-built trace and on a real (CPU) profiler trace, and the process-tree CPU monitor."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from bench.grid.crosscheck import ANNOTATION, ProfiledLoader, load_trace, trace_starvation
from bench.grid.monitor import ResourceMonitor
from training.starvation import StepTimer, latest_timer


def sleeping_batches(seconds: float):
    while True:
        time.sleep(seconds)
        yield object()


class Clock:
    """A host clock that moves only when told: the timer's arithmetic checked exactly, without sleeping."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def batches(self, seconds: float):
        """A loader that takes `seconds` of this clock to produce each batch."""
        while True:
            self.now += seconds
            yield object()


def timed_run(fetch_s: float, step_s: float, steps: int, warmup: int = 2, pause_s: float = 0.0) -> StepTimer:
    clock = Clock()
    timer, it = StepTimer("cpu", clock=clock), clock.batches(fetch_s)
    for _ in range(warmup + steps):
        timer.fetch(it)
        timer.step_begin()
        clock.now += step_s
        timer.step_end()
        if pause_s:
            with timer.paused():
                clock.now += pause_s
    return timer


def test_sleeping_loader_starvation_is_sleep_over_sleep_plus_step():
    """A loader taking 20 ms before a 30 ms step starves the device 20/50 = 40% of the time, and waits 20 ms."""
    s = timed_run(0.020, 0.030, steps=20).summary(skip=2)
    assert s.source == "host-wait" and s.steps == 20
    assert s.starvation == pytest.approx(0.4)
    assert s.wait_median_ms == pytest.approx(20)
    assert s.gpu_idle_s == pytest.approx(20 * 0.020)


def test_the_idle_time_at_epoch_starts_is_its_share():
    """Epochs of 4 steps whose first batch takes 200 ms and the rest 10 ms, before 30 ms steps: of the 12 measured
    steps, 3 begin an epoch, so 600 of the 690 ms waited fell at epoch starts; unmarked, there is no such figure."""
    clock = Clock()
    timer = StepTimer("cpu", clock=clock)
    for step in range(14):
        first = step % 4 == 0
        timer.fetch(clock.batches(0.200 if first else 0.010))
        if first:
            timer.mark_epoch_start()
        timer.step_begin()
        clock.now += 0.030
        timer.step_end()
    s = timer.summary(skip=2)  # steps 2..13: epoch starts at 4, 8 and 12
    assert s.epoch_start_idle == pytest.approx(0.600 / 0.690)
    assert timed_run(0.020, 0.030, steps=10).summary(skip=2).epoch_start_idle is None


def test_paused_time_is_neither_training_nor_starvation():
    """A 60 ms pause after every step (a sample grid, a checkpoint) leaves 40% starvation and a 50 ms/step span."""
    s = timed_run(0.020, 0.030, steps=10, pause_s=0.060).summary(skip=2)
    assert s.starvation == pytest.approx(0.4)
    assert s.wall_s == pytest.approx(10 * 0.050)


def test_fast_loader_is_not_starved_and_slow_one_is():
    """A loader ten times faster than the step starves 3/33 = 9%; one ten times slower 30/33 = 91%."""
    fast = timed_run(0.003, 0.030, steps=10).summary(skip=2).starvation
    slow = timed_run(0.030, 0.003, steps=10).summary(skip=2).starvation
    assert fast == pytest.approx(3 / 33)
    assert slow == pytest.approx(30 / 33)


def test_the_timer_reads_real_time_by_default():
    """Without a clock given, a loader that sleeps 20 ms is seen waiting at least that long (the host's own clock)."""
    timer = StepTimer("cpu")
    timer.fetch(sleeping_batches(0.020))
    assert timer.waits[0] >= 0.019


@pytest.mark.gpu
def test_cuda_events_count_the_gap_before_every_measured_step():
    """The host waits for each 30 ms GPU step to finish, then 20 ms for its batch: the GPU idles 20 of every 50 ms,
    40% over 10 measured steps (leaving out the gap before the first measured step would give 18/48 = 37.5%)."""
    import torch

    torch.cuda._sleep(1000)  # CUDA context and the sleep kernel loaded before calibrating
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(10_000_000)
    end.record()
    end.synchronize()
    cycles = int(10_000_000 * 30 / start.elapsed_time(end))  # a 30 ms kernel
    timer, it = StepTimer("cuda"), sleeping_batches(0.020)
    for _ in range(12):
        timer.fetch(it)
        timer.step_begin()
        torch.cuda._sleep(cycles)
        timer.step_end()
        torch.cuda.synchronize()  # as a loop reading its loss at once would: no step is queued during the fetch
    s = timer.summary(skip=2)
    assert s.source == "cuda-events" and s.steps == 10 and s.host_behind == 1.0
    # the host's own time between a step's end and the next launch (sync, Python, the sleep's overshoot) only adds to
    # the 20 ms gap: 0.5 ms of it read 41% on a fresh H100
    assert 0.395 <= s.starvation <= 0.43
    assert s.wall_s == pytest.approx(10 * 0.050, rel=0.04)


def test_summary_stop_and_window_cover_the_asked_steps():
    """summary(skip, stop) counts exactly steps [skip, stop); window() spans their host time; latest_timer finds it."""
    timer = timed_run(0.001, 0.005, steps=8, warmup=0)
    assert latest_timer() is timer
    part = timer.summary(skip=2, stop=6)
    assert part.steps == 4
    t0, t1 = timer.window(2, 6)
    assert part.wall_s == pytest.approx(t1 - t0)
    assert 4 * 0.006 <= t1 - t0 < 4 * 0.006 + 0.05
    with pytest.raises(ValueError, match="at least 2"):
        timer.summary(skip=7)


def _x(cat: str, name: str, ts: float, dur: float, corr: int | None = None) -> dict:
    e = {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}
    if corr is not None:
        e["args"] = {"correlation": corr}
    return e


def hand_built_trace() -> list[dict]:
    """4 fetches (0-10, 30-40, 60-70, 90-100 us). Steps 0-2 launch kernels after their fetch; the loader launches
    one kernel inside fetch 2 (counted as idle); step 3 (the last) is left out by design."""
    ev = [_x("user_annotation", ANNOTATION, t, 10) for t in (0, 30, 60, 90)]
    launches = {1: 11, 2: 12, 3: 41, 4: 61, 5: 71, 6: 101}  # correlation -> host launch time
    ev += [_x("cuda_runtime", "cudaLaunchKernel", t, 1, c) for c, t in launches.items()]
    ev += [_x("kernel", "a", 15, 10, 1), _x("kernel", "b", 25, 20, 2)]  # step 0 on the GPU: 15-45
    ev += [_x("kernel", "c", 50, 20, 3)]  # step 1: 50-70, idle gap 45-50 (5)
    ev += [_x("gpu_memcpy", "loader", 72, 3, 4)]  # launched inside fetch 2: loader work, part of the gap
    ev += [_x("kernel", "d", 80, 20, 5)]  # step 2: 80-100, gap 70-80 (10)
    ev += [_x("kernel", "e", 120, 50, 6), _x("kernel", "stray", 5, 1, 99)]  # last step; no launch: ignored
    return ev


def test_trace_starvation_on_a_hand_built_trace():
    """Steps 1 and 2, each with the gap before it, from the end of step 0: (5 + 10) / (100 - 45); all gaps 12 / 55."""
    tr = trace_starvation(hand_built_trace())
    assert tr["steps"] == 2 and tr["first_fetch"] == 1
    assert tr["starvation"] == pytest.approx(15 / 55)
    assert tr["idle_total"] == pytest.approx(12 / 55)  # busy 50-70, 72-75, 80-100


def test_trace_without_kernels_is_refused():
    """A trace with no GPU activity (a CPU run) cannot give a GPU idle figure: a clear error, not 0%."""
    with pytest.raises(ValueError, match="GPU activities"):
        trace_starvation([e for e in hand_built_trace() if e["cat"] == "user_annotation"])


class CountingLoader:
    def __init__(self, n: int) -> None:
        self.n, self.closed = n, False

    def __iter__(self):
        return iter(range(self.n))

    def __len__(self) -> int:
        return self.n

    def set_epoch(self, epoch: int) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def test_profiled_loader_marks_every_fetch_from_start_at(tmp_path):
    """A real profiler trace (CPU here) holds one gpufeed::fetch mark per fetch from `start_at` on."""
    inner = CountingLoader(10)
    loader = ProfiledLoader(inner, start_at=4, trace_path=tmp_path / "t.trace.json.gz")
    assert list(loader) == list(range(10)) and len(loader) == 10
    path = loader.finish()
    marks = [e for e in load_trace(path) if e.get("name") == ANNOTATION and e.get("ph") == "X"]
    assert len(marks) == 6  # fetches 4..9; the epoch's end is not a fetch
    loader.close()
    assert inner.closed


def test_monitor_counts_cpu_of_child_processes():
    """CPU time of a child process (as DataLoader workers are) is counted: a spinning child keeps ~1 core busy."""
    with ResourceMonitor(interval=0.1) as mon:
        child = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<1.5: pass"])
        t0 = time.perf_counter()
        child.wait()
        t1 = time.perf_counter()
    f = mon.figures(t0 + 0.3, t1)  # after the interpreter's start-up
    assert 0.3 < f["cpu_cores"] <= 2.2  # one busy core, less whatever the other engineers' jobs take from it
    assert f["peak_mem_mib"] > 10


@pytest.mark.slow  # ~30 s on 2 cores: make test-slow keeps CI under 12 minutes
def test_crosscheck_inside_the_real_training_loop(tmp_path):
    """A cross-check run profiles the loop's measured steps (a mark per fetch); on CPU it says there are no kernels."""
    from bench.grid.job import Job
    from bench.grid.run_one import measure
    from dataprep.convert import ConvertConfig, convert

    data = tmp_path / "img"
    convert(
        ConvertConfig(output=data, source="synthetic-images", limit=64, formats=("hdf5",), workers=1, progress=False)
    )
    job = Job(
        kind="loader",
        data=str(data),
        backend="hdf5",
        workers=0,
        pin_memory=None,
        batch_size=16,
        model="tiny",
        steps=4,
        warmup=2,
        device="cpu",
        cpus=None,
        compile=False,
        crosscheck=True,
    )
    figures = measure(job, tmp_path / "t.trace.json.gz")
    assert figures["starvation"]["steps"] == 4 and figures["samples_per_s"] > 0
    assert "GPU activities" in figures["crosscheck"]["error"]
    marks = [e for e in load_trace(tmp_path / "t.trace.json.gz") if e.get("name") == ANNOTATION]
    assert len(marks) == 4  # the measured steps' fetches (across an epoch boundary), from the first after warm-up
