"""bench/studies/train_speed.py on CPU with the tiny model: the record it writes and how it refuses bad arguments."""

from __future__ import annotations

import json

import pytest

from bench.studies import train_speed


def test_cpu_smoke_run_writes_a_complete_record(tmp_path, capsys):
    """Two modes on CPU: a table on stdout, and JSON with FLOPs, throughput, TFLOP/s, no MFU, versions and command."""
    out = tmp_path / "speed.json"
    argv = ["--device", "cpu", "--model", "tiny", "--batch-size", "2", "--steps", "2", "--warmup", "1",
            "--modes", "fp32_eager,bf16_channels_last", "--out", str(out)]  # fmt: skip
    train_speed.main(argv)
    record = json.loads(out.read_text())
    assert record["gflop_per_image"] == pytest.approx(0.4878, rel=1e-3)
    assert set(record["results"]) == {"fp32_eager", "bf16_channels_last"} and record["best_mode"] in record["results"]
    for r in record["results"].values():
        assert r["images_per_s"] > 0 and r["mfu"] is None
        assert r["tflops"] == pytest.approx(record["gflop_per_image"] * r["images_per_s"] / 1e3)
    assert {"commit", "command", "versions", "hardware", "config"} <= set(record)
    assert "fp32_eager" in capsys.readouterr().out and not list(tmp_path.glob("*.tmp-*"))


def test_unknown_mode_lists_the_valid_ones(capsys):
    """An unknown --modes entry exits with status 2 and names the valid modes."""
    with pytest.raises(SystemExit) as exc:
        train_speed.parse_args(["--modes", "fp32_eager,turbo"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unknown mode(s) turbo" in err and "bf16_cl_compile_cudagraphs" in err
