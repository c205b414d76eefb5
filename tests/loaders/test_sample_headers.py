"""A `files`-format sample that loads, but not as the manifest describes it, is named with its file: an `.npy` latent
whose header was edited (another shape of the same size, another dtype, byte order or memory order), or an image or
clip replaced by one of another size. Before, the torch loader failed with "stack expects each tensor to be equal
size", naming no file, or delivered wrong values without a word. Real conversions, real files edited in place."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from dataprep_helpers import random_images
from PIL import Image

from dataprep.cli import cli
from dataprep.convert import ConvertConfig, convert
from dataprep.digest import file_sha256
from loaders import LoaderError, build_loader

SAMPLE = "files/00000/00000004.npy"


def rewrite_header(path: Path, **changes) -> None:
    """Write the .npy at `path` again with its header's descr, fortran_order or shape replaced and its data bytes
    as they were; the header is padded to 64 bytes, so the file keeps its size."""
    with open(path, "rb") as f:
        assert np.lib.format.read_magic(f) == (1, 0)  # what np.save writes for a small header
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        data = f.read()
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": fortran, "shape": shape} | changes
    size = path.stat().st_size
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        f.write(data)
    assert path.stat().st_size == size


def manifest_agrees(data_dir: Path) -> None:
    """Record every file's size and sha256 as they are now: the open check's size test then passes, and what is
    left to catch the change is the check of each sample as it is read."""
    path = data_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    for info in manifest["formats"].values():
        for f in info["files"]:
            f["bytes"], f["sha256"] = (data_dir / f["path"]).stat().st_size, file_sha256(data_dir / f["path"])
    path.write_text(json.dumps(manifest))


def files_only(src: Path, tmp_path: Path) -> Path:
    """A copy of a converted directory listing only its `files` format (so the gpu loader reads the files)."""
    data_dir = Path(shutil.copytree(src, tmp_path / "data"))
    path = data_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["formats"] = {"files": manifest["formats"]["files"]}
    path.write_text(json.dumps(manifest))
    return data_dir


def read_every_batch(data_dir: Path, backend: str, workers: int = 0) -> None:
    with build_loader(backend, data_dir, batch_size=2, workers=workers, shuffle=False) as loader:
        for _ in loader:
            pass


HEADERS = [
    ("dtype", {"descr": "<i2"}, "holds (2, 2, 4, 16, 16) int16, the manifest says (2, 2, 4, 16, 16) float16"),
    ("byte order", {"descr": ">f2"}, "holds (2, 2, 4, 16, 16) >f2, the manifest says (2, 2, 4, 16, 16) float16"),
    ("shape", {"shape": (2, 2, 4, 8, 32)}, "holds (2, 2, 4, 8, 32) float16, the manifest says (2, 2, 4, 16, 16)"),
    ("order", {"fortran_order": True}, "holds (2, 2, 4, 16, 16) float16 in Fortran order, the manifest says"),
    ("larger", {"shape": (2, 2, 4, 16, 17)}, "Failed to read all data for array. Expected (2, 2, 4, 16, 17)"),
    ("smaller", {"shape": (2, 2, 4, 16, 15)}, "holds (2, 2, 4, 16, 15) float16, the manifest says (2, 2, 4, 16, 16)"),
]


IN_MAKE_TEST = ("dtype", "shape")  # 5 s each (workers start); the other edits run in make test-slow


@pytest.mark.parametrize(
    ("change", "said"),
    [pytest.param(*h[1:], id=h[0], marks=() if h[0] in IN_MAKE_TEST else pytest.mark.slow) for h in HEADERS],
)
def test_edited_npy_header_is_named_everywhere_it_is_read(latent_images, tmp_path, change, said):
    """Each header edit: verify names the file and what it holds; the torch loader (in the process and in a worker)
    and the gpu loader reading the files stop with one LoaderError naming the file."""
    data_dir = files_only(latent_images, tmp_path)
    rewrite_header(data_dir / SAMPLE, **change)
    manifest_agrees(data_dir)
    r = CliRunner().invoke(cli, ["verify", str(data_dir)])
    assert r.exit_code == 1 and f"{data_dir / SAMPLE}: " in r.output and said in r.output, r.output
    for backend, workers in [("torch", 0), ("torch", 1), ("gpu", 0)]:
        with pytest.raises(LoaderError) as e:
            read_every_batch(data_dir, backend, workers)
        message = str(e.value)
        assert f"{data_dir / SAMPLE}: " in message and said in message, (backend, workers, message)
        assert "stack expects" not in message


def test_replaced_image_of_another_size_is_named(tmp_path):
    """A PNG replaced by a 40x40 one (the manifest agreeing with the file): named, not 'stack expects ...'."""
    for i, im in enumerate(random_images(6)):
        (tmp_path / "in" / "cat").mkdir(parents=True, exist_ok=True)
        Image.fromarray(im).save(tmp_path / "in" / "cat" / f"{i}.png")
    data_dir = tmp_path / "data"
    convert(ConvertConfig(output=data_dir, input=tmp_path / "in", formats=("files",), workers=1, progress=False))
    victim = data_dir / "files/00000/00000002.png"
    Image.fromarray(random_images(1, size=40)[0]).save(victim)
    manifest_agrees(data_dir)
    with pytest.raises(LoaderError, match=f"{victim}: a 40x40 image, the manifest says 32x32"):
        read_every_batch(data_dir, "torch")
    r = CliRunner().invoke(cli, ["verify", str(data_dir)])
    assert r.exit_code == 1 and f"{victim}: holds (40, 40, 3) uint8, the manifest says (32, 32, 3) uint8" in r.output


def test_replaced_clip_of_another_length_is_named(tmp_path):
    """A WAV replaced by a shorter clip: the torch loader and verify name it, with both shapes."""
    import soundfile as sf

    data_dir = tmp_path / "data"
    config = ConvertConfig(output=data_dir, source="synthetic-audio", limit=6, formats=("files",), workers=1)
    config.progress = False
    convert(config)
    victim = data_dir / "files/00000/00000001.wav"
    sf.write(victim, np.zeros(8000, np.float32), 16000, subtype="FLOAT")
    manifest_agrees(data_dir)
    said = f"{victim}: holds (8000,) float32, the manifest says (16384,) float32"
    with pytest.raises(LoaderError, match=said.replace("(", r"\(").replace(")", r"\)")):
        read_every_batch(data_dir, "torch")
    r = CliRunner().invoke(cli, ["verify", str(data_dir)])
    assert r.exit_code == 1 and said in r.output, r.output
