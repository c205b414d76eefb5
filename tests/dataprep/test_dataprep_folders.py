"""Folders as people's own training loops take them: flat or nested, any image size (`--size`), unlabeled data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from dataprep_helpers import FORMATS, make_audio, make_cifar_pickles, read_all, stored_order
from PIL import Image

from dataprep.cli import cli

# (width, height, extension): both orientations, up- and downscaling, odd crop offsets, one already square
SHAPES = [(40, 30, "png"), (30, 41, "jpg"), (17, 17, "png"), (64, 48, "jpg"), (100, 33, "png"), (16, 16, "jpg")]


def run(*args: str):
    return CliRunner().invoke(cli, ["convert", "--quiet", "--workers", "1", *args])


def _images(folder: Path, seed: int = 0, shapes=SHAPES) -> list[Path]:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, (w, h, ext) in enumerate(shapes):
        yy, xx = np.mgrid[0:h, 0:w]
        smooth = np.stack([xx * 255 // w, yy * 255 // h, (xx + yy) * 127 // (w + h)], -1)
        pixels = np.clip(smooth + rng.integers(0, 40, (h, w, 3)), 0, 255).astype(np.uint8)
        paths.append(folder / f"img{seed}_{i}.{ext}")
        Image.fromarray(pixels).save(paths[-1], quality=92)
    return sorted(paths)


def _torchvision(path: Path, size: int) -> np.ndarray:
    """What diffusers' unconditional example and lucidrains' Dataset feed their model, before ToTensor."""
    from torchvision import transforms as T

    pipeline = T.Compose([T.Resize(size), T.CenterCrop(size)])  # Resize's default: bilinear, antialiased on PIL
    with Image.open(path) as im:
        return np.asarray(pipeline(im.convert("RGB")))


def test_flat_folder_of_any_size_matches_torchvision(tmp_path):
    """A flat folder of images of six sizes, --size 16: one class, and every format holds, pixel for pixel, what
    torchvision's Resize(16) + CenterCrop(16) gives on each file; the manifest, info and verify state the resize."""
    paths = _images(tmp_path / "pets")
    r = run("--input", str(tmp_path / "pets"), "--output", str(tmp_path / "o"), "--size", "16")
    assert r.exit_code == 0, r.output
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert manifest["classes"] == ["pets"] and manifest["sample_shape"] == [16, 16, 3]
    assert manifest["resize"]["size"] == 16 and "centre crop" in manifest["resize"]["method"]
    truth = np.stack([_torchvision(p, 16) for p in stored_order(paths)])
    for fmt in FORMATS:
        x, y, _ = read_all(tmp_path / "o", fmt)
        assert np.array_equal(x, truth), fmt
        assert (y == 0).all()
    info = CliRunner().invoke(cli, ["info", str(tmp_path / "o")])
    assert "resized: to 16 x 16 at conversion" in info.output
    verify = CliRunner().invoke(cli, ["verify", str(tmp_path / "o")])
    assert verify.exit_code == 0 and "images were resized to 16 x 16" in verify.output


@pytest.mark.slow
def test_same_pixels_as_lucidrains_dataset(tmp_path):
    """denoising-diffusion-pytorch's own folder Dataset (as its Trainer builds it: RGB, 24 px) yields the converted
    samples exactly: its [0, 1] tensors times 255 are our uint8 pixels."""
    from denoising_diffusion_pytorch.denoising_diffusion_pytorch import Dataset

    paths = _images(tmp_path / "in", seed=1)
    assert run("--input", str(tmp_path / "in"), "--output", str(tmp_path / "o"), "--size", "24").exit_code == 0
    ours = dict(zip(stored_order(paths), read_all(tmp_path / "o", "hdf5")[0]))
    ds = Dataset(str(tmp_path / "in"), 24, convert_image_to="RGB")
    assert len(ds) == len(paths)
    for k, path in enumerate(ds.paths):
        theirs = (ds[k].permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
        assert np.array_equal(theirs, ours[Path(path)]), path


def test_mixed_sizes_without_size_suggest_it(tmp_path):
    """Without --size, images of different sizes stop with both files' shapes and the --size fix."""
    _images(tmp_path / "in")
    r = run("--input", str(tmp_path / "in"), "--output", str(tmp_path / "o"))
    assert r.exit_code == 1 and "inconsistent sample shape" in r.output and "--size N" in r.output
    assert not (tmp_path / "o").exists()


def test_nested_folders_take_the_top_folder_as_label(tmp_path):
    """ROOT/<class>/any/depth/*.jpg: the folder directly in ROOT is the label; a README beside them is ignored."""
    a1 = _images(tmp_path / "in" / "cats" / "indoor", seed=2, shapes=[(20, 20, "png")] * 2)
    a2 = _images(tmp_path / "in" / "cats" / "out" / "door", seed=3, shapes=[(20, 20, "jpg")])
    b = _images(tmp_path / "in" / "dogs" / "x", seed=4, shapes=[(20, 20, "png")] * 3)
    (tmp_path / "in" / "README.txt").write_text("about this set")
    r = run("--input", str(tmp_path / "in"), "--output", str(tmp_path / "o"), "--format", "hdf5")
    assert r.exit_code == 0, r.output
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert manifest["classes"] == ["cats", "dogs"] and manifest["count"] == 6
    x, y, _ = read_all(tmp_path / "o", "hdf5")
    order = stored_order(a1 + a2 + b)
    assert np.array_equal(y, [0 if p in a1 + a2 else 1 for p in order])
    assert np.array_equal(x, np.stack([np.asarray(Image.open(p).convert("RGB")) for p in order]))


def test_single_class_folder_is_one_class(tmp_path):
    """ROOT/<one folder>/*.png is one class named after it (unconditional training)."""
    _images(tmp_path / "in" / "faces", seed=5, shapes=[(12, 12, "png")] * 4)
    r = run("--input", str(tmp_path / "in"), "--output", str(tmp_path / "o"), "--format", "hdf5")
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "o" / "manifest.json").read_text())["classes"] == ["faces"]


def test_unlabeled_clips_are_one_class(tmp_path):
    """A flat folder of clips without a <label>_ prefix, and a single folder of them, each convert as one class."""
    clips = make_audio(tmp_path / "flat")
    for k, c in enumerate(clips):
        c.rename(c.with_name(f"take{k}{c.suffix}"))
    r = run("--input", str(tmp_path / "flat"), "--output", str(tmp_path / "o1"), "--format", "hdf5")
    assert r.exit_code == 0, r.output
    m = json.loads((tmp_path / "o1" / "manifest.json").read_text())
    assert m["classes"] == ["flat"] and m["count"] == len(clips)
    (tmp_path / "one").mkdir()
    (tmp_path / "flat").rename(tmp_path / "one" / "speech")
    r = run("--input", str(tmp_path / "one"), "--output", str(tmp_path / "o2"), "--format", "hdf5")
    assert r.exit_code == 0, r.output
    m2 = json.loads((tmp_path / "o2" / "manifest.json").read_text())
    assert m2["classes"] == ["speech"] and m2["digest"]["total"] == m["digest"]["total"]


def test_cifar_pickles_resized(tmp_path):
    """--size applies to CIFAR-10's pickled arrays too, with the same transform."""
    from torchvision import transforms as T

    x, _, _ = make_cifar_pickles(tmp_path / "p", n_per_batch=2)
    r = run("--input", str(tmp_path / "p"), "--output", str(tmp_path / "o"), "--size", "40", "--format", "hdf5")
    assert r.exit_code == 0, r.output
    pipeline = T.Compose([T.Resize(40), T.CenterCrop(40)])
    truth = np.stack([np.asarray(pipeline(Image.fromarray(im))) for im in x])
    assert np.array_equal(read_all(tmp_path / "o", "hdf5")[0], truth)


def test_size_is_refused_where_it_means_nothing(tmp_path):
    """--size on audio or the synthetic images is an error that says which sources it applies to."""
    make_audio(tmp_path / "a")
    for args in (["--input", str(tmp_path / "a")], ["--source", "synthetic-images"]):
        r = run(*args, "--output", str(tmp_path / "o"), "--size", "8")
        assert r.exit_code == 1 and "--size resizes images read from files" in r.output
