"""Plain files, what the common tutorials read: one PNG per image (lossless, so the pixels survive exactly) or one
float32 WAV per clip, plus `files/index.csv` (path,label[,length]) in manifest order."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..sources.base import Chunk
from .base import DatasetMeta, FormatWriter

DIRNAME = "files"
PER_FOLDER = 10000  # keeps directory listings fast on big sets


def sample_path(index: int, kind: str) -> str:
    return f"{index // PER_FOLDER:03d}/{index:08d}.{'png' if kind == 'image' else 'wav'}"


class FilesWriter(FormatWriter):
    def __init__(self, out_dir: Path, meta: DatasetMeta, workers: int = 1, progress: bool = False) -> None:
        super().__init__(out_dir, meta, workers, progress)
        self.root = self.out_dir / DIRNAME
        self.root.mkdir(parents=True)
        self._index = open(self.root / "index.csv", "w", newline="")
        self._csv = csv.writer(self._index)
        self._csv.writerow(["path", "label"] + (["length"] if meta.kind == "audio" else []))
        self.count = 0

    def write(self, chunk: Chunk) -> None:
        from PIL import Image

        for k in range(len(chunk)):
            rel = sample_path(self.count, self.meta.kind)
            path = self.root / rel
            path.parent.mkdir(exist_ok=True)
            if self.meta.kind == "image":
                # compress_level 1: PNG stays lossless; higher levels cost 5x the time for ~10% smaller files
                Image.fromarray(chunk.x[k]).save(path, compress_level=1)
                self._csv.writerow([rel, int(chunk.y[k])])
            else:
                import soundfile as sf

                x = chunk.x[k]
                sf.write(path, x.T if x.ndim == 2 else x, self.meta.sample_rate, subtype="FLOAT")
                self._csv.writerow([rel, int(chunk.y[k]), int(chunk.length[k])])
            self.count += 1

    def finish(self) -> list[Path]:
        self._index.close()
        return sorted(p.relative_to(self.out_dir) for p in self.root.rglob("*") if p.is_file())

    def abort(self) -> None:
        self._index.close()


def read_index(data_dir: Path) -> list[list[str]]:
    with open(Path(data_dir) / DIRNAME / "index.csv", newline="") as f:
        return list(csv.reader(f))[1:]


def read_sample(path: Path, kind: str) -> np.ndarray:
    if kind == "image":
        from PIL import Image

        with Image.open(path) as im:
            return np.asarray(im.convert("RGB"), dtype=np.uint8)
    import soundfile as sf

    x, _ = sf.read(path, dtype="float32", always_2d=True)
    return x[:, 0] if x.shape[1] == 1 else np.ascontiguousarray(x.T)


def read_chunks(data_dir: Path, manifest: dict, chunk_size: int) -> Iterator[Chunk]:
    meta = DatasetMeta.from_manifest(manifest)
    rows = read_index(data_dir)
    for start in range(0, len(rows), chunk_size):
        part = rows[start : start + chunk_size]
        x = np.stack([read_sample(Path(data_dir) / DIRNAME / r[0], meta.kind) for r in part])
        y = np.array([int(r[1]) for r in part], np.int64)
        length = np.array([int(r[2]) for r in part], np.int64) if meta.kind == "audio" else None
        yield Chunk(x, y, length)
