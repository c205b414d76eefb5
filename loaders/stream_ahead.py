"""The stream loader's read-ahead across epoch boundaries: a thread takes a DataLoader's batches into a bounded queue
as the workers make them and, once the workers have made an epoch's last batch, starts the next epoch at once.

A DataLoader starts an epoch only when the training loop has taken the last one's final batch: its workers then build
their readers, open and decode their first shards, and the GPU waits for all of it at every boundary (under several
ranks, for the slowest rank's). Here that start overlaps the batches still queued. The queue's bound keeps the
thread at most `depth` batches ahead; the training loop gets each epoch's batches in order, then its end."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

END = object()  # an epoch's last batch was put before this


class Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class Ahead:
    """Reads `start(epoch, batch)`'s batches from (epoch, batch) = `first` on, one epoch after the next (each further
    epoch from its batch 0), in a daemon thread. `key` is the (epoch, batch) the consumer's next `epoch()` delivers,
    None once a consumer left an epoch unfinished."""

    def __init__(self, start: Callable[[int, int], Iterable], first: tuple[int, int], depth: int) -> None:
        self.key: tuple[int, int] | None = first
        self._queue: queue.Queue = queue.Queue(max(1, depth))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(start, first), daemon=True, name="gpufeed-stream")
        self._thread.start()

    def _run(self, start: Callable[[int, int], Iterable], key: tuple[int, int]) -> None:
        try:
            while not self._stop.is_set():
                for batch in start(*key):
                    if not self._put(batch):
                        return
                if not self._put(END):
                    return
                key = (key[0] + 1, 0)
        except BaseException as e:  # the consumer raises it, in the training loop's thread
            self._put(Failed(e))

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=1.0)  # the timeout only bounds how long stop() waits for this thread
                return True
            except queue.Full:
                continue
        return False

    def epoch(self) -> Iterator[Any]:
        """The batches of epoch `key`, from its batch `key[1]`; the reading thread's error is raised here."""
        if self.key is None:
            raise RuntimeError("this read-ahead was left inside an epoch; start another")
        epoch, self.key = self.key[0], None
        while True:
            item = self._queue.get()
            if item is END:
                self.key = (epoch + 1, 0)
                return
            if isinstance(item, Failed):
                raise item.error
            yield item

    def stop(self) -> None:
        """Stop the thread: it ends at its next batch, or with the workers once the caller shuts them down."""
        self._stop.set()
        try:
            while True:
                self._queue.get_nowait()
        except queue.Empty:
            pass
        self._thread.join(timeout=2.0)
