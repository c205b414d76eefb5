"""bench/studies/text_cache.py runs small on the CPU: cached against online captions in the training loop for two
encoders, and the bytes a caption costs stored padded (fp32, 16 bits) and as valid tokens only."""

from __future__ import annotations

import json

from bench.studies.text_cache import main


def test_the_study_runs_small_on_the_cpu(text_encoders, tmp_path):
    """--steps 3 --device cpu: a row per encoder with both rates and their ratio, valid tokens only costing less than
    16-bit padding, which costs about half of fp32's (one encoder: each runs the same code, and CI's time is short)."""
    encoders = f"t5={text_encoders['t5']}"
    args = ["--steps", "3", "--warmup", "1", "--device", "cpu", "--model", "dit_tiny_text", "--batch-size", "4"]
    assert main([*args, "--encoders", encoders, "--captions", "8", "--out", str(tmp_path / "study.json")]) == 0
    record = json.loads((tmp_path / "study.json").read_text())
    assert [r["encoder"] for r in record["rows"]] == ["t5:t5"] and "commit" in record["run"]
    for row in record["rows"]:
        assert row["cached_samples_per_s"] > 0 and row["online_samples_per_s"] > 0
        assert row["speedup"] == row["cached_samples_per_s"] / row["online_samples_per_s"]
        b = row["bytes_per_sample"]
        assert b["fp16_valid_only"] == b["bf16_valid_only"] < b["16bit_padded"] < 0.55 * b["fp32_padded"]
        assert row["mean_valid_tokens"] < row["max_tokens"] and row["fp16_overflows"] is False


def test_the_writer_rate_runs_small_on_the_cpu(text_encoders, tmp_path):
    """bench.studies.text_rate: every round times the encoder alone, the writer without files and with files in each
    scratch folder, whose bytes are the table's tokens and beside which the plain write of those bytes is timed."""
    from bench.studies.text_rate import main as rate_main

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    args = ["--encoders", f"clip={text_encoders['clip']}", "--captions", "24", "--batch-size", "8", "--repeats", "2"]
    assert rate_main([*args, "--device", "cpu", "--scratch", str(scratch), "--out", str(tmp_path / "r.json")]) == 0
    (row,) = json.loads((tmp_path / "r.json").read_text())["rows"]
    assert len(row["rounds"]) == 2 and row["captions"] == 24
    for r in row["rounds"]:
        assert r["encoder_alone_per_s"] > 0 and r["writer_no_files_per_s"] > 0
        assert r[f"bytes_written {scratch}"] > 24 * 2 and r[f"disk_write_bytes_per_s {scratch}"] > 0
    median = row["median"]
    share = median[f"writer_of_alone {scratch}"]
    assert share == median[f"writer_per_s {scratch}"] / median["encoder_alone_per_s"]
    assert list(scratch.iterdir()) == []  # the writer's files and the plain write's are gone
