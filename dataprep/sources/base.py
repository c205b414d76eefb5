"""What a source is: an ordered list of labelled samples that decode to fixed-shape numpy arrays."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


class InputError(Exception):
    """The input as a whole is unusable (empty folder, unknown layout, unreadable archive)."""


class BadSample(Exception):
    """One sample cannot be used; `path` names it so the user can find and fix or skip it."""

    def __init__(self, path: str | Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem


@dataclass
class Chunk:
    """Consecutive samples in output order."""

    x: np.ndarray  # (n, *sample_shape)
    y: np.ndarray  # (n,) int64
    length: np.ndarray | None = None  # (n,) int64, audio only: valid samples before zero padding
    skipped: list[dict] = field(default_factory=list)  # [{"path", "error"}] dropped under on_bad_file=skip
    names: list[Path] | None = None  # each sample's file, where it has one: named in errors found after decoding
    text: list[str] | None = None  # each sample's caption, where the source has them (only the stream format keeps it)

    def __len__(self) -> int:
        return len(self.y)


@dataclass
class AudioSpec:
    sample_rate: int = 16000  # 16 kHz covers speech; 1.024 s at 16 kHz is 16384 = 64 hops of 256 samples
    clip_seconds: float = 1.024
    channels: int = 1  # 1 downmixes; more keeps (or repeats mono into) that many channels

    @property
    def num_samples(self) -> int:
        return int(round(self.sample_rate * self.clip_seconds))

    def sample_shape(self) -> tuple[int, ...]:
        return (self.num_samples,) if self.channels == 1 else (self.channels, self.num_samples)


class Source(ABC):
    """An ordered dataset to convert. Subclasses set kind ('image'|'audio'), classes and path."""

    kind: str
    classes: list[str]
    path: str | None = None

    @abstractmethod
    def __len__(self) -> int:
        """Number of candidate samples (bad ones may still be skipped)."""

    @abstractmethod
    def chunks(self, chunk_size: int, on_bad_file: str, workers: int) -> Iterator[Chunk]:
        """Decoded samples in a deterministic order, `chunk_size` at a time."""

    def audio(self) -> AudioSpec | None:
        return None
