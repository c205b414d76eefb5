"""torchvision's CIFAR-10: the `cifar-10-batches-py` folder (pickled data_batch_1..5, test_batch, batches.meta)
or the `cifar-10-python.tar.gz` it is unpacked from. Already decoded: each batch is one (10000, 3072) array."""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from common.paths import NotRegularError, open_regular

from .. import safe_pickle
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
        names = self._load("batches.meta").get(b"label_names")
        if not isinstance(names, list) or not names or not all(isinstance(c, (bytes, str)) for c in names):
            raise InputError(f"{self._where('batches.meta')}: expected 'label_names', a list of class names")
        self.classes = [c.decode("utf-8", "backslashreplace") if isinstance(c, bytes) else c for c in names]

    def _where(self, name: str) -> str:
        return f"{self.archive}:{name}" if self._tar else str(self.dir / name)

    def _load(self, name: str) -> dict:
        where = self._where(name)
        try:
            if self._tar:
                member = next((m for m in self._tar.getmembers() if Path(m.name).name == name), None)
                if member is None:
                    raise FileNotFoundError("not in the archive")
                f = self._tar.extractfile(member)
            else:
                f = open_regular(self.dir / name)
            with f:
                batch = safe_pickle.load(f)
        except FileNotFoundError:
            raise InputError(f"{where}: missing (a complete cifar-10-batches-py has {SPLITS})") from None
        except NotRegularError as e:
            raise InputError(str(e)) from None
        except safe_pickle.UnsafePickle as e:
            raise InputError(
                f"{where}: refused: the pickle calls {e}, which a CIFAR-10 batch never holds (dicts, lists, bytes, "
                "str, ints, numpy arrays); the file may have been tampered with: download CIFAR-10 again"
            ) from None
        except Exception as e:  # damage can surface as almost any exception inside pickle
            raise InputError(f"{where}: corrupt CIFAR-10 batch ({type(e).__name__}: {e})") from None
        if not isinstance(batch, dict):
            raise InputError(f"{where}: corrupt CIFAR-10 batch (a {type(batch).__name__}, not a dict)")
        return batch

    def _arrays(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """The batch's pixels as (N, 32, 32, 3) uint8 and labels as (N,) int64, or an error saying what is wrong."""
        batch = self._load(name)
        data, labels = batch.get(b"data"), batch.get(b"labels")
        expected = f"{self._where(name)}: expected 'data', an (N, 3072) uint8 array, and 'labels', N ints"
        if not isinstance(data, np.ndarray) or not isinstance(labels, list):
            raise InputError(f"{expected}; found {type(data).__name__} and {type(labels).__name__}")
        if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072 or len(labels) != len(data):
            raise InputError(f"{expected}; found {data.dtype} {data.shape} and {len(labels)} labels")
        if not all(type(v) is int and 0 <= v < len(self.classes) for v in labels):
            raise InputError(f"{expected} in 0..{len(self.classes) - 1}; some labels are not")
        # stored planar (N, 3, 32, 32): make it HWC like every decoded image
        x = np.ascontiguousarray(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
        return x, np.asarray(labels, np.int64)

    def __len__(self) -> int:
        return 10000 * len(SPLITS[self.split])

    def chunks(self, chunk_size: int, on_bad_file: str, workers: int) -> Iterator[Chunk]:
        for name in SPLITS[self.split]:
            x, y = self._arrays(name)
            if self.size is not None and self.size != 32:
                x = np.stack([resize_array(im, self.size) for im in x])
            for i in range(0, len(y), chunk_size):
                yield Chunk(x[i : i + chunk_size], y[i : i + chunk_size])
