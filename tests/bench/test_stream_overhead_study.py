"""bench.studies.stream_overhead: gpufeed's stream loader against LitData's own on the same shards. The share it
reports is gpufeed's rate over LitData's per round, and a whole study runs end to end against a real SeaweedFS."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from bench.studies.stream_overhead import shares


def _run(side: str, round_: int, epoch1: float, epoch2: float) -> dict:
    e1, e2 = {"samples_per_s": epoch1}, {"samples_per_s": epoch2}
    return {"side": side, "workers": 0, "round": round_, "epoch1": e1, "epoch2": e2}


def test_the_share_cancels_which_side_went_first():
    """Whichever side runs second is 10% faster; over one round of each order the geometric mean says 1.0."""
    runs = [_run("litdata", 0, 100, 200), _run("gpufeed", 0, 110, 220), _run("gpufeed", 1, 100, 200)]
    runs += [_run("litdata", 1, 110, 220)]
    got = shares(runs)["workers0-epoch1"]
    assert got["rounds"] == pytest.approx([1.1, 100 / 110])
    assert got["geomean"] == pytest.approx(1.0) and not math.isclose(got["median"], 1.1)


@pytest.mark.slow
def test_a_study_runs_both_sides_over_one_store(tmp_path):
    out = tmp_path / "study.json"
    command = [sys.executable, "-m", "bench.studies.stream_overhead", "--out", str(out), "--images", "600"]
    subprocess.run([*command, "--rounds", "2", "--workers", "0"], check=True, timeout=600)
    record = json.loads(out.read_text())
    assert sorted((r["round"], r["side"]) for r in record["runs"]) == [
        (0, "gpufeed"),
        (0, "litdata"),
        (1, "gpufeed"),
        (1, "litdata"),
    ]
    assert {r["epoch1"]["samples"] for r in record["runs"]} == {512}  # drop_last: 4 batches of 128, on both sides
    assert len(record["gpufeed_over_litdata"]["workers0-epoch2"]["rounds"]) == 2
