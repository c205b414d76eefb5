"""bench/studies/train_speed.py on CPU with the tiny model: the record it writes and how it refuses bad arguments."""

from __future__ import annotations

import json

import pytest

from bench.studies import train_speed


@pytest.mark.slow  # ~10 s on 2 cores: make test-slow keeps CI under 12 minutes
def test_cpu_smoke_run_writes_a_complete_record(tmp_path, capsys):
    """Two modes on CPU: a table on stdout, and JSON with FLOPs, throughput, TFLOP/s, no MFU, versions and command."""
    out = tmp_path / "speed.json"
    argv = [
        "--device",
        "cpu",
        "--model",
        "tiny",
        "--batch-size",
        "2",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--modes",
        "fp32_eager,bf16_channels_last",
        "--out",
        str(out),
    ]
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


@pytest.mark.slow
def test_candidate_mode_traces_on_cpu_and_profiles(tmp_path):
    """The candidates' model code under torch.compile (aot_eager: traced with autograd, no kernels generated) runs on
    a CPU; --profile writes the mode's kernel table."""
    out, prof, mode = tmp_path / "speed.json", tmp_path / "prof", "bf16_cl_cudagraphs_prev_all"
    argv = [
        "--device",
        "cpu",
        "--model",
        "tiny",
        "--batch-size",
        "2",
        "--steps",
        "1",
        "--warmup",
        "0",
        "--compile-backend",
        "aot_eager",
        "--modes",
        mode,
        "--out",
        str(out),
        "--profile",
        str(prof),
    ]
    record = train_speed.main(argv)
    assert "error" not in record["results"][mode] and record["results"][mode]["images_per_s"] > 0
    assert json.loads(out.read_text())["config"]["compile_backend"] == "aot_eager"
    assert "ms per step" in (prof / mode / "ops.md").read_text()


@pytest.mark.slow
def test_forms_loss_curve_trains_both_forms_from_one_seed(cifar_small, tmp_path):
    """bench/studies/forms_loss_curve.py on CPU: two real training runs, one per form, in fresh processes; the curves
    match within rounding (same seed, same draws), yet the runs did differ (the previous forms were in place)."""
    from bench.studies import forms_loss_curve

    result = forms_loss_curve.main(
        [
            "--data",
            str(cifar_small),
            "--model",
            "tiny",
            "--device",
            "cpu",
            "--precision",
            "fp32",
            "--no-compile",
            "--batch-size",
            "16",
            "--steps",
            "12",
            "--window",
            "4",
            "--out",
            str(tmp_path),
        ]
    )
    saved = json.loads((tmp_path / "curves.json").read_text())
    assert saved["comparison"] == result["comparison"] and (tmp_path / "curves.png").stat().st_size > 0
    current, previous = (saved["runs"][f]["losses"] for f in ("current", "previous"))
    assert len(current) == len(previous) == 12 and len(saved["comparison"]["windows"]) == 3
    assert max(abs(a - b) for a, b in zip(current, previous)) < 1e-4 * max(current)
    assert saved["runs"]["current"]["param_checksum"] != saved["runs"]["previous"]["param_checksum"]
    assert saved["comparison"]["within_2_se"] == 1.0 and not list(tmp_path.glob("run-*.json"))
