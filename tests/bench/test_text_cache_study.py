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
