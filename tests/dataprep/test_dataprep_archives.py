"""An archive of an image folder or of audio clips as --input: named for what it holds (it was taken for CIFAR-10's
pickles: "batches.meta: missing"), with the commands that unpack and convert it, which then work."""

from __future__ import annotations

import subprocess
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from dataprep.cli import cli
from dataprep.manifest import load_manifest


@pytest.fixture
def image_tarball(tmp_path) -> Path:
    """ROOT/train/<cat|dog>/*.png with a README beside, as a .tar.gz with no top folder (like cifar10-jpg.tar.gz)."""
    root = tmp_path / "src"
    rng = np.random.default_rng(0)
    for c in ("cat", "dog"):
        (root / "train" / c).mkdir(parents=True)
        for i in range(3):
            Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(root / "train" / c / f"{i}.png")
    (root / "README.md").write_text("pets\n")
    archive = tmp_path / "pets-png.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for p in sorted(root.rglob("*")):
            tar.add(p, arcname=str(p.relative_to(root)), recursive=False)
    return archive


@pytest.mark.parametrize("source", ["auto", "imagefolder", "cifar10"])
def test_a_tarball_of_images_says_to_unpack_and_the_commands_work(image_tarball, tmp_path, monkeypatch, source):
    monkeypatch.chdir(tmp_path)
    args = ["convert", "--input", str(image_tarball), "--output", str(tmp_path / "out"), "--quiet", "--workers", "1"]
    result = CliRunner().invoke(cli, [*args, "--source", source])
    assert result.exit_code == 1 and "an archive of an image folder, not CIFAR-10's python batches" in result.output
    assert "batches.meta" not in result.output and "empty folder" not in result.output
    unpack = result.output.split("unpack it and convert the folder: ")[1].split(" && dataprep convert")[0]
    assert unpack == f"mkdir -p pets-png && tar -xf {image_tarball} -C pets-png"
    subprocess.run(unpack, shell=True, check=True, cwd=tmp_path)
    again = ["convert", "--input", "pets-png", "--output", str(tmp_path / "out"), "--quiet", "--format", "hdf5"]
    done = CliRunner().invoke(cli, [*again, "--workers", "1"])
    assert done.exit_code == 0, done.output
    m = load_manifest(tmp_path / "out")
    assert m["count"] == 6 and m["classes"] == ["cat", "dog"]


def test_a_zip_of_clips_names_unzip(tmp_path):
    import soundfile

    (tmp_path / "clips").mkdir()
    soundfile.write(tmp_path / "clips" / "7_a_0.wav", np.zeros(1600, np.float32), 16000)
    with zipfile.ZipFile(tmp_path / "digits.zip", "w") as z:
        z.write(tmp_path / "clips" / "7_a_0.wav", "clips/7_a_0.wav")
    args = ["convert", "--input", str(tmp_path / "digits.zip"), "--output", str(tmp_path / "out"), "--quiet"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1 and "an archive of audio clips" in result.output
    assert f"unzip -q {tmp_path / 'digits.zip'} -d digits" in result.output


def test_a_plain_file_for_a_folder_source_is_named(tmp_path):
    (tmp_path / "notes.txt").write_text("not data\n")
    args = ["convert", "--input", str(tmp_path / "notes.txt"), "--output", str(tmp_path / "out"), "--quiet"]
    result = CliRunner().invoke(cli, [*args, "--source", "imagefolder"])
    assert result.exit_code == 1 and "a file; --source imagefolder reads a folder" in result.output
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1 and "not a tar or zip archive" in result.output
