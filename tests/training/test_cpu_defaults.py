"""`train` on a CPU takes defaults sized for a CPU (the GPU's took 9 minutes for 5 steps of dit_b2 on latents), says
which, and keeps every option given."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from training.cli import train
from training.cpu_defaults import apply


def test_cpu_values_fill_only_what_was_left_at_its_default():
    options = dict(model=None, batch_size=8, precision="bf16", warmup=5000, sample_count=64, sample_steps=50)
    options |= dict(timing_warmup=20, workers=4, steps=300, loader="hdf5", vae=None)
    note = apply(options, {"model", "precision", "warmup", "sample_count", "sample_steps", "workers"}, "image", 2)
    assert options["model"] == "tiny" and options["precision"] == "fp32" and options["warmup"] == 30
    assert options["sample_count"] == 16 and options["sample_steps"] == 10 and options["workers"] == 1
    assert options["batch_size"] == 8 and options["timing_warmup"] == 20  # given: kept, and not named in the note
    assert note.startswith("train on a CPU: tiny, fp32, 30 steps of learning-rate warm-up") and "batch 32" not in note
    assert "ddpm_cifar10 at batch 128 in bf16" in note and ", 1 loader worker (" in note
    latent = dict(model=None, batch_size=128, steps=10_000, warmup=5000, loader="fastest", vae=None, workers=4)
    latent["sample_count"] = 64
    apply(latent, {"model", "batch_size", "warmup", "workers", "sample_count"}, "latent", 2)
    assert latent["model"] == "dit_tiny" and latent["batch_size"] == 32 and latent["warmup"] == 1000
    assert latent["workers"] == 4 and latent["sample_count"] == 8  # `fastest` picks the workers itself
    assert apply({"steps": 5, "warmup": 5000, "vae": None, "loader": "gpu"}, set(), "image", 2) is None


@pytest.mark.slow  # ~35 s on 2 cores (the loader probe of `fastest` first): make test-slow keeps CI under 12 minutes
def test_train_on_latents_with_no_options_finishes_5_steps_in_under_2_minutes(latent_images, tmp_path):
    """`train --data LAT --steps 5` on a CPU, nothing else given (the default loader, `fastest`, measures first): it
    says the preset it chose, finishes well inside 2 minutes, and its record holds what was chosen."""
    t0 = time.perf_counter()
    args = ["--data", str(latent_images), "--steps", "5", "--device", "cpu", "--out", str(tmp_path / "run")]
    result = CliRunner().invoke(train, [*args, "--no-progress"])
    took = time.perf_counter() - t0
    assert result.exit_code == 0, result.output
    assert "train on a CPU: dit_tiny, batch 32, fp32" in result.output
    assert "8-image sample grids of 10 DDIM steps" in result.output
    assert result.stdout.startswith("trained dit_tiny for 5 steps on cpu") and took < 120
    cfg = json.loads((tmp_path / "run" / "summary.json").read_text())["config"]
    assert (cfg["model"], cfg["batch_size"], cfg["precision"], cfg["warmup"]) == ("dit_tiny", 32, "fp32", 0)
    assert (cfg["sample_count"], cfg["sample_steps"], cfg["timing_warmup"]) == (8, 10, 2)
    assert (tmp_path / "run" / "samples" / "step0000005.png").is_file()


def test_help_shows_the_cpu_defaults_and_the_readme_gives_a_cpu_run_its_length():
    """`train --help` names both defaults where a CPU takes another; the README's CPU run gives --steps and its time."""
    import re
    from pathlib import Path

    text = " ".join(CliRunner().invoke(train, ["--help"], terminal_width=200).output.split())
    for shown in ("128; 32 on a CPU", "bf16; fp32 on a CPU", "5000; 10% of --steps on a CPU", "64; 16 (8 for latents)"):
        assert shown in text, shown
    assert "on a CPU tiny, and dit_tiny for latents" in text and "20; 2 on a CPU" in text
    readme = " ".join((Path(__file__).parents[2] / "README.md").read_text().split())
    cpu = re.search(
        r"On a CPU give `train` a length it can finish: `train [^`]*--steps (\d+)` takes about (\d+)", readme
    )
    assert cpu and int(cpu[1]) <= 2000 and int(cpu[2]) <= 10, "the README's CPU train line"
