"""torchvision's CIFAR-10: the `cifar-10-batches-py` folder (pickled data_batch_1..5, test_batch, batches.meta)
or the `cifar-10-python.tar.gz` it is unpacked from. Already decoded: each batch is one (10000, 3072) array."""

from __future__ import annotations

import pickle
import tarfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from .base import Chunk, InputError, Source
from .images import resize_array

SPLITS = {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]}


def find_batches_dir(path: Path) -> Path | None:
    for d in (path, path / "cifar-10-batches-py"):
        if (d / "batches.meta").is_file() or (d / "test_batch").is_file() or (d / "data_batch_1").is_file():
            return d
    return None


class Cifar10Source(Source):
    kind = "image"

    def __init__(self, path: Path, split: str = "train", size: int | None = None) -> None:
        if split not in SPLITS:
            raise InputError(f"CIFAR-10 has splits {sorted(SPLITS)}, not {split!r}")
        self.split, self.archive, self.size = split, Path(path), size
        self.path = str(path)
        self._tar = tarfile.open(path) if Path(path).is_file() else None
        self.dir = None if self._tar else find_batches_dir(Path(path))
        if self._tar is None and self.dir is None:
            raise InputError(f"{path}: no cifar-10-batches-py files (batches.meta, data_batch_1..5, test_batch)")
        meta = self._load("batches.meta")
        self.classes = [c.decode() if isinstance(c, bytes) else c for c in meta[b"label_names"]]

    def _load(self, name: str) -> dict:
        where = f"{self.archive}:{name}" if self._tar else self.dir / name
        try:
            if self._tar:
                member = next((m for m in self._tar.getmembers() if Path(m.name).name == name), None)
                if member is None:
                    raise FileNotFoundError("not in the archive")
                f = self._tar.extractfile(member)
            else:
                f = open(self.dir / name, "rb")
            with f:
                return pickle.load(f, encoding="bytes")
        except FileNotFoundError:
            raise InputError(f"{where}: missing (a complete cifar-10-batches-py has {SPLITS})") from None
        except Exception as e:
            raise InputError(f"{where}: corrupt CIFAR-10 batch ({type(e).__name__}: {e})") from None

    def __len__(self) -> int:
        return 10000 * len(SPLITS[self.split])

    def chunks(self, chunk_size: int, on_bad_file: str, workers: int) -> Iterator[Chunk]:
        for name in SPLITS[self.split]:
            batch = self._load(name)
            data, labels = batch.get(b"data"), batch.get(b"labels")
            if data is None or labels is None or len(data) != len(labels) or np.asarray(data).shape[1:] != (3072,):
                raise InputError(f"{self.path}:{name}: expected 'data' (N, 3072) uint8 and N 'labels'")
            # stored planar (N, 3, 32, 32): make it HWC like every decoded image
            x = np.ascontiguousarray(np.asarray(data, np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
            y = np.asarray(labels, np.int64)
            if self.size is not None and self.size != 32:
                x = np.stack([resize_array(im, self.size) for im in x])
            for i in range(0, len(y), chunk_size):
                yield Chunk(x[i : i + chunk_size], y[i : i + chunk_size])
