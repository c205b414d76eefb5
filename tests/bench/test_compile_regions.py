"""bench/studies/compile_regions.py on CPU with the tiny model: every configuration runs in its own process, the
nested regions compute what the whole model does, and a configuration that fails is recorded, not fatal."""

from __future__ import annotations

import json

import pytest

from bench.studies import compile_regions


@pytest.mark.slow  # a study's harness (bench/studies), not the product: 33 s
def test_regions_trace_the_same_step_and_every_configuration_is_recorded(tmp_path, capsys):
    """Dynamo and AOTAutograd (aot_eager) with no regions, every block a region, and the skip's gradient dense: the
    first losses are equal to the bit; an unknown backend leaves its error in the record and the table."""
    argv = [
        "--model",
        "tiny",
        "--batch-size",
        "2",
        "--steps",
        "1",
        "--backends",
        "aot_eager,no_such_backend",
        "--regions",
        "none,ResBlock+Attention",
        "--dense-skip",
        "--out",
        str(tmp_path),
    ]
    compile_regions.main(argv)
    record = json.loads((tmp_path / "compile_regions.json").read_text())
    runs = {(r["backend"], r["regions"]): r for r in record["runs"]}
    assert set(runs) == {(b, r) for b in ("aot_eager", "no_such_backend") for r in ("none", "ResBlock+Attention")}
    whole, regions = runs["aot_eager", "none"], runs["aot_eager", "ResBlock+Attention"]
    assert whole["first_loss"] == regions["first_loss"] and "error" not in whole and "error" not in regions
    assert whole["phases"]["create_aot_dispatcher_function"] > 0 and regions["samples_per_s"] > 0
    assert all("no_such_backend" in runs["no_such_backend", r]["error"] for r in ("none", "ResBlock+Attention"))
    assert {"commit", "command", "versions", "hardware"} <= set(record["run"]) and record["config"]["dense_skip"]
    table = (tmp_path / "compile_regions.md").read_text()
    assert table.count("\n| aot_eager |") == 2 and table in capsys.readouterr().out
