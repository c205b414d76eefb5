"""Data smaller than one batch: every command refuses it before it starts, naming a --batch-size that fits (the
default `--loader fastest` died with a raw StopIteration in `bench fastest`)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from loaders.errors import too_small


def test_too_small_names_a_batch_size_that_fits():
    assert too_small(100, 64) is None and too_small(128, 128) is None
    said = too_small(100, 128)
    assert (
        "100 samples, fewer than one batch of 128" in said and "--batch-size 100 or less (e.g. --batch-size 64)" in said
    )
    said = too_small(100, 64, world_size=2)
    assert "50 per rank over 2 ranks" in said and "--batch-size 50 or less (e.g. --batch-size 32)" in said
    assert "--batch-size 64 or less, or" in too_small(64, 128)  # a power of two already: no second suggestion
    assert "fewer than one per rank" in too_small(1, 1, world_size=2)


@pytest.fixture(scope="module")
def small(synthetic_images):
    return synthetic_images(100, ("files", "hdf5"))


@pytest.mark.parametrize("loader", ["fastest", "hdf5"])
def test_train_refuses_a_batch_larger_than_the_data(small, tmp_path, loader):
    from training.cli import train

    args = [
        "--data",
        str(small),
        "--loader",
        loader,
        "--batch-size",
        "128",
        "--steps",
        "2",
        "--device",
        "cpu",
        "--out",
        str(tmp_path / "run"),
        "--no-progress",
    ]
    result = CliRunner().invoke(train, args)
    assert result.exit_code == 1, result.output
    assert "fewer than one batch of 128: pass --batch-size 100 or less" in result.output
    assert "StopIteration" not in result.output and not (tmp_path / "run").exists()


def test_bench_refuses_a_batch_larger_than_the_data(small, tmp_path):
    from bench.cli import cli

    result = CliRunner().invoke(cli, ["loaders", "--data", str(small), "--batch-size", "32,128", "--device", "cpu"])
    assert result.exit_code == 2 and "--batch-size" in result.output and "--batch-size 100 or less" in result.output
    args = [
        "fastest",
        "--data",
        str(small),
        "--model",
        "tiny",
        "--batch-size",
        "128",
        "--device",
        "cpu",
        "--results",
        str(tmp_path / "res"),
    ]
    result = CliRunner().invoke(cli, args)
    assert (
        result.exit_code == 1 and "--batch-size 100 or less" in result.output and "StopIteration" not in result.output
    )
