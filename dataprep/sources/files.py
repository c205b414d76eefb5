"""Sources whose samples are one file each (image folders, Kaggle PNGs, audio clips), decoded in a process pool."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import numpy as np

from ..parallel import ordered_map
from .base import BadSample, Chunk, Source

DECODE_BLOCK = 64  # files per task: amortises the round trip to a worker, small enough to balance 16 workers
ORDER_SEED = 0  # fixed: the same folder always converts to the same samples in the same order


def _safe(decode: Callable, path: Path):
    try:
        return True, decode(path)
    except BadSample as e:
        return False, e.problem
    except Exception as e:  # a decoder bug must still name the file
        return False, f"{type(e).__name__}: {e}"


def _safe_block(decode: Callable, paths: list[Path]) -> tuple[list[tuple[bool, object]], float]:
    """The block's results, and the CPU seconds the worker spent on them."""
    t0 = time.process_time()
    return [_safe(decode, p) for p in paths], time.process_time() - t0


class FileSource(Source):
    """`items` is [(path, label)] in output order; `decode(path) -> (x, length | None)` must be picklable."""

    items: list[tuple[Path, int]]
    decode: Callable[[Path], tuple[np.ndarray, int | None]]
    root: Path
    decode_cpu_s: float = 0.0  # summed over the decoding processes, for the conversion's timings
    decoded: int = 0  # samples this process decoded (under torchrun --vae, its share)
    # which samples (by index in `items`) this process needs the pixels of; the others come as zeros of the same shape
    needed: Callable[[int], bool] | None = None
    caption_of: dict[Path, str] | None = None  # each sample's caption, where the folder holds them (sources.captions)

    @property
    def captions(self) -> bool:
        return self.caption_of is not None

    def __len__(self) -> int:
        return len(self.items)

    def _results(self, workers: int) -> Iterator[tuple[bool, object]]:
        """(ok, decoded sample or problem) per item in order; (True, None) for an item this process does not need."""
        need = self.needed or (lambda i: True)
        paths = [p for i, (p, _) in enumerate(self.items) if need(i)]
        blocks = (paths[i : i + DECODE_BLOCK] for i in range(0, len(paths), DECODE_BLOCK))
        decoded = self._decoded(ordered_map(partial(_safe_block, self.decode), blocks, workers))
        try:
            for i in range(len(self.items)):
                yield next(decoded) if need(i) else (True, None)
        finally:  # closed early: the decoding processes stop now
            decoded.close()

    def _decoded(self, answers: Iterator[tuple]) -> Iterator[tuple[bool, object]]:
        for _, (results, cpu_s) in answers:
            self.decode_cpu_s += cpu_s
            self.decoded += len(results)
            yield from ((ok, self.received(value) if ok else value) for ok, value in results)

    def received(self, value: tuple[np.ndarray, int | None]) -> tuple[np.ndarray, int | None]:
        """A decoded sample as it comes back from a decoding process, made whole here (audio pads it)."""
        return value

    def chunks(self, chunk_size: int, on_bad_file: str, workers: int) -> Iterator[Chunk]:
        xs, ys, lengths, skipped, names = [], [], [], [], []
        shape, first, like = None, None, None
        for (path, label), (ok, value) in zip(self.items, self._results(workers)):
            if ok and value is None:  # not this process's to decode: zeros like the first sample, filled in below
                x, n = None, None
            elif ok:
                x, n = value
                if shape is None:
                    shape, first, like = x.shape, self._relative(path), x
                elif x.shape != shape:
                    ok, value = False, self._mismatch(x.shape, first, shape)
            if not ok:
                rel = self._relative(path)
                if on_bad_file == "error":
                    raise BadSample(rel, value)
                skipped.append({"path": str(rel), "error": value})
                continue
            xs.append(x)
            ys.append(label)
            lengths.append(n)
            names.append(path)
            if len(ys) == chunk_size:
                yield self._chunk(xs, ys, lengths, skipped, names, like)
                xs, ys, lengths, skipped, names = [], [], [], [], []
        if ys or skipped:
            yield self._chunk(xs, ys, lengths, skipped, names, like)

    def _relative(self, path: Path) -> Path:
        return path.relative_to(self.root) if path.is_relative_to(self.root) else path

    def _mismatch(self, got: tuple, first: Path, shape: tuple) -> str:
        hint = "; pass --size N to resize every image to N x N" if self.kind == "image" else ""
        return f"inconsistent sample shape {got}; {first} has {shape}{hint}"

    def _chunk(self, xs, ys, lengths, skipped, names, like) -> Chunk:
        # the first item is always decoded where items are left out (convert_latents.share_decoding): `like` is known
        xs = [np.zeros_like(like) if x is None else x for x in xs]
        x = np.stack(xs) if xs else np.zeros((0,), np.uint8)
        length = None if all(n is None for n in lengths) else np.asarray([n or 0 for n in lengths], np.int64)
        text = None if self.caption_of is None else [self.caption_of[p] for p in names]
        return Chunk(x, np.asarray(ys, np.int64), length, list(skipped), names, text)


def mixed(items: list[tuple[Path, int]]) -> list[tuple[Path, int]]:
    """The files in a seeded random order, the samples' order in every format: a listing sorted by class would put
    one class in each stream shard, where a shuffled batch is drawn from one shard, and make `--limit N` the first
    classes alone."""
    return [items[i] for i in np.random.default_rng(ORDER_SEED).permutation(len(items))]


def list_files(folder: Path) -> list[Path]:
    """Every visible entry below `folder` that is not a folder, sorted as Paths sort (part by part), so the output
    order never depends on the file system. Broken symlinks and symlink loops are listed too: decoding them fails with
    the file named, instead of the sample vanishing silently. Symlinked folders are followed once (a folder reached
    twice is not re-entered). Sorted as strings split into parts: Path objects re-split on every comparison."""
    return [Path(p) for p in sorted(walk_files(folder), key=lambda p: p.split(os.sep))]


def walk_files(folder: Path) -> Iterator[str]:
    """The entries list_files lists, unsorted, as strings."""
    seen = set()
    for here, dirs, files in os.walk(folder, followlinks=True):
        st = os.stat(here)
        if (st.st_dev, st.st_ino) in seen:
            dirs[:] = []
            continue
        seen.add((st.st_dev, st.st_ino))
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        yield from (os.path.join(here, f) for f in files if not f.startswith("."))
