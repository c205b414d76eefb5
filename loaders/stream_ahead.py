"""The stream loader's epochs, overlapped: the next one started before the current one ends, the current one's
workers stopped after its last batch is handed over.

A DataLoader without persistent workers starts its workers as an epoch's first batch is asked for, and LitData's
workers then open (or download) their first shards: the GPU waits for all of that at every epoch start. LitData's
dataset cannot keep its workers across epochs (each worker holds the epoch it was pickled with), so the next epoch
runs on a second DataLoader whose first batch is fetched in a thread while the current epoch's last batches are read.
The two epochs' workers overlap only for that lead time. An epoch's iterator stops its workers (joining each) when
asked for the batch after its last: that happens in a thread too, once the last batch is out."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

LEAD_MIN_S = 0.5  # the least lead: a warm start (workers started, first shard read from the cache) takes ~0.2 s
CANCEL_WAIT_S = 30.0  # how long close() waits for a first batch in flight before leaving its daemon thread behind


class EpochAhead:
    """Epoch `epoch` of `dl` (prepared for it by the caller), its first batch fetched in a daemon thread."""

    def __init__(self, dl, epoch: int) -> None:
        self.dl, self.epoch = dl, epoch
        self._batches = iter(dl)  # a generator: nothing runs until the thread asks for the first batch
        self._head, self._error, self.ready_s, self._t0 = None, None, 0.0, time.perf_counter()
        self._thread = threading.Thread(target=self._first, name="gpufeed-stream-next-epoch", daemon=True)
        self._thread.start()

    def _first(self) -> None:
        try:
            self._head = next(self._batches, None)
            self.ready_s = time.perf_counter() - self._t0
        except BaseException as e:  # re-raised in the training thread, inside the loader's error reporting
            self._error = e

    def take(self) -> tuple[object, Iterator]:
        """The first batch (None: an empty epoch) and the iterator of the rest; the thread's error, if it had one."""
        self._thread.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return self._head, self._batches

    def cancel(self) -> None:
        """Stop its workers: the generator is closed once its first batch is in (a generator cannot be closed while
        another thread runs it)."""
        self._thread.join(CANCEL_WAIT_S)
        if not self._thread.is_alive():
            self._batches.close()
        self._head = None


class Lead:
    """When to start the next epoch: in this epoch's second half (its pace measured over the first), once the batches
    left take no longer than twice a cold start's time to the first batch (at least LEAD_MIN_S)."""

    def __init__(self, startup_s: float, total: int, first: int) -> None:
        self.lead_s = max(LEAD_MIN_S, 2 * startup_s)
        self.total, self.first, self.t0 = total, first, time.perf_counter()

    def due(self, i: int) -> bool:
        done, left = i - self.first + 1, self.total - i - 1
        return done >= left and left * (time.perf_counter() - self.t0) / done <= self.lead_s


class Retired:
    """An epoch's iterator run to its end in a daemon thread (its workers stopped there); `extra` counts batches it
    still had after the ones its length promised (none: the loader's length is exact)."""

    def __init__(self, batches: Iterator) -> None:
        self.extra = 0
        self._thread = threading.Thread(target=self._drain, args=(batches,), name="gpufeed-stream-retire", daemon=True)
        self._thread.start()

    def _drain(self, batches: Iterator) -> None:
        try:
            self.extra = sum(1 for _ in batches)
        except Exception:  # the epoch's batches were all delivered; a failure while stopping its workers loses none
            pass

    def join(self) -> None:
        self._thread.join(CANCEL_WAIT_S)


def stream_worker_init(worker_id: int) -> None:
    """DataLoader `worker_init_fn` of the stream loader: stop signals left to the parent, and the checking downloader
    registered in the worker too (a worker started by a fork server or spawn has LitData's own)."""
    from litdata.streaming.downloader import register_downloader

    from .stream_checks import checking_downloader
    from .workers import leave_stop_signals_to_the_parent

    leave_stop_signals_to_the_parent(worker_id)
    register_downloader("s3://", checking_downloader(), overwrite=True)


def start_fork_server() -> str:
    """Start multiprocessing's fork server in a thread, with torch, LitData and this module imported once there, so
    that the workers it forks start warm; "forkserver", the context to pass on."""
    import multiprocessing
    from multiprocessing import forkserver

    multiprocessing.get_context("forkserver").set_forkserver_preload(["torch", "litdata", "loaders.stream_backend"])
    threading.Thread(target=forkserver.ensure_running, name="gpufeed-fork-server", daemon=True).start()
    return "forkserver"
