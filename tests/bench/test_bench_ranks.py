"""`bench loaders --nproc`: each configuration under torchrun with N ranks on cores of their own (gloo on the CPU
here), the ranks' records merged into one, and the scaling table and plot of `bench report`."""

from __future__ import annotations

import csv
import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench.cli import cli
from bench.grid.job import expand


@pytest.fixture(scope="module")
def images128(synthetic_images) -> Path:
    return synthetic_images(128)


def args(data: Path, out: Path, *extra: str) -> list[str]:
    opts = "--backends hdf5 --workers 0 --pin-memory on --model tiny --steps 3 --timing-warmup 1 --device cpu"
    opts += " --no-progress"
    return ["loaders", "--data", str(data), "--out", str(out), *opts.split(), *extra]


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two ranks on a core each need 2 cores")
def test_two_ranks_on_a_core_each_merge_into_one_record(images128, tmp_path):
    """--nproc 1,2 --cpus 1: the 2-rank runs hold both ranks' figures, pinned to different cores, their rates summed,
    starvation as the group's with the mean and the worst rank beside it; DDP kept the ranks in step; the report draws
    the weak-scaling table."""
    out = tmp_path / "results"
    done = CliRunner().invoke(cli, args(images128, out, "--batch-size", "16", "--nproc", "1,2", "--cpus", "1"))
    assert done.exit_code == 0, done.output
    rec = json.loads((out / "hdf5-w0-pinna-np2-bs16-tiny-cpus1-fp32-cpu-r0.json").read_text())  # a CPU's default
    f, ranks = rec["figures"], rec["figures"]["ranks"]
    assert rec["job"]["nproc"] == f["nproc"] == 2 and [r["rank"] for r in ranks] == [0, 1]
    assert f["samples_per_s"] == pytest.approx(sum(r["samples_per_s"] for r in ranks))
    assert all(r["samples_per_s"] > 0 for r in ranks) and ranks[0]["param_checksum"] == ranks[1]["param_checksum"]
    s = f["starvation"]
    assert s["starvation_mean"] == pytest.approx(sum(r["starvation"] for r in ranks) / 2)
    assert s["starvation_max"] == max(r["starvation"] for r in ranks)
    # every step costs the group its longest wait: at least the worst rank's own (spans differ by rounding only)
    assert s["starvation_any"] >= 0.95 * s["starvation_max"] and s["waited_on_rank"] in (0, 1, None)
    assert s["starvation"] == s["starvation_any"], "the record's starvation is the time the group lost"
    pinned = rec["run"]["cpus_pinned"]
    assert len(pinned) == 2 and all(len(c) == 1 for c in pinned) and pinned[0] != pinned[1]
    assert f["cpu_cores"] == pytest.approx(sum(r["cpu_cores"] for r in ranks))
    free = json.loads((out / "datafree-np2-bs16-tiny-cpus1-fp32-cpu-r0.json").read_text())
    assert len(free["figures"]["ranks"]) == 2 and rec["data_free_rate"] == free["figures"]["samples_per_s"]
    assert not list((out / ".ranks").iterdir()), "the ranks' records are merged, then removed"

    with open(out / "results.csv") as fh:
        assert {r["nproc"] for r in csv.DictReader(fh)} == {"1", "2"}
    md = (out / "results.md").read_text()
    assert "## tiny, batch 16, cpu, 2 ranks, 1 cores per rank" in md and "worst rank starvation" in md
    assert "some rank starved" in md and "made the others wait" in md
    assert "## Weak scaling: tiny, 16 per GPU, cpu" in md and "| hdf5 | 1 | " in md and "| data-free | 1 | " in md
    assert (out / "plot-scaling-weak-tiny-b16.png").stat().st_size > 10_000


@pytest.mark.slow
def test_data_free_alone_with_another_grad_sync(images128, tmp_path):
    """--backends none measures the model's data-free rate alone; --grad-sync reaches every rank's training loop and
    names the runs, so DDP's results and another way's sit side by side."""
    out = tmp_path / "results"
    done = CliRunner().invoke(
        cli,
        args(images128, out, "--backends", "none", "--batch-size", "16", "--nproc", "2", "--grad-sync", "step-graph"),
    )
    assert done.exit_code == 0, done.output
    (rec,) = [json.loads(p.read_text()) for p in out.glob("datafree-*.json")]
    # fp32: the CPU's default precision
    assert rec["name"] == "datafree-np2-bs16-tiny-cpusall-fp32-step-graph-cpu-r0"
    assert rec["job"]["grad_sync"] == "step-graph"
    ranks = rec["figures"]["ranks"]
    assert len(ranks) == 2 and ranks[0]["param_checksum"] == ranks[1]["param_checksum"]


def test_a_failing_rank_fails_the_configuration(images128, tmp_path):
    """Cores asked for beyond those allowed: rank 1 cannot be pinned and exits, torchrun stops rank 0, and the
    configuration is recorded as failed, with no rank's partial record left behind."""
    from bench.grid.job import Job
    from bench.grid.runner import child_env, run_job

    allowed = len(os.sched_getaffinity(0))
    job = Job(
        kind="loader",
        data=str(images128),
        backend="hdf5",
        workers=0,
        pin_memory=None,
        batch_size=16,
        model="none",
        steps=2,
        warmup=1,
        device="cpu",
        cpus=allowed,
        compile=False,
        nproc=2,
    )
    path = tmp_path / f"{job.name}.json"
    with open(tmp_path / "log", "wb") as log:
        from bench.grid.runner import GridConfig

        ok = run_job(job, path, child_env(GridConfig(data=images128, out=tmp_path)), 300, log)
    rec = json.loads(path.read_text())
    assert not ok and "wrote nothing" in rec["error"] and "figures" not in rec, rec
    assert "cores needed" in (tmp_path / "log").read_text(), "rank 1 says why in the grid's log"
    assert not list((tmp_path / ".ranks").glob("*.json"))


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--nproc", "2", "--cpus", str(len(os.sched_getaffinity(0)))], "cores, .* available here"),
        (["--nproc", "1,3", "--global-batch", "64"], "64 does not divide by --nproc 3"),
        (["--nproc", "2", "--global-batch", "64", "--batch-size", "32"], "--global-batch or --batch-size, not both"),
        (["--nproc", "0"], "must be >= 1"),
    ],
)
def test_rank_options_are_checked_before_any_run(images128, tmp_path, extra, message):
    done = CliRunner().invoke(cli, args(images128, tmp_path / "out", *extra))
    assert done.exit_code == 2 and not (tmp_path / "out").exists()
    assert re.search(message, done.output), done.output


def test_global_batch_divides_over_ranks():
    """Strong scaling: --global-batch 512 at 1, 2 and 4 ranks runs 512, 256 and 128 per rank, each its own scenario
    with its own data-free run; nproc 1 keeps the names results had before. Compiled on several GPUs, --grad-sync's
    default takes the step graph there, as train does, and the name says so."""
    jobs = expand(
        data=Path("d"),
        backends=("hdf5",),
        workers=(4,),
        pin_memory=(True,),
        batch_sizes=(128,),
        model="tiny",
        steps=2,
        warmup=1,
        device="cuda",
        cpus=2,
        compile=True,
        repeats=1,
        nprocs=(1, 2, 4),
        global_batch=512,
    )
    assert [(j.nproc, j.batch_size, j.kind) for j in jobs] == [
        (n, 512 // n, k) for n in (1, 2, 4) for k in ("data_free", "loader")
    ]
    assert jobs[1].name == "hdf5-w4-pinon-bs512-tiny-cpus2-bf16-compiled-r0"
    assert jobs[3].name == "hdf5-w4-pinon-np2-bs256-tiny-cpus2-bf16-compiled-step-graph-r0"
    assert [j.grad_sync for j in jobs] == ["ddp"] * 2 + ["step-graph"] * 4
