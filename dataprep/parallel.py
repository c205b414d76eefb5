"""An order-keeping, memory-bounded map over worker processes: conversion's decoding and encoding both use it.

Results come back in the order of the items whatever the number of workers, so a conversion's output does not
depend on `--workers`; at most `inflight` items are queued or being worked on, so memory stays bounded whatever the
dataset size."""

from __future__ import annotations

import multiprocessing as mp
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any


def available_cores() -> int:
    """The cores this process may run on (a container's or `taskset`'s limit, not the machine's count)."""
    return len(os.sched_getaffinity(0))


def _ignore_sigint() -> None:
    """In workers: Ctrl-C is for the parent, which stops the pool (else every worker prints a traceback)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def ordered_map(fn: Callable[[Any], Any], items: Iterable, workers: int, inflight: int = 0) -> Iterator[tuple]:
    """Yield (item, fn(item)) in the order of `items`, computed by `workers` processes (inline when 1).

    `fn` and the items must be picklable. An exception raised by `fn` is raised here, for its item."""
    if workers <= 1:
        yield from ((item, fn(item)) for item in items)
        return
    inflight = inflight or 4 * workers
    # forkserver, not fork: after FFCV or DALI started threads in this process, a forked child can deadlock
    pool = mp.get_context("forkserver").Pool(workers, initializer=_ignore_sigint)
    pending: deque = deque()
    try:
        for item in items:
            pending.append((item, pool.apply_async(fn, (item,))))
            if len(pending) >= inflight:
                item, result = pending.popleft()
                yield item, result.get()
        while pending:
            item, result = pending.popleft()
            yield item, result.get()
        pool.close()
    except GeneratorExit:
        # the consumer has enough (--limit): let the work in flight finish, then close; terminating workers while they
        # write results can deadlock the pool on its result lock (seen with 16 workers on 2 cores)
        for _, result in pending:
            result.wait()
        pool.close()
        raise
    except BaseException:  # Ctrl-C or an error: stop now
        pool.terminate()
        raise
    finally:
        pool.join()
