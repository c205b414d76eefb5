"""FFCV's writer, run in a helper process of its own (Helper): started early, it imports FFCV while the samples are
decoded, then writes the .beton from the staged records (dataprep/formats/ffcv.py) with FFCV's writer processes,
turning a failed writer process into an error instead of a hang."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..convert_config import ConvertError
from ..parallel import WorkerDied, die_with_parent, exit_reason, exit_when_gone, send_or_end
from . import install_hint
from .ffcv_layout import fields, stored_dtype

if TYPE_CHECKING:
    from .base import DatasetMeta

WRITE_CHUNK = 256  # samples per work item handed to FFCV's writer processes: small enough to balance two workers


class StagedRecords:
    """dataset[i] -> the sample's fields, read from the staging file; picklable for FFCV's worker processes."""

    def __init__(
        self, path: Path, meta: DatasetMeta, labels: np.ndarray, lengths: np.ndarray | None, texts: list[bytes]
    ) -> None:
        self.path, self.meta, self.labels, self.lengths, self.texts = str(path), meta, labels, lengths, texts
        self._fd = None

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY)
        size = self.meta.record_bytes
        x = np.frombuffer(os.pread(self._fd, size, i * size), stored_dtype(self.meta.dtype))
        x = x.reshape(self.meta.sample_shape)
        fields = (x, int(self.labels[i])) + (() if self.lengths is None else (int(self.lengths[i]),))
        return fields + ((np.frombuffer(self.texts[i], np.uint8),) if self.meta.captions else ())


class _Span:
    """Samples [start, stop) as FFCV's writer workers iterate a work item: (destination, source) pairs.

    `DatasetWriter.from_indexed_dataset` materialises `list(enumerate(indices))`, ~120 bytes per sample held in the
    parent for the whole write (120 MB at a million samples); a span pickles to a few bytes whatever its size."""

    def __init__(self, start: int, stop: int) -> None:
        self.start, self.stop = start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return ((i, i) for i in range(self.start, self.stop))


@contextmanager
def _ffcv_progress(show: bool):
    """FFCV's writer draws its own tqdm bar; `--quiet` must silence it too, so swap its tqdm while writing."""
    import ffcv.writer
    from tqdm import tqdm

    saved = ffcv.writer.tqdm
    ffcv.writer.tqdm = partial(tqdm, desc="ffcv", unit="sample", disable=not show)
    try:
        yield
    finally:
        ffcv.writer.tqdm = saved


def write_beton(path: Path, records: StagedRecords, workers: int, progress: bool) -> None:
    """FFCV's own writer over the staged records; a failing writer process is an error, not a hang (see _guarded)."""
    import multiprocessing as mp

    from ffcv.writer import DatasetWriter

    writer = DatasetWriter(str(path), fields(records.meta), num_workers=max(1, workers))
    errors = mp.get_context("fork").SimpleQueue()  # FFCV forks its writer processes; they inherit the queue
    with _ffcv_progress(progress), _watch(errors, writer):
        if hasattr(writer, "_write_common"):  # ffcv 1.0.x: feed work as spans, see _Span
            spans = [_Span(i, min(i + WRITE_CHUNK, len(records))) for i in range(0, len(records), WRITE_CHUNK)]
            writer._write_common(len(records), spans, partial(_guarded, errors), (records,))
        else:
            writer.from_indexed_dataset(records, chunksize=WRITE_CHUNK)


def _guarded(errors, *args) -> None:
    """FFCV's writer process body. FFCV's parent waits for a sample count that a failed process never reports (a
    full disk hangs it forever), so a failure is sent to the watcher in `_watch`, which ends the write."""
    from ffcv.writer import worker_job_indexed_dataset

    die_with_parent()
    try:
        worker_job_indexed_dataset(*args)
    except BaseException as e:  # reported once, by the converting process; a traceback per process helps nobody
        errors.put(e if isinstance(e, OSError) else RuntimeError(f"FFCV's writer failed: {type(e).__name__}: {e}"))


@contextmanager
def _watch(errors, writer):
    """Runs in the process that calls FFCV's writer: on a writer process's failure, report it and end everything
    (FFCV's shared memory too, which its writer would have released at the end)."""
    import multiprocessing as mp
    import threading

    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.2):
            if not errors.empty():
                failure = errors.get()
                for child in mp.active_children():
                    child.kill()
                shared = getattr(writer, "metadata_sm", None)
                if hasattr(shared, "unlink"):
                    shared.unlink()
                _report(failure)
                os._exit(1)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


_REPORT = None  # the helper's pipe to the converting process, set in _serve


def _report(failure: BaseException) -> None:
    if _REPORT is not None:
        send_or_end(_REPORT, (failure, {}))


def _serve(conn, parent: int) -> None:
    """The helper process: import FFCV now (seconds: torch and OpenCV) while the samples are decoded, then
    write the .beton when asked and answer (failure or None, {stage: seconds}). It ends when the converting process
    does (its pipe closes)."""
    import signal

    global _REPORT
    import multiprocessing as mp

    t0 = time.perf_counter()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C and SIGTERM are for the converting process, which stops
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # this one (a group's signal must not end the write unreported)
    exit_when_gone(parent)
    # a forkserver child inherits forkserver as its start method; FFCV's writer processes must be forked (a fresh
    # process would import FFCV again, seconds each), from this process that runs nothing else
    mp.set_start_method("fork", force=True)
    # FFCV compiles numba functions at import (its loader's), seconds of CPU that the writer never calls: its
    # writer is plain Python and numpy, and writes the same records with numba's JIT off (tests compare the pixels)
    os.environ["NUMBA_DISABLE_JIT"] = "1"
    try:
        import ffcv.writer  # noqa: F401
    except Exception as e:  # installed but broken (its compiled part, the libraries it links): said at once
        failure = ConvertError(f"FFCV cannot be imported ({type(e).__name__}: {e}); {install_hint('ffcv')}")
        send_or_end(conn, (failure, {}))
        return

    times = {"ffcv: import FFCV": time.perf_counter() - t0}
    _REPORT = conn
    try:
        job = conn.recv()
    except EOFError:
        return
    t0 = time.perf_counter()
    try:
        write_beton(*job)
        send_or_end(conn, (None, times | {"ffcv: FFCV's writer": time.perf_counter() - t0}))
    except BaseException as e:
        failure = e if isinstance(e, OSError) else RuntimeError(f"FFCV's writer failed: {type(e).__name__}: {e}")
        send_or_end(conn, (failure, times))


class Helper:
    """The process that imports FFCV and later runs its writer; started before the input is read (see start_early)."""

    def __init__(self) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("forkserver")  # not fork: see dataprep.parallel
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, os.getpid()), name="gpufeed-ffcv-writer")
        self.process.start()
        child.close()

    def check(self) -> None:
        """Raise the helper's failure where it has already said one (it could not import FFCV) or ended."""
        if self.conn.poll():
            try:
                failure, _ = self.conn.recv()
            except EOFError:
                failure = self._silent()
            raise failure

    def _silent(self) -> WorkerDied:
        self.process.join(1)
        return WorkerDied(f"FFCV's writer process ended without a word: {exit_reason(self.process.exitcode)}")

    def run(self, job: tuple) -> dict[str, float]:
        """Hand the helper its job; wait for the .beton; the seconds of its stages."""
        self.check()
        try:
            self.conn.send(job)
            while not self.conn.poll(0.2):  # short polls: the converting process acts on a stop signal at once
                if not self.process.is_alive() and not self.conn.poll():
                    raise EOFError
            failure, times = self.conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError):
            failure, times = self._silent(), {}
        self.process.join()
        if failure is not None:
            raise failure
        return times

    def close(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.conn.close()
