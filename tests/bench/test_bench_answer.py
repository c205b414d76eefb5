"""`bench loaders` answers the question by default: each configuration in the training loop of the preset for this
data and device (tiny on CPU), set against that model's data-free rate; a few lines for people, the full record in
OUT/summary.json and on stdout with --json. The loader alone (--model none) shows headroom, never starvation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench.cli import cli
from bench.grid.job import preset_for
from bench.report.tables import header


@pytest.fixture(scope="module")
def image_data(synthetic_images) -> Path:
    return synthetic_images(128, ("files", "hdf5"))


@pytest.mark.slow
def test_without_model_each_configuration_is_set_against_a_data_free_rate(image_data, tmp_path):
    out = tmp_path / "res"
    args = [
        "loaders",
        "--data",
        str(image_data),
        "--workers",
        "0,2",
        "--device",
        "cpu",
        "--backends",
        "hdf5,gpu",
        "--batch-size",
        "16",
        "--steps",
        "3",
        "--timing-warmup",
        "1",
        "--precision",
        "fp32",
        "--out",
        str(out),
        "--no-progress",
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    text = result.output
    assert "3 configurations of 2 backends in the training loop (the model alone, data-free:" in text
    noise = "cannot tell on this machine now" in text  # a busy machine: no ranking (bench.fastest.noise)
    assert noise or ("train --loader fastest takes: " in text and "slowest: " in text)
    assert "summary.json" in text
    assert "{" not in text and len(text.splitlines()) <= 8  # an answer, not a dump
    record = json.loads((out / "summary.json").read_text())
    (scenario,) = record["scenarios"]
    assert scenario["title"].startswith("tiny, batch 16, cpu") and scenario["data_free_rate"] > 0
    configs = scenario["configurations"]
    assert {(c["backend"], c["workers"]) for c in configs} == {("hdf5", 0), ("hdf5", 2), ("gpu", None)}
    for c in configs:
        assert c["model"] == "tiny" and c["vs_data_free"] == pytest.approx(c["samples_per_s"] / c["data_free_rate"])
        assert c["data_free_rate"] == pytest.approx(scenario["data_free_rate"])
    md = (out / "results.md").read_text()
    assert "| of data-free | starvation |" in md and "headroom" not in md
    # --json: the same record on stdout, for scripts (a resumed grid with nothing left to run)
    again = CliRunner().invoke(cli, [*args, "--resume", "--json"])
    assert again.exit_code == 0, again.output
    printed = json.loads(again.stdout)
    assert printed["scenarios"][0]["best"] == record["scenarios"][0]["best"]
    # `bench fastest --json`, what `train --loader fastest` asks: the same configuration from the same results
    asked = CliRunner().invoke(
        cli,
        [
            "fastest",
            "--data",
            str(image_data),
            "--model",
            "tiny",
            "--batch-size",
            "16",
            "--device",
            "cpu",
            "--precision",
            "fp32",
            "--results",
            str(out),
            "--json",
        ],
    )
    assert asked.exit_code == 0, asked.output
    choice, best = json.loads(asked.stdout), record["scenarios"][0]["best"]
    if noise:
        assert best is None and "cannot tell on this machine now" in choice["reason"]
        return
    assert (choice["backend"], choice["workers"] or None) == (best["backend"], best["workers"] or None)
    assert "from bench results in" in choice["reason"]


def test_the_loader_alone_shows_headroom_not_starvation():
    alone, loop = header(alone=True), header(alone=False)
    assert "headroom over data-free" in alone and "starvation" not in alone and "host behind" not in alone
    assert "starvation" in loop and "of data-free" in loop and "headroom" not in loop


def test_the_preset_follows_the_data_and_the_device(tmp_path):
    for kind, model in (("image", "ddpm_cifar10"), ("audio", "ddpm_audio_mel")):
        (tmp_path / "manifest.json").write_text(json.dumps({"kind": kind}))
        assert preset_for(tmp_path, "cuda") == model and preset_for(tmp_path, "cuda:1") == model
        assert preset_for(tmp_path, "cpu") == "tiny"  # ddpm_cifar10 takes seconds a step on CPU
