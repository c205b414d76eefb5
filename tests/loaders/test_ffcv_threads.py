"""FFCV on a machine with fewer cores than --workers: numba refuses more threads than the cores, so the loader runs
at that limit and says so, bench folds the larger counts into one configuration, and torch keeps its own threads."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from bench.grid.job import capped, expand, thread_limit
from loaders import build_loader


@pytest.fixture
def torch_threads():
    """Two torch threads for the test (one core would hide a change to one), restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield 2
    torch.set_num_threads(before)


@pytest.mark.slow  # make test-slow, for CI's budget
def test_more_workers_than_cores_run_at_numbas_limit(synthetic_images, capfd, torch_threads):
    """Asking for more workers than numba allows threads yields every batch at the limit and names it, instead of
    numba's "The number of threads must be between 1 and N"."""
    data, limit = synthetic_images(64, ("ffcv",)), thread_limit()
    opts = dict(batch_size=16, workers=limit + 3, device="cpu", shuffle=False, augment=False)
    with build_loader("ffcv", data, **opts) as loader:
        batches = list(loader)
        assert loader.threads == limit
    assert len(batches) == 4 and batches[0].x.shape == (16, 3, 32, 32)
    assert f"ffcv: {limit + 3} workers asked, numba runs at most {limit} threads here" in capfd.readouterr().err


def test_ffcv_leaves_torch_threads_alone(synthetic_images, torch_threads):
    """FFCV sets torch's thread count to 1 as it is imported and to its workers' as an epoch starts: a model trained
    on the CPU beside it would run on one thread. The loader keeps torch's count as it was."""
    data = synthetic_images(64, ("ffcv",))
    with build_loader("ffcv", data, batch_size=16, workers=1, device="cpu") as loader:
        assert torch.get_num_threads() == torch_threads
        for _ in loader:
            assert torch.get_num_threads() == torch_threads


def test_grid_folds_ffcv_worker_counts_above_the_limit(tmp_path):
    """Worker counts above the limit are one configuration, run at the limit; torch's are not capped."""
    limit = thread_limit()
    jobs = expand(
        data=tmp_path,
        backends=("ffcv", "torch"),
        workers=(1, limit + 1, limit + 5),
        pin_memory=(True,),
        batch_sizes=(8,),
        model="tiny",
        steps=2,
        warmup=1,
        device="cpu",
        cpus=None,
        compile=False,
        repeats=1,
    )
    ffcv = sorted(j.workers for j in jobs if j.backend == "ffcv")
    assert ffcv == sorted({1, limit})
    assert sorted(j.workers for j in jobs if j.backend == "torch") == [1, limit + 1, limit + 5]
    note = capped(("ffcv", "torch"), (1, limit + 1, limit + 5), None)
    assert note and f"at most {limit} threads" in note and f"--workers {limit + 1}, {limit + 5} run as {limit}" in note
    assert capped(("torch",), (limit + 5,), None) is None and capped(("ffcv",), (1,), None) is None


@pytest.mark.slow
def test_bench_loaders_with_more_ffcv_workers_than_cores(synthetic_images, tmp_path):
    """`bench loaders --backends ffcv --workers 1,N` with N above the cores finishes every configuration and exits 0
    (it lost them to numba's error and exited 1)."""
    from bench.cli import cli

    data, limit = synthetic_images(64, ("ffcv",)), thread_limit()
    args = [
        "loaders",
        "--data",
        str(data),
        "--backends",
        "ffcv",
        "--workers",
        f"1,{limit + 2}",
        "--model",
        "tiny",
        "--batch-size",
        "8",
        "--steps",
        "2",
        "--timing-warmup",
        "1",
        "--device",
        "cpu",
        "--precision",
        "fp32",
        "--out",
        str(tmp_path / "out"),
        "--no-progress",
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert f"--workers {limit + 2} runs as {limit}" in result.output and "0 failed" in result.output
    runs = [json.loads(p.read_text()) for p in (tmp_path / "out").glob("ffcv-*.json")]
    assert sorted(r["job"]["workers"] for r in runs) == sorted({1, limit}) and not any("error" in r for r in runs)
