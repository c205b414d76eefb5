"""Builders of small real datasets on disk, and a reader of every format, shared by the dataprep tests."""

from __future__ import annotations

import csv
import pickle
import sys
from pathlib import Path

import numpy as np
from PIL import Image

from dataprep.formats import module
from dataprep.manifest import load_manifest
from dataprep.sources.files import mixed

FORMATS = ["files", "hdf5", "ffcv", "dali"]


def dataprep_command(command: str, **options) -> list[str]:
    """`python -m dataprep COMMAND` with `options` as its flags (input="x": --input x; quiet=True: --quiet)."""
    flags = [[f"--{k.replace('_', '-')}"] + ([] if v is True else [str(v)]) for k, v in options.items()]
    return [sys.executable, "-m", "dataprep", command, *(part for flag in flags for part in flag)]


def read_all(data_dir: Path, fmt: str):
    """Every sample of one format, concatenated: (x, y, length|None)."""
    manifest = load_manifest(data_dir)
    chunks = list(module(fmt).read_chunks(data_dir, manifest, 256))
    x = np.concatenate([c.x for c in chunks])
    y = np.concatenate([c.y for c in chunks])
    length = None if chunks[0].length is None else np.concatenate([c.length for c in chunks])
    return x, y, length


def stored_order(files: list[Path]) -> list[Path]:
    """A folder's sample files in the order conversion stores them: the product's own rule (`mixed`) applied to the
    files sorted as a source lists them, so each test's truth follows that rule instead of a copy of it."""
    return [p for p, _ in mixed([(p, 0) for p in sorted(files)])]


def random_images(n: int, seed: int = 0, size: int = 32) -> np.ndarray:
    rng = np.random.default_rng(seed)
    grad = np.linspace(0, 200, size, dtype=np.float32)
    base = grad[None, :, None, None] + grad[None, None, :, None] * 0.2
    return np.clip(base + rng.integers(0, 55, (n, size, size, 3)), 0, 255).astype(np.uint8)


def make_cifar_pickles(root: Path, n_per_batch: int = 20) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """A torchvision-format cifar-10-batches-py with small batches; returns train (x HWC, y) and classes."""
    d = root / "cifar-10-batches-py"
    d.mkdir(parents=True)
    classes = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    with open(d / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": [c.encode() for c in classes]}, f)
    xs, ys = [], []
    for i, name in enumerate([f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]):
        x = random_images(n_per_batch, seed=i)
        y = np.arange(n_per_batch) % 10
        planar = x.transpose(0, 3, 1, 2).reshape(n_per_batch, 3072)
        with open(d / name, "wb") as f:
            pickle.dump({b"data": planar, b"labels": y.tolist()}, f)
        if name != "test_batch":
            xs.append(x)
            ys.append(y)
    return np.concatenate(xs), np.concatenate(ys), classes


def make_kaggle(root: Path, n: int = 30) -> tuple[np.ndarray, np.ndarray]:
    """Kaggle layout: train/<id>.png (ids 1..n) and trainLabels.csv; returns x, y in id order."""
    (root / "train").mkdir(parents=True)
    x = random_images(n, seed=7)
    names = ["cat", "dog", "frog"]
    with open(root / "trainLabels.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "label"])
        for i in range(n):
            Image.fromarray(x[i]).save(root / "train" / f"{i + 1}.png")
            w.writerow([i + 1, names[i % 3]])
    return x, np.array([sorted(names).index(names[i % 3]) for i in range(n)])


def make_imagefolder(root: Path, n_per_class: int = 8, classes=("bird", "cat")) -> tuple[np.ndarray, np.ndarray]:
    """ROOT/<class>/*.jpg|png (classes given sorted); returns the decoded pixels and labels in stored order."""
    x = random_images(n_per_class * len(classes), seed=3)
    k = 0
    for c in classes:
        (root / c).mkdir(parents=True)
        for i in range(n_per_class):
            ext = "png" if i % 2 else "jpg"
            Image.fromarray(x[k]).save(root / c / f"{i:04d}.{ext}", quality=90)
            k += 1
    files = stored_order([p for c in classes for p in (root / c).iterdir()])
    truth = [np.asarray(Image.open(p).convert("RGB")) for p in files]
    return np.stack(truth), np.array([classes.index(p.parent.name) for p in files])


def make_audio(root: Path) -> list[Path]:
    """Clips at several rates, channel counts and containers, labelled by prefix."""
    import soundfile as sf

    rng = np.random.default_rng(0)
    specs = [
        ("0_a_1.wav", 8000, 1, 0.5),
        ("1_b_2.flac", 22050, 2, 1.5),
        ("0_c_3.ogg", 16000, 1, 0.8),
        ("1_d_4.wav", 16000, 2, 1.024),
        ("2_e_5.wav", 44100, 1, 0.2),
    ]
    root.mkdir(parents=True)
    paths = []
    for name, rate, ch, secs in specs:
        t = np.arange(int(rate * secs)) / rate
        wave = 0.3 * np.sin(2 * np.pi * 440 * t)[:, None] + 0.01 * rng.standard_normal((len(t), ch))
        sf.write(root / name, wave.astype(np.float32), rate)
        paths.append(root / name)
    return paths


def decode_audio_truth(path: Path, rate: int = 16000, n: int = 16384):
    """The documented audio pipeline, written out independently: downmix, soxr HQ resample, crop or zero-pad."""
    import soundfile as sf
    import soxr

    data, sr = sf.read(path, dtype="float32", always_2d=True)
    mono = data.mean(axis=1, keepdims=True)
    if sr != rate:
        mono = soxr.resample(mono, sr, rate, quality="HQ")
    out = np.zeros(n, np.float32)
    k = min(n, len(mono))
    out[:k] = mono[:k, 0]
    return out, k
