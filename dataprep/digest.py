"""One fingerprint of the decoded samples, identical whichever format they were read back from."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from .sources.base import Chunk


class SampleDigest:
    """sha256 over, per sample in order: x bytes (C order), y as <i8, and (audio) length as <i8; plus one digest
    per `chunk_size` samples so a mismatch can be located without keeping the samples."""

    def __init__(self, chunk_size: int = 1024) -> None:
        self.chunk_size = chunk_size
        self.total = hashlib.sha256()
        self.chunks: list[str] = []
        self._current = hashlib.sha256()
        self.count = 0

    def update(self, chunk: Chunk) -> None:
        x = np.ascontiguousarray(chunk.x)
        y = chunk.y.astype("<i8")
        length = None if chunk.length is None else chunk.length.astype("<i8")
        for k in range(len(chunk)):
            parts = [x[k].tobytes(), y[k].tobytes()] + ([] if length is None else [length[k].tobytes()])
            for part in parts:
                self.total.update(part)
                self._current.update(part)
            self.count += 1
            if self.count % self.chunk_size == 0:
                self.chunks.append(self._current.hexdigest())
                self._current = hashlib.sha256()

    def result(self) -> dict:
        chunks = list(self.chunks)
        if self.count % self.chunk_size:
            chunks.append(self._current.hexdigest())
        return {"algorithm": "sha256", "chunk_size": self.chunk_size, "total": self.total.hexdigest(),
                "chunks": chunks, "count": self.count}  # fmt: skip


def file_sha256(path: Path, block: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while data := f.read(block):
            h.update(data)
    return h.hexdigest()
