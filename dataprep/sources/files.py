"""Sources whose samples are one file each (image folders, Kaggle PNGs, audio clips), decoded in a process pool."""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from .base import BadSample, Chunk, Source


def _safe(decode: Callable, path: Path):
    try:
        return True, decode(path)
    except BadSample as e:
        return False, e.problem
    except Exception as e:  # a decoder bug must still name the file
        return False, f"{type(e).__name__}: {e}"


def _ignore_sigint() -> None:
    """In decoding workers: Ctrl-C is for the parent, which stops the pool (else every worker prints a traceback)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


class FileSource(Source):
    """`items` is [(path, label)] in output order; `decode(path) -> (x, length | None)` must be picklable."""

    items: list[tuple[Path, int]]
    decode: Callable[[Path], tuple[np.ndarray, int | None]]
    root: Path

    def __len__(self) -> int:
        return len(self.items)

    def _results(self, workers: int) -> Iterator[tuple[bool, object]]:
        paths = [p for p, _ in self.items]
        if workers <= 1:
            yield from (_safe(self.decode, p) for p in paths)
            return
        from functools import partial

        fn, block = partial(_safe, self.decode), 4 * 64 * workers  # paths in flight at most
        # forkserver, not fork: after FFCV or DALI started threads in this process, a forked child can deadlock
        pool = mp.get_context("forkserver").Pool(workers, initializer=_ignore_sigint)
        results = iter(())
        try:
            for start in range(0, len(paths), block):
                results = pool.imap(fn, paths[start : start + block], chunksize=64)
                yield from results
            pool.close()
        except GeneratorExit:
            # the consumer has enough (--limit): finish the block in flight and close; terminating workers while they
            # write results can deadlock the pool on its result lock (seen with 16 workers on 2 cores)
            for _ in results:
                pass
            pool.close()
            raise
        except BaseException:  # Ctrl-C or an error: stop now
            pool.terminate()
            raise
        finally:
            pool.join()

    def chunks(self, chunk_size: int, on_bad_file: str, workers: int) -> Iterator[Chunk]:
        xs, ys, lengths, skipped = [], [], [], []
        shape, first = None, None
        for (path, label), (ok, value) in zip(self.items, self._results(workers)):
            rel = path.relative_to(self.root) if path.is_relative_to(self.root) else path
            if ok:
                x, n = value
                if shape is None:
                    shape, first = x.shape, rel
                elif x.shape != shape:
                    ok, value = False, self._mismatch(x.shape, first, shape)
            if not ok:
                if on_bad_file == "error":
                    raise BadSample(rel, value)
                skipped.append({"path": str(rel), "error": value})
                continue
            xs.append(x)
            ys.append(label)
            lengths.append(n)
            if len(ys) == chunk_size:
                yield self._chunk(xs, ys, lengths, skipped)
                xs, ys, lengths, skipped = [], [], [], []
        if ys or skipped:
            yield self._chunk(xs, ys, lengths, skipped)

    def _mismatch(self, got: tuple, first: Path, shape: tuple) -> str:
        hint = "; pass --size N to resize every image to N x N" if self.kind == "image" else ""
        return f"inconsistent sample shape {got}; {first} has {shape}{hint}"

    @staticmethod
    def _chunk(xs, ys, lengths, skipped) -> Chunk:
        x = np.stack(xs) if xs else np.zeros((0,), np.uint8)
        length = None if not lengths or lengths[0] is None else np.asarray(lengths, np.int64)
        return Chunk(x, np.asarray(ys, np.int64), length, list(skipped))


def list_files(folder: Path) -> list[Path]:
    """Every visible entry below `folder` that is not a folder, sorted, so the output order never depends on the file
    system. Broken symlinks and symlink loops are listed too: decoding them fails with the file named, instead of
    the sample vanishing silently. Symlinked folders are followed once (a folder reached twice is not re-entered)."""
    out, seen = [], set()
    for here, dirs, files in os.walk(folder, followlinks=True):
        st = os.stat(here)
        if (st.st_dev, st.st_ino) in seen:
            dirs[:] = []
            continue
        seen.add((st.st_dev, st.st_ino))
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        out += [Path(here) / f for f in files if not f.startswith(".")]
    return sorted(out)
