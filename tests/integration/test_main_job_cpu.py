"""The main job on a CPU as a newcomer types it: `bench loaders --data D`, then `train --data D --loader fastest`,
nothing else given. bench measures at what train takes on a CPU (batch 32, fp32), so train picks from those runs
instead of measuring again; the demo's closing lines end with the commands for one's own data."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from bench.cli import cli
from bench.report.demo import NEXT, lines
from training.cli import train


@pytest.mark.slow
def test_train_picks_from_the_bench_a_newcomer_ran(synthetic_images, tmp_path):
    data = synthetic_images(96, ("files", "hdf5"))
    bench = ["loaders", "--data", str(data), "--backends", "hdf5,gpu", "--workers", "0", "--steps", "3"]
    bench += ["--timing-warmup", "1", "--device", "cpu", "--no-progress"]
    result = CliRunner().invoke(cli, bench)
    assert result.exit_code == 0, result.output
    assert "tiny, batch 32, cpu, all cores, fp32" in result.output
    assert "2 loader runs and 1 data-free run finished, 0 failed" in result.output
    run = tmp_path / "run"
    args = ["--data", str(data), "--loader", "fastest", "--steps", "12", "--device", "cpu", "--out", str(run)]
    result = CliRunner().invoke(train, [*args, "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "from bench results in" in json.loads((run / "summary.json").read_text())["loader"]["reason"]
    said = lines(data / ".gpufeed-bench", run)
    assert said[0].startswith("measured: 2 loader configurations in the training loop of tiny, batch 32")
    assert said[-len(NEXT) :] == NEXT and "dataprep convert --input YOUR_FOLDER --out data/mine" in "\n".join(NEXT)
