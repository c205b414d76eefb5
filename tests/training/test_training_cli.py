"""The `train` command: parses, validates with actionable messages, and runs the loop."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner

from training.cli import train


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def base_args(data, out) -> list[str]:
    opts = "--loader gpu --model tiny --batch-size 8 --precision fp32 --device cpu --workers 0 --no-pin-memory"
    opts += " --sample-every 0 --no-progress --log-every 2 --timing-warmup 1"
    return ["--data", str(data), "--out", str(out), *opts.split()]


def test_help_is_instant(runner):
    """--help lists the loader choices, and importing the CLI does not import torch."""
    result = runner.invoke(train, ["--help"])
    assert result.exit_code == 0 and "fastest|torch|hdf5|ffcv|dali|gpu" in result.output
    code = "import sys, training.cli; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_short_run_prints_summary(runner, cifar_small, tmp_path):
    """A 3-step run exits 0 and says how it went in a few lines (rate, starvation, loss, loader, where things went);
    the full record is RUN_DIR/summary.json, and --json prints it instead."""
    result = runner.invoke(train, base_args(cifar_small, tmp_path / "run") + ["--steps", "3"])
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert text.startswith("trained tiny for 3 steps on cpu") and "samples/s over 2 timed steps" in text
    assert ", starvation " in text and "loss " in text
    assert "loader: gpu" in text and "chosen with --loader" in text and "metrics.jsonl" in text and "{" not in text
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved["steps"] == 3 and saved["backend"] == "gpu" and saved["samples_per_s"] > 0 and "losses" not in saved
    assert saved["files"]["metrics"] == str(tmp_path / "run" / "metrics.jsonl")
    result = runner.invoke(train, base_args(cifar_small, tmp_path / "run2") + ["--steps", "2", "--json"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed == json.loads((tmp_path / "run2" / "summary.json").read_text()) and printed["steps"] == 2


def test_missing_manifest_is_bad_parameter(runner, tmp_path):
    """--data without manifest.json exits 2 and says to run dataprep convert."""
    result = runner.invoke(train, ["--data", str(tmp_path), "--device", "cpu"])
    assert result.exit_code == 2 and "dataprep convert" in result.output and "--data" in result.output


def test_bad_device_is_bad_parameter(runner, cifar_small):
    """An unknown --device exits 2 naming the valid forms."""
    result = runner.invoke(train, ["--data", str(cifar_small), "--device", "tpu"])
    assert result.exit_code == 2 and "use cuda, cuda:N or cpu" in result.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_cuda_without_gpu_is_bad_parameter(runner, cifar_small):
    """--device cuda on a CPU-only machine exits 2 and suggests --device cpu."""
    result = runner.invoke(train, ["--data", str(cifar_small), "--device", "cuda"])
    assert result.exit_code == 2 and "pass --device cpu" in result.output


def test_compile_cache_and_no_compile_cache_conflict(runner, cifar_small, tmp_path):
    """A compile cache directory and --no-compile-cache together exit 2 saying to choose one."""
    args = ["--data", str(cifar_small), "--compile-cache", str(tmp_path), "--no-compile-cache"]
    result = runner.invoke(train, args)
    assert result.exit_code == 2 and "not both" in result.output and "--compile-cache" in result.output


def test_unknown_loader_lists_choices(runner, cifar_small):
    """An unknown --loader exits 2 and lists the valid backends."""
    result = runner.invoke(train, ["--data", str(cifar_small), "--loader", "tfdata"])
    assert result.exit_code == 2 and "'fastest', 'torch', 'hdf5', 'ffcv', 'dali', 'gpu'" in result.output


def test_resume_without_checkpoint_exits_1(runner, cifar_small, tmp_path):
    """--resume into an empty RUN_DIR exits 1 with a message, never starting afresh."""
    result = runner.invoke(train, base_args(cifar_small, tmp_path / "run") + ["--steps", "3", "--resume"])
    assert result.exit_code == 1 and "no checkpoint to resume from" in result.output
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_empty_shard_is_clear_error(runner, cifar_small, tmp_path):
    """A batch larger than the dataset exits 1 before the loader starts, naming a batch size that fits."""
    result = runner.invoke(train, base_args(cifar_small, tmp_path / "run") + ["--steps", "2", "--batch-size", "1024"])
    assert result.exit_code == 1 and "512 samples, fewer than one batch of 1024: pass --batch-size 512" in result.output


def _audio(tmp_path, name: str, **convert_options):
    from dataprep.convert import ConvertConfig, convert

    out = tmp_path / name
    convert(
        ConvertConfig(
            output=out,
            source="synthetic-audio",
            limit=16,
            formats=("files",),
            workers=1,
            progress=False,
            **convert_options,
        )
    )
    return out


def test_audio_trains_with_the_data_s_channels(runner, tmp_path):
    """Stereo log-mels: the model takes as many channels as the clips have (the presets say 3 or 1)."""
    data = _audio(tmp_path, "stereo", channels=2)
    result = runner.invoke(train, base_args(data, tmp_path / "run") + ["--steps", "2", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["steps"] == 2


def test_audio_frames_the_unet_cannot_halve_are_a_clear_error(runner, tmp_path):
    """1.0 s at 16 kHz is 62 mel frames; ddpm_audio_mel halves its input 4 times: refused before the first step, with
    the data directory and the --clip-seconds that fixes it, not a tensor-size error from inside the network."""
    data = _audio(tmp_path, "short", clip_seconds=1.0)
    args = base_args(data, tmp_path / "run") + ["--steps", "1", "--model", "ddpm_audio_mel", "--batch-size", "2"]
    result = runner.invoke(train, args)
    assert result.exit_code == 1, result.output
    assert str(data) in result.output and "1x64x62" in result.output and "--clip-seconds" in result.output
