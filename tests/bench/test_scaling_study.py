"""bench.studies.scaling: a trace's per-step breakdown (exposed all-reduce, idle, launches) from known intervals, and
the summary of a results tree (data-free rates against GPUs, speed-ups over the 1-GPU rate) from real bench runs."""

from __future__ import annotations

import gzip
import json

import pytest
from click.testing import CliRunner

from bench.cli import cli
from bench.studies.scaling import (
    busy,
    loader_table,
    nccl_table,
    overlap,
    plot,
    strong_table,
    summary,
    trace_breakdown,
    weak_table,
)


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


def test_the_training_threads_host_time_is_its_outermost_operators(tmp_path):
    """Two steps. The training thread (the one with the most operators) runs the optimizer 0-4 ms with an operator
    inside it, a copy 5-6 ms and the profiler's closing device wait 10-20 ms; the backward's thread runs 0-9 ms. Per
    step: the optimizer 2 ms, the copy 0.5, nothing of the wait or of the other thread."""
    ms = 1000.0

    def op(name: str, a: float, b: float, tid: int, cat: str = "cpu_op") -> dict:
        return {"ph": "X", "cat": cat, "name": name, "tid": tid, "ts": a * ms, "dur": (b - a) * ms}

    events = [
        op("Optimizer.step#Adam.step", 0, 4, 1, "user_annotation"),
        op("aten::_fused_adam_", 1, 2, 1),
        op("aten::copy_", 5, 6, 1),
        op("cudaDeviceSynchronize", 10, 20, 1, "cuda_runtime"),
        op("autograd::engine::evaluate_function: CompiledFunctionBackward", 0, 9, 2),
    ]
    path = tmp_path / "trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    got = trace_breakdown(path, steps=2)
    assert got["host_ms"] == pytest.approx(2.5)
    assert got["host_top"] == [["Optimizer.step#Adam.step", 2.0], ["aten::copy_", 0.5]]


@pytest.mark.slow
def test_the_summary_sets_each_rank_count_against_one(synthetic_images, tmp_path):
    """A real grid over gloo, the data-free rate alone at 1 and 2 ranks, DDP and the step graph: the summary's table
    holds each rate with its speed-up over the 1-rank rate of the same way, and the JSON every run."""
    data, res = synthetic_images(64), tmp_path / "res"
    opts = "--model tiny --batch-size 8 --backends none --steps 3 --timing-warmup 1 --device cpu --no-progress"
    for name, extra in (("ddp", ["--nproc", "1,2"]), ("sg", ["--nproc", "1,2", "--grad-sync", "step-graph"])):
        done = CliRunner().invoke(
            cli, ["loaders", "--data", str(data), "--out", str(res / name), *opts.split(), *extra]
        )
        assert done.exit_code == 0, done.output
    record = summary(res, steps=3)
    runs = {(r["grad_sync"], r["nproc"]): r for r in record["runs"]}
    assert set(runs) == {("ddp", 1), ("ddp", 2), ("step-graph", 1), ("step-graph", 2)}
    md = (res / "summary.md").read_text()
    up = runs[("step-graph", 2)]["samples_per_s"] / runs[("step-graph", 1)]["samples_per_s"]  # the graph's own one
    rate = runs[("step-graph", 2)]["samples_per_s"]
    assert f"| tiny | 8 | all | step-graph | 2 | {rate:,.0f} | {up:.2f}× |" in md
    assert plot(res).stat().st_size > 10_000  # a drawn figure, not an empty canvas


def _row(**kw) -> dict:
    base = {"model": "m", "batch_size": 8, "nproc": 2, "grad_sync": "ddp", "cpus": None, "workers": None}
    return base | {"starvation": 0.0, "starvation_any": None, "waited_on_rank": None, "host_behind_max": 0.0} | kw


def test_loaders_are_set_against_the_unpinned_data_free_rate_too():
    """A pinned data-free run the host cannot keep up with flatters its loaders: the table also divides by the
    unpinned one, and takes no share of a loss under 1%."""
    rs = [
        _row(kind="data_free", samples_per_s=1000.0),
        _row(kind="data_free", samples_per_s=800.0, cpus=2),
        _row(kind="loader", backend="gpu", cpus=2, samples_per_s=900.0, vs_data_free=1.125, starvation_any=0.01),
        _row(
            kind="loader",
            backend="hdf5",
            cpus=2,
            workers=1,
            samples_per_s=796.0,
            vs_data_free=0.995,
            starvation_any=0.03,
            waited_on_rank=1,
            waited_on_share=0.75,
            host_behind_max=0.43,
        ),
        _row(
            kind="loader",
            backend="torch",
            cpus=2,
            workers=1,
            samples_per_s=400.0,
            vs_data_free=0.5,
            starvation_any=0.45,
            waited_on_rank=0,
            waited_on_share=0.6,
        ),
    ]
    lines = {line.split(" | ")[3]: line for line in loader_table(rs)[2:]}
    assert "| 112.5% | 90.0% |" in lines["gpu"]
    hdf5 = lines["hdf5, 1 workers"]
    assert "| 99.5% | 79.6% |" in hdf5 and hdf5.endswith("| rank 1 (75%) | – | 43% |")
    assert lines["torch, 1 workers"].endswith("| rank 0 (60%) | 90% | 0% |")  # 45% waited of 50% lost


def test_the_nccl_probe_table_reads_each_probe(tmp_path):
    reduce = {"what": "ddpm_cifar10 gradient fp32", "bytes": 142985228, "ms": 0.559, "busbw_gb_s": 255.8}
    probe = {"world_size": 2, "flat_copies_ms": 1.165, "all_reduce": [reduce]}
    (tmp_path / "nccl").mkdir()
    (tmp_path / "nccl" / "probe-np2.json").write_text(json.dumps(probe))
    lines = nccl_table(tmp_path)
    assert "| 2 | ddpm_cifar10 gradient fp32 | 143.0 | 0.559 | 256 |" in lines
    assert any("1.165" in line and "copies" in line for line in lines)


def test_the_step_graph_scales_from_its_own_one_gpu_rate():
    """step-graph captures one GPU's step too, so its speed-ups divide by its own 1-GPU run; every other way shares
    the 1-GPU run without a gradient sync."""
    rs = [
        _row(kind="data_free", nproc=1, samples_per_s=1000.0, compile=True, weights_equal=None),
        _row(kind="data_free", nproc=1, grad_sync="step-graph", samples_per_s=900.0, compile=True, weights_equal=None),
        _row(kind="data_free", nproc=4, samples_per_s=3000.0, compile=True, weights_equal=True),
        _row(kind="data_free", nproc=4, grad_sync="step-graph", samples_per_s=3600.0, compile=True, weights_equal=True),
    ]
    lines = "\n".join(weak_table(rs))
    assert "| m | 8 | all | ddp | 4 | 3,000 | 3.00× | 75.0% | yes |" in lines
    assert "| m | 8 | all | step-graph | 4 | 3,600 | 4.00× | 100.0% | yes |" in lines
    assert "| m | 8 | all | step-graph | 1 | 900 | 1.00× |" in lines


def test_strong_scaling_divides_by_the_same_way_at_the_whole_batch():
    """A global batch split over GPUs is set against one GPU's rate at that whole batch, trained the same way."""
    rs = [
        _row(kind="data_free", nproc=1, batch_size=512, samples_per_s=1000.0, compile=True),
        _row(kind="data_free", nproc=4, batch_size=128, samples_per_s=3000.0, compile=True),
        _row(kind="data_free", nproc=1, batch_size=512, grad_sync="step-graph", samples_per_s=800.0, compile=True),
        _row(kind="data_free", nproc=4, batch_size=128, grad_sync="step-graph", samples_per_s=3200.0, compile=True),
    ]
    lines = "\n".join(strong_table(rs))
    assert "| m | 512 | all | ddp | 4 | 128 | 3,000 | 3.00× |" in lines
    assert "| m | 512 | all | step-graph | 4 | 128 | 3,200 | 4.00× |" in lines
