"""The loader speed study (bench/studies/loader_speed.py) on a small synthetic set, CPU only: it runs every contender
records where and how it ran."""

from __future__ import annotations

import json

import pytest

from bench.studies.loader_speed import CONTENDERS, TARGETS, main
from dataprep.convert import ConvertConfig, convert


@pytest.mark.slow
def test_speed_script_runs_every_contender(tmp_path, capsys):
    """Every contender delivers a positive rate; the JSON has hardware, versions, commit, command and the ratios."""
    data = tmp_path / "img"
    convert(ConvertConfig(output=data, source="synthetic-images", limit=512, progress=False, workers=1))
    out = tmp_path / "res" / "speed.json"
    main(["--data", str(data), "--workers", "1", "--batch-size", "64", "--device", "cpu", "--out", str(out)])
    record = json.loads(out.read_text())
    assert set(record["results"]) == set(CONTENDERS)
    for name, result in record["results"].items():
        assert "error" not in result, f"{name}: {result.get('error')}"
        assert result["samples"] == 512 // 64 * 64 and result["samples_per_s"] > 0
    assert set(record["ratios"]) == {f"{a}/{b}" for a, b, _ in TARGETS}
    assert {"hardware", "versions", "commit", "command", "when"} <= set(record)
    assert "torch" in record["versions"] and record["config"]["batch_size"] == 64
    printed = capsys.readouterr().out
    assert "ffcv/upstream_ffcv" in printed and "naive_dali_npy" in printed


def test_speed_script_refuses_bad_arguments(tmp_path, capsys):
    """A directory without a manifest, or an unknown contender, exits non-zero with the fix in the message."""
    with pytest.raises(SystemExit) as e:
        main(["--data", str(tmp_path), "--only", "torch"])
    assert e.value.code == 2 and "dataprep convert --format all" in capsys.readouterr().err
    (tmp_path / "manifest.json").write_text("{}")
    with pytest.raises(SystemExit) as e:
        main(["--data", str(tmp_path), "--only", "torch,tfrecord"])
    assert e.value.code == 2 and "unknown tfrecord; valid: torch" in capsys.readouterr().err
