"""The contract of an output format: a writer fed chunks in order, and a reader that gives them back."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..sources.base import Chunk


@dataclass
class DatasetMeta:
    kind: str  # "image" | "audio"
    sample_shape: tuple[int, ...]
    dtype: str  # "uint8" for images, "float32" for audio
    classes: list[str]
    sample_rate: int | None = None  # audio only
    captions: bool = False  # every sample has a caption, stored by every format (manifest: schema.txt, captions)

    @classmethod
    def from_manifest(cls, manifest: dict) -> DatasetMeta:
        audio = manifest.get("audio") or {}
        return cls(
            manifest["kind"],
            tuple(manifest["sample_shape"]),
            manifest["dtype"],
            manifest["classes"],
            audio.get("sample_rate"),
            has_captions(manifest),
        )

    @property
    def record_bytes(self) -> int:
        return int(np.prod(self.sample_shape)) * np.dtype(self.dtype).itemsize


def has_captions(manifest: dict) -> bool:
    """Whether every format stores a caption per sample: the manifest describes them under "captions"."""
    return isinstance(manifest.get("captions"), dict)


def captions_padded(padded) -> list[str]:
    """Rows of captions' UTF-8 bytes, each ended by a NUL and padded to the longest (FFCV's BytesDecoder leaves the
    rest of a row as it was, DALI's pad zeros it), as str: cut at the first NUL, as a loader has no sizes at hand (a
    caption holding a NUL character is cut there, and then has no cached embedding: an error, never a wrong one)."""
    return [bytes(row).split(b"\0", 1)[0].decode("utf-8", "surrogateescape") for row in np.asarray(padded)]


class FormatWriter(ABC):
    """Writes one format into `out_dir` (the temporary conversion directory)."""

    def __init__(
        self, out_dir: Path, meta: DatasetMeta, workers: int = 1, progress: bool = False, early: Any = None
    ) -> None:
        self.out_dir, self.meta, self.workers, self.progress = Path(out_dir), meta, workers, progress
        self.timings: dict[str, float] = {}  # seconds of stages that ran in the writer's own helper processes

    @classmethod
    def start_early(cls) -> Any:
        """Set-up that needs no samples and takes seconds (importing FFCV), started before the input is read and
        handed to the writer as `early`; None when there is none. Whatever it returns has a `close()`."""
        return None

    def encoder(self) -> Callable[[Chunk, int], Any] | None:
        """The per-sample work that can run in worker processes, or None: a picklable `fn(chunk, first_index)` whose
        result is handed to `write` with the same chunk, in order. It must not depend on what was written before,
        so that the output is the same whatever the number of workers."""
        return None

    @abstractmethod
    def write(self, chunk: Chunk, encoded: Any = None) -> None:
        """Append the chunk's samples, in order; `encoded` is `encoder()(chunk, first_index)` if there is one."""

    @abstractmethod
    def finish(self) -> list[Path | dict]:
        """Flush and close; return the files written, relative to `out_dir` (or already described, as
        {"path", "bytes", "sha256"}, when the encoder hashed them)."""

    def abort(self) -> None:
        """Release open handles after a failure (the temporary directory is removed by the caller)."""


def read_chunks(data_dir: Path, manifest: dict, chunk_size: int) -> Iterator[Chunk]:  # pragma: no cover
    """Each format module defines a function with this signature: samples back in manifest order."""
    raise NotImplementedError
