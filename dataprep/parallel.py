"""An order-keeping, memory-bounded map over worker processes: conversion's decoding and encoding both use it.

Results come back in the order of the items whatever the number of workers, so a conversion's output does not
depend on `--workers`; at most `inflight` items are queued or being worked on, so memory stays bounded whatever the
dataset size.

Each worker has a pipe of its own, not multiprocessing.Pool's shared queues: a worker that dies (the out-of-memory
killer, a crash in a decoder) is then an error naming it, where Pool replaces it and waits for its lost result for
ever; and the workers can be killed at any moment, which with Pool can deadlock on a queue lock a killed worker held
(seen with 16 workers on 2 cores), or hang at interpreter exit, where a map abandoned after an error waited for
results from a pool already shut down."""

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
    --vae` decodes its own share of the input), else all of them."""
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
    """In workers: Ctrl-C and SIGTERM (a terminal or a scheduler signals the whole process group) are for the
    parent, which stops the workers (else every worker prints a traceback, or dies before the parent can say why)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    die_with_parent()


class WorkerDied(RuntimeError):
    """A worker process ended without answering."""


def send_or_end(conn, obj) -> None:
    """In a worker: send `obj` to the converting process, or end this process quietly where that one has gone (its
    pipe broken: the conversion was killed, and the user is told so once, not by a traceback per worker)."""
    try:
        conn.send(obj)
    except (BrokenPipeError, ConnectionResetError):
        os._exit(1)


def _serve(tasks, answers, fn: Callable[[Any], Any]) -> None:
    """A worker: fn(item) for every item that arrives, in order, until None or the pipe closes."""
    import pickle

    worker_init()
    while True:
        try:
            item = tasks.recv()
        except (EOFError, OSError):
            return
        if item is None:
            return
        try:
            answer = (True, fn(item))
        except Exception as e:  # raised in the parent for its item; an exception that cannot travel says what it was
            try:
                pickle.loads(pickle.dumps(e))
                answer = (False, e)
            except Exception:
                answer = (False, RuntimeError(f"{type(e).__name__}: {e}"))
        send_or_end(answers, answer)


class _Worker:
    """One worker process, its pipe, and a thread that sends it items (so the caller never waits on a full pipe)."""

    def __init__(self, ctx, fn: Callable[[Any], Any], name: str) -> None:
        import queue
        import threading

        tasks, self._tasks = ctx.Pipe(duplex=False)
        self.conn, answers = ctx.Pipe(duplex=False)
        self.process = ctx.Process(target=_serve, args=(tasks, answers, fn), name=name, daemon=True)
        self.process.start()
        tasks.close()
        answers.close()
        self.outstanding, self._items = 0, queue.SimpleQueue()
        threading.Thread(target=self._send, daemon=True, name=f"{name}-send").start()

    def _send(self) -> None:
        while True:
            item = self._items.get()
            try:
                self._tasks.send(item)
            except (OSError, ValueError):  # the worker is gone (or killed): result() says so
                item = None
            if item is None:
                self._tasks.close()
                return

    def submit(self, item) -> None:
        self.outstanding += 1
        self._items.put(item)

    def result(self):
        """The answer to this worker's oldest item. Waits in short polls, so the main thread acts on a signal at
        once even when another thread took it."""
        while not self.conn.poll(0.2):
            if not self.process.is_alive() and not self.conn.poll():
                raise WorkerDied(
                    f"{self.process.name} (pid {self.process.pid}) ended without answering: "
                    f"{exit_reason(self.process.exitcode)}"
                )
        try:
            ok, value = self.conn.recv()
        except (EOFError, OSError):
            self.process.join(1)
            raise WorkerDied(f"{self.process.name} ended mid-answer: {exit_reason(self.process.exitcode)}") from None
        self.outstanding -= 1
        if not ok:
            raise value
        return value

    def stop(self, wait: float) -> None:
        """Ask the worker to end after its items, wait up to `wait` seconds, then kill it."""
        self._items.put(None)
        if wait:
            self.process.join(wait)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(2)
        self.conn.close()


def exit_reason(exitcode: int | None) -> str:
    import signal

    if exitcode is None:
        return "it did not exit"
    if exitcode < 0:
        hint = " (out of memory? the kernel's OOM killer sends it)" if exitcode == -signal.SIGKILL else ""
        return f"killed by {signal.Signals(-exitcode).name}{hint}"
    return f"exit code {exitcode}"


def ordered_map(fn: Callable[[Any], Any], items: Iterable, workers: int, inflight: int = 0) -> Iterator[tuple]:
    """Yield (item, fn(item)) in the order of `items`, computed by `workers` processes (inline when 1).

    `fn` and the items must be picklable. An exception raised by `fn` is raised here, for its item; a worker that
    dies raises WorkerDied. Once the map ends, however it ends (done, closed early, an error, a signal), no worker
    is left."""
    if workers <= 1:
        yield from ((item, fn(item)) for item in items)
        return
    inflight = inflight or 4 * workers
    # forkserver, not fork: after FFCV or DALI started threads in this process, a forked child can deadlock
    ctx = mp.get_context("forkserver")
    pool = [_Worker(ctx, fn, f"gpufeed-worker-{i}") for i in range(workers)]
    pending: deque = deque()
    done = False
    try:
        for item in items:
            worker = min(pool, key=lambda w: w.outstanding)
            worker.submit(item)
            pending.append((item, worker))
            if len(pending) >= inflight:
                item, worker = pending.popleft()
                yield item, worker.result()
        while pending:
            item, worker = pending.popleft()
            yield item, worker.result()
        done = True
    finally:  # all answered: the workers end by themselves; otherwise nothing they do is wanted any more
        for worker in pool:
            worker.stop(wait=2.0 if done else 0)
