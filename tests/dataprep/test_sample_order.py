"""The order samples are stored in: a folder sorted by class is stored in a seeded random order, so a prefix of it
(`--limit N`) and each stream shard hold every class in proportion, and a shuffled stream batch mixes them."""

from __future__ import annotations

import numpy as np
import torch

from dataprep.convert import ConvertConfig, convert
from loaders import build_loader


def _convert(root, out, limit: int, formats: tuple[str, ...]):
    return convert(ConvertConfig(output=out, input=root, formats=formats, limit=limit, workers=1, progress=False))


def test_a_limited_conversion_of_a_class_folder_spreads_over_its_classes(cifar_jpg_root, tmp_path):
    """--limit 500 of CIFAR-10's class folders holds all ten classes, none far from a tenth (sorted: airplanes only)."""
    import h5py

    _convert(cifar_jpg_root, tmp_path / "d", 500, ("hdf5",))
    with h5py.File(next((tmp_path / "d").rglob("*.h5"))) as f:
        counts = np.bincount(np.asarray(f["y"]), minlength=10)
    assert counts.min() >= 25 and counts.max() <= 80, counts


def test_the_same_folder_converts_to_the_same_order(cifar_jpg_root, tmp_path):
    """The order is seeded: two conversions of one folder give the same samples in the same order (one digest)."""
    a = _convert(cifar_jpg_root, tmp_path / "a", 300, ("hdf5",))
    b = _convert(cifar_jpg_root, tmp_path / "b", 300, ("hdf5",))
    assert a["digest"] == b["digest"]


def test_a_shuffled_stream_batch_mixes_the_classes(cifar_jpg_root, tmp_path, monkeypatch):
    """Every shuffled stream batch of 128 from 3,000 CIFAR-10 images holds at least 8 of the 10 classes (a batch is
    drawn from one shard: stored by class, each held one class)."""
    import dataprep.formats.stream as stream

    monkeypatch.setattr(stream, "SHARD_BYTES", 1 << 20)
    _convert(cifar_jpg_root, tmp_path / "s", 3000, ("stream",))
    with build_loader("stream", tmp_path / "s", batch_size=128, workers=0, augment=False) as loader:
        classes = [len(torch.unique(b.y)) for b in loader]
    assert len(classes) == 3000 // 128 and min(classes) >= 8, classes


def test_a_stream_shard_holds_at_most_1024_samples(tmp_path):
    """3,000 CIFAR-sized images make 3 shards or more, none over 1,024 samples, so 4 loader workers each read whole
    shards of their own (in 16 MiB shards all 3,000 were one shard, split between the workers)."""
    import json

    from dataprep.formats.stream import DIRNAME, INDEX

    convert(
        ConvertConfig(
            output=tmp_path / "s", source="synthetic-images", limit=3000, formats=("stream",), workers=1, progress=False
        )
    )
    sizes = [c["chunk_size"] for c in json.loads((tmp_path / "s" / DIRNAME / INDEX).read_text())["chunks"]]
    assert sum(sizes) == 3000 and len(sizes) >= 3 and max(sizes) <= 1024, sizes


def test_info_counts_the_classes_a_limited_conversion_holds(tmp_path):
    """`info` of a 2-sample conversion of a 3-class folder says how many classes it holds, not the folder's 3."""
    from click.testing import CliRunner
    from PIL import Image

    from dataprep.cli import cli

    for name in ("cat", "dog", "eel"):
        (tmp_path / "in" / name).mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (8, 8), (i * 90, 0, 0)).save(tmp_path / "in" / name / f"{i}.png")
    m = _convert(tmp_path / "in", tmp_path / "d", 2, ("hdf5",))
    there = sum(n > 0 for n in m["class_counts"])
    assert len(m["class_counts"]) == 3 and sum(m["class_counts"]) == 2 and there <= 2
    out = CliRunner().invoke(cli, ["info", str(tmp_path / "d")]).output
    assert f"{there} of 3 classes present" in out, out
    _convert(tmp_path / "in", tmp_path / "f", 6, ("hdf5",))
    assert ", 3 classes\n" in CliRunner().invoke(cli, ["info", str(tmp_path / "f")]).output
