"""`bench loaders` on data with cached caption embeddings: a text model's loader runs and its data-free run both
finish (the data-free run hands the step the real loader's empty caption for caption dropout)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from bench.cli import cli
from dataprep.convert import ConvertConfig, convert


def test_text_model_grid_runs_its_data_free_run(tmp_path, text_encoders):
    """A tiny_text grid over cached text finishes every run, the data-free one included, with a rate."""
    data = tmp_path / "data"
    convert(
        ConvertConfig(
            output=data,
            source="synthetic-images",
            limit=32,
            formats=("hdf5",),
            progress=False,
            workers=1,
            caption_templates=("a photo of a {label}",),
            text_encoder=str(text_encoders["clip"]),
        )
    )
    out = tmp_path / "grid"
    args = ["loaders", "--data", str(data), "--model", "tiny_text", "--backends", "hdf5", "--workers", "0"]
    args += ["--batch-size", "8", "--steps", "2", "--timing-warmup", "1", "--device", "cpu", "--out", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    free = [json.loads(p.read_text()) for p in out.glob("datafree-*.json")]
    assert len(free) == 1 and "error" not in free[0], free
    assert free[0]["figures"]["samples_per_s"] > 0
