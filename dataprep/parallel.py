"""An order-keeping, memory-bounded map over worker processes: conversion's decoding and encoding both use it.

Results come back in the order of the items whatever the number of workers, so a conversion's output does not
depend on `--workers`; at most `inflight` items are queued or being worked on, so memory stays bounded whatever the
dataset size."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any


def available_cores() -> int:
    """The cores this process may run on (a container's or `taskset`'s limit, not the machine's count)."""
    return len(os.sched_getaffinity(0))


def cores_per_rank() -> int:
    """This process's share of those cores: under torchrun the ranks of a host share them (every rank of `convert
    --vae` decodes the whole input), else all of them."""
    return max(1, available_cores() // int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


def die_with_parent() -> None:
    """Linux: be killed when the parent process ends. A conversion killed outright (SIGKILL) cannot stop its
    helpers; their parent (multiprocessing's fork server, or the FFCV helper) ends with it, and so do they, rather
    than finishing minutes of useless work into a deleted directory."""
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the helpers end when they next find their pipes closed
        return
    if os.getppid() == 1:  # the parent was already gone before the request took effect
        os._exit(1)


def exit_when_gone(pid: int, every: float = 0.5) -> None:
    """Exit this process when process `pid` has ended (a thread that checks every `every` seconds). For helpers
    that are busy (importing FFCV takes seconds) when the conversion that started them is killed outright: their own
    parent, multiprocessing's fork server, lives as long as any of its children does, so it cannot end them."""
    import threading

    def watch() -> None:
        while _running(pid):
            time.sleep(every)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="exit-when-parent-gone").start()


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")  # a zombie has ended too
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel (a zombie then reads as running until it is reaped)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def worker_init() -> None:
    """In workers: Ctrl-C is for the parent, which stops the pool (else every worker prints a traceback)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()


def ordered_map(fn: Callable[[Any], Any], items: Iterable, workers: int, inflight: int = 0) -> Iterator[tuple]:
    """Yield (item, fn(item)) in the order of `items`, computed by `workers` processes (inline when 1).

    `fn` and the items must be picklable. An exception raised by `fn` is raised here, for its item."""
    if workers <= 1:
        yield from ((item, fn(item)) for item in items)
        return
    inflight = inflight or 4 * workers
    # forkserver, not fork: after FFCV or DALI started threads in this process, a forked child can deadlock
    pool = mp.get_context("forkserver").Pool(workers, initializer=worker_init)
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
