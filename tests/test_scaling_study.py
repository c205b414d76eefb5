"""bench.studies.scaling: a trace's per-step breakdown (exposed all-reduce, idle, launches) from known intervals, and
the summary of a results tree (data-free rates against GPUs, speed-ups over the 1-GPU rate) from real bench runs."""

from __future__ import annotations

import gzip
import json

import pytest
from click.testing import CliRunner

from bench.cli import cli
from bench.studies.scaling import busy, overlap, summary, trace_breakdown


def test_intervals_merge_and_intersect():
    assert busy([(5, 7), (0, 2), (1, 3), (7, 8)]) == [(0, 3), (5, 8)]
    assert overlap([(0, 3), (5, 8)], [(2, 6), (7, 10)]) == 1 + 1 + 1


def test_a_traces_breakdown_per_step(tmp_path):
    """Two steps on one GPU: compute kernels 0-8 and 10-18 ms, an NCCL all-reduce 6-12 ms (2 ms of it under no
    compute kernel: 8-10), a memcpy 18-18.5, 3 graph launches and 4 kernel launches on the host; per step, half of
    each."""
    ms = 1000.0  # the trace's unit is the microsecond
    kernel = lambda name, a, b, cat="kernel": {"ph": "X", "cat": cat, "name": name, "ts": a * ms, "dur": (b - a) * ms}  # noqa: E731
    events = [
        kernel("conv", 0, 8),
        kernel("conv", 10, 18),
        kernel("ncclDevKernel_AllReduce", 6, 12),
        kernel("Memcpy HtoD", 18, 18.5, "gpu_memcpy"),
    ]
    events += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 0, "dur": 1}] * 3
    events += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 0, "dur": 1}] * 4
    path = tmp_path / "trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    got = trace_breakdown(path, steps=2)
    assert got["span_ms"] == pytest.approx(18.5 / 2)
    assert got["busy_ms"] == pytest.approx(18.5 / 2)  # the all-reduce fills the gap between the two kernels
    assert got["idle_ms"] == pytest.approx(0.0)
    assert got["nccl_ms"] == pytest.approx(6 / 2) and got["nccl_exposed_ms"] == pytest.approx(2 / 2)
    assert got["graph_launches"] == 1.5 and got["kernel_launches"] == 2 and got["memcpy_ms"] == pytest.approx(0.25)


@pytest.mark.slow
def test_the_summary_sets_each_rank_count_against_one(synthetic_images, tmp_path):
    """A real grid over gloo, the data-free rate alone at 1 and 2 ranks, DDP and flat: the summary's table holds each
    rate with its speed-up over the 1-rank rate of the same setting, and the JSON every run."""
    data, res = synthetic_images(64), tmp_path / "res"
    opts = "--model tiny --batch-size 8 --backends none --steps 3 --timing-warmup 1 --device cpu --no-progress"
    for name, extra in (("ddp", ["--nproc", "1,2"]), ("flat", ["--nproc", "2", "--grad-sync", "flat"])):
        done = CliRunner().invoke(
            cli, ["loaders", "--data", str(data), "--out", str(res / name), *opts.split(), *extra]
        )
        assert done.exit_code == 0, done.output
    record = summary(res, steps=3)
    runs = {(r["grad_sync"], r["nproc"]): r for r in record["runs"]}
    assert set(runs) == {("ddp", 1), ("ddp", 2), ("flat", 2)}
    md = (res / "summary.md").read_text()
    up = runs[("flat", 2)]["samples_per_s"] / runs[("ddp", 1)]["samples_per_s"]
    assert f"| tiny | 8 | all | flat | 2 | {runs[('flat', 2)]['samples_per_s']:,.0f} | {up:.2f}× |" in md
