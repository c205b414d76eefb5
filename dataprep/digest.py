"""One fingerprint of the decoded samples, identical whichever format they were read back from."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from common.paths import open_regular

from .sources.base import Chunk


class SampleDigest:
    """sha256 over, per sample in order: x bytes (C order), y as <i8, and (audio) length as <i8; plus one digest
    per `chunk_size` samples so a mismatch can be located without keeping the samples. Captions, where the samples
    have them, get digests of their own (`text`: each caption's UTF-8 length as <i8, then its bytes), so that the
    digest of samples without captions stays what it was; their lengths are kept for the manifest's statistics."""

    def __init__(self, chunk_size: int = 1024) -> None:
        self.chunk_size = chunk_size
        self.total = hashlib.sha256()
        self.chunks: list[str] = []
        self._current = hashlib.sha256()
        self.count = 0
        self.text: TextDigest | None = None
        self.per_class = np.zeros(0, np.int64)  # samples of each label: what `info` says is there

    def update(self, chunk: Chunk) -> None:
        if chunk.text is not None:
            self.text = self.text or TextDigest(self.chunk_size)
            self.text.update(chunk.text)
        counts = np.bincount(np.asarray(chunk.y, np.int64), minlength=len(self.per_class))
        counts[: len(self.per_class)] += self.per_class
        self.per_class = counts
        records = _records(chunk)
        start = 0
        while start < len(records):  # up to the next per-chunk boundary at a time
            part = records[start : start + self.chunk_size - self.count % self.chunk_size].tobytes()
            self.total.update(part)
            self._current.update(part)
            n = len(part) // records.itemsize
            start, self.count = start + n, self.count + n
            if self.count % self.chunk_size == 0:
                self.chunks.append(self._current.hexdigest())
                self._current = hashlib.sha256()

    def result(self) -> dict:
        chunks = list(self.chunks)
        if self.count % self.chunk_size:
            chunks.append(self._current.hexdigest())
        return {
            "algorithm": "sha256",
            "chunk_size": self.chunk_size,
            "total": self.total.hexdigest(),
            "chunks": chunks,
            "count": self.count,
        } | ({} if self.text is None else {"text": self.text.result()})


class TextDigest:
    """The captions' digest, cut at the same sample boundaries as the samples', and each caption's length in
    characters and words (split on white space)."""

    def __init__(self, chunk_size: int) -> None:
        self.chunk_size, self.count = chunk_size, 0
        self.total, self._current = hashlib.sha256(), hashlib.sha256()
        self.chunks: list[str] = []
        self.chars: list[int] = []
        self.words: list[int] = []

    def update(self, captions: list[str]) -> None:
        for caption in captions:
            data = caption.encode("utf-8", "surrogateescape")
            record = np.int64(len(data)).astype("<i8").tobytes() + data
            self.total.update(record)
            self._current.update(record)
            self.chars.append(len(caption))
            self.words.append(len(caption.split()))
            self.count += 1
            if self.count % self.chunk_size == 0:
                self.chunks.append(self._current.hexdigest())
                self._current = hashlib.sha256()

    def result(self) -> dict:
        tail = [self._current.hexdigest()] if self.count % self.chunk_size else []
        return {"total": self.total.hexdigest(), "chunks": self.chunks + tail}


def _records(chunk: Chunk) -> np.ndarray:
    """The samples as one packed array whose bytes are, per sample, x then y (then length): what the digest hashes,
    in two updates per chunk instead of two or three per sample."""
    x = np.ascontiguousarray(chunk.x)
    fields = [("x", x.dtype, x.shape[1:]), ("y", "<i8")]
    fields += [] if chunk.length is None else [("length", "<i8")]
    records = np.empty(len(chunk), np.dtype(fields))  # packed: numpy adds no padding unless asked to align
    records["x"], records["y"] = x, chunk.y
    if chunk.length is not None:
        records["length"] = chunk.length
    return records


def file_sha256(path: Path, block: int = 1 << 20) -> str:
    """sha256 of a regular file (a FIFO in its place is refused, not waited on: common.paths)."""
    with open_regular(path) as f:
        return stream_sha256(f, block)


def stream_sha256(f, block: int = 1 << 20) -> str:
    h = hashlib.sha256()
    while data := f.read(block):
        h.update(data)
    return h.hexdigest()
