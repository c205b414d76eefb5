"""`train --loader fastest` under torchrun with no results: the ranks measure together, with the rank count they
train with, within a minute, and the next run takes those results (gloo on the CPU, two ranks)."""

from __future__ import annotations

import json

import pytest
from ranks_helpers import TORCHRUN, Job

from bench.records.results import load_records


def train(data, out, results) -> Job:
    opts = "--loader fastest --model tiny --batch-size 16 --steps 3 --precision fp32 --device cpu --sample-every 0"
    opts += " --ckpt-every 0 --no-progress --timing-warmup 1"
    cmd = [
        *TORCHRUN,
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "training",
        "--data",
        str(data),
        "--out",
        str(out),
        *opts.split(),
    ]
    return Job(cmd, GPUFEED_BENCH_RESULTS=str(results))


@pytest.mark.slow
def test_torchrun_measures_with_its_rank_count_then_reads_it(synthetic_images, tmp_path):
    """No results: every rank's `bench fastest` child joins one group and the probe runs as 2 ranks under DDP (each
    its own shard), in under 60 s; its records are 2-rank records (both ranks' figures, rates summed). A second
    torchrun run decides from them at once."""
    data, results = synthetic_images(256), tmp_path / "results"
    first = train(data, tmp_path / "first", results)
    assert first.proc.wait(timeout=300) == 0, first.stderr[-3000:]
    reason = json.loads((tmp_path / "first" / "summary.json").read_text())["loader"]["reason"]
    assert "measured in this process first with 2 ranks" in reason, reason
    (probe,) = [json.loads(p.read_text()) for p in results.glob("fastest-probe-*.json")]
    assert probe["nproc"] == 2 and probe["times"]["total_s"] < 60 and probe["confirmed"] >= 1
    recs = load_records(results)
    assert recs and all(r["job"]["nproc"] == 2 for r in recs)
    assert {r["job"]["kind"] for r in recs} == {"data_free", "loader"}
    for r in recs:
        ranks = r["figures"]["ranks"]
        assert [x["rank"] for x in ranks] == [0, 1]
        assert r["figures"]["samples_per_s"] == pytest.approx(sum(x["samples_per_s"] for x in ranks))

    second = train(data, tmp_path / "second", results)
    assert second.proc.wait(timeout=300) == 0, second.stderr[-3000:]
    again = json.loads((tmp_path / "second" / "summary.json").read_text())["loader"]
    assert "from bench results in" in again["reason"] and "measured with 2 ranks" in again["reason"], again
    first_pick = json.loads((tmp_path / "first" / "summary.json").read_text())["loader"]
    assert (again["backend"], again["workers"]) == (first_pick["backend"], first_pick["workers"])
