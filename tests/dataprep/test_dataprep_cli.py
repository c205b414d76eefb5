"""`dataprep verify` and `dataprep info` through the CLI, on real converted sets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from dataprep_helpers import FORMATS, dataprep_command, read_all
from PIL import Image

from dataprep.cli import cli


@pytest.fixture()
def converted(tmp_path) -> Path:
    out = tmp_path / "set"
    r = CliRunner().invoke(
        cli,
        ["convert", "--source", "synthetic-images", "--limit", "50", "--output", str(out), "--quiet", "--workers", "1"],
    )
    assert r.exit_code == 0, r.output
    return out


def _flip_sample(data_dir: Path, fmt: str, k: int) -> None:
    """Change one byte of sample k inside the format's file(s), as disk corruption would."""
    x, _, _ = read_all(data_dir, fmt)
    if fmt == "files":
        path = next((data_dir / "files").rglob(f"{k:08d}.png"))
        pixels = x[k].copy()
        pixels[3, 4, 1] ^= 0x40
        Image.fromarray(pixels).save(path)
        return
    raw = x[k].tobytes()
    suffix = {"hdf5": ".h5", "ffcv": ".beton", "dali": ".tar"}[fmt]
    for path in sorted(data_dir.rglob(f"*{suffix}")):
        blob = bytearray(path.read_bytes())
        at = blob.find(raw)
        if at >= 0:
            blob[at + 100] ^= 0x40
            path.write_bytes(bytes(blob))
            return
    raise AssertionError(f"sample {k} not found raw in {fmt}")


def test_verify_passes_on_a_fresh_set(converted):
    """A freshly converted set verifies with exit code 0."""
    r = CliRunner().invoke(cli, ["verify", str(converted)])
    assert r.exit_code == 0 and "matches the manifest" in r.output


@pytest.mark.parametrize("fmt", FORMATS)
def test_verify_names_the_first_corrupt_sample(converted, fmt):
    """One flipped byte in sample 7 of a format fails verify, naming the format and sample 7."""
    _flip_sample(converted, fmt, 7)
    r = CliRunner().invoke(cli, ["verify", str(converted)])
    assert r.exit_code == 1
    assert f"{fmt}: first mismatch: sample 7 differs" in r.output
    assert "sha256 differs" in r.output or "bytes, the manifest says" in r.output
    others = [f for f in FORMATS if f != fmt]
    assert not any(f"{o}: first mismatch" in r.output for o in others)


def test_info_is_readable(converted):
    """info prints count, shape, classes and every format's size."""
    r = CliRunner().invoke(cli, ["info", str(converted)])
    assert r.exit_code == 0
    assert "50 image samples, shape (32, 32, 3) uint8, 10 classes" in r.output
    for fmt in FORMATS:
        assert f"format:  {fmt}" in r.output


def test_info_and_verify_on_a_non_dataset(tmp_path):
    """A directory without manifest.json gets a message saying so, exit code 1."""
    for cmd in ("info", "verify"):
        r = CliRunner().invoke(cli, [cmd, str(tmp_path)])
        assert r.exit_code == 1 and "manifest.json" in r.output and "dataprep convert" in r.output


def test_bad_format_and_missing_input():
    """An unknown --format lists the valid ones; a real source without --input says what is missing."""
    r = CliRunner().invoke(cli, ["convert", "--output", "/tmp/x", "--format", "parquet"])
    assert r.exit_code == 2 and "files, hdf5, ffcv, dali, stream, all" in r.output
    r = CliRunner().invoke(cli, ["convert", "--output", "/tmp/x"])
    assert r.exit_code == 1 and "--input is required" in r.output


def test_help_does_not_import_heavy_libraries():
    """`dataprep --help` imports neither torch, ffcv, DALI nor h5py, so it is instant."""
    import subprocess
    import sys

    code = (
        "import sys; from dataprep.cli import cli; cli(['--help'], standalone_mode=False); "
        "print([m for m in ('torch', 'ffcv', 'nvidia.dali', 'h5py') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("[]")


def test_written_samples_are_the_synthetic_source(converted):
    """What convert wrote is exactly what the synthetic source generates."""
    from dataprep.sources.synthetic import SyntheticImages

    truth = next(SyntheticImages(50).chunks(50, "error", 1))
    x, y, _ = read_all(converted, "hdf5")
    assert np.array_equal(x, truth.x) and np.array_equal(y, truth.y)


@pytest.mark.slow  # make test-slow, for CI's budget
def test_quiet_silences_every_progress_bar(tmp_path):
    """--quiet prints only the summary line (FFCV's own writer bar included, drawn by its writer process); without it
    the bars are shown. Real processes: the bars are drawn on the stderr the tool was started with."""
    import subprocess

    args = dataprep_command("convert", source="synthetic-images", limit=20, format="ffcv", workers=1)
    quiet = subprocess.run([*args, "--output", str(tmp_path / "q"), "--quiet"], capture_output=True, text=True)
    assert quiet.returncode == 0 and quiet.stdout.strip().splitlines() == [
        f"wrote 20 samples to {tmp_path / 'q'} (ffcv)"
    ]
    assert "ffcv:" not in quiet.stderr and "convert:" not in quiet.stderr
    shown = subprocess.run([*args, "--output", str(tmp_path / "v")], capture_output=True, text=True)
    assert shown.returncode == 0 and "convert: 100%" in shown.stderr and "ffcv: 100%" in shown.stderr


@pytest.mark.slow  # make test-slow, for CI's budget
def test_limit_with_more_workers_than_cores_finishes(cifar_jpg_root, tmp_path):
    """--limit stops reading mid-way: the decoding pool must close cleanly. Terminating 16 busy workers on a
    2-core machine deadlocked on the pool's result lock (the command hung after writing everything)."""
    import subprocess

    cmd = dataprep_command(
        "convert", input=cifar_jpg_root, output=tmp_path / "out", format="hdf5", limit=1500, workers=16, quiet=True
    )
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert "wrote 1,500 samples" in done.stdout
