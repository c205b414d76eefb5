"""Stop signals: the first SIGINT or SIGTERM asks the loop to finish its step, checkpoint and return; whatever the
process is doing, it has ended within 5 s of that signal.

The loop polls a flag between steps (`StopOnSignal.received`), checkpoints and returns, and `train` exits 130 or 143.
A step can outlast that budget, or never end: a first compiled step takes minutes, an open() of a FIFO waits for a
writer for ever, a collective waits for a rank that has gone. So the signal also wakes a watchdog thread at once,
through Python's wakeup file descriptor, which the C-level handler writes even while the main thread sits in a system
call or in C code that never returns to Python. If the run has not returned GRACE_S seconds after the signal, the
watchdog ends the process: it removes the temporary files this process was writing (dataprep.atomic), so the last
checkpoint stays as it was and nothing half-written remains, stops its child processes (loader and compile workers),
says so on stderr and exits with 128 + the signal's number, as the signal itself would have. A second signal ends
the process at once (the default action).
"""

from __future__ import annotations

import os
import signal
import threading
import time

import psutil

from dataprep import atomic

GRACE_S = 4.0  # the graceful stop's budget: the process is gone within 5 s of the signal, a second to spare
_whole_process = False  # set by the CLI: the run is the process, so its exit is bounded too


def stop_within_deadline() -> None:
    """This process is the run (the `train` command): after a stop, the watchdog stays until the process ends, so
    its shutdown is within the deadline as well. Library callers (bench, tests) get their process back instead."""
    global _whole_process
    _whole_process = True


class StopOnSignal:
    """Turns SIGINT/SIGTERM into a flag the loop polls, and ends the process GRACE_S seconds after the first one if
    the loop has not returned by then. `last_checkpoint` (kept current by the loop) is what the hard stop's message
    says survives."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, grace_s: float = GRACE_S) -> None:
        self.received: str | None = None
        self.last_checkpoint: str | None = None  # "RUN_DIR/ckpt.pt (step N) is ...": what a stop leaves
        self.grace_s = grace_s
        self._previous: dict = {}
        self._returned = threading.Event()  # the loop is done: a hard stop would only cut the process's shutdown
        self._disarmed = threading.Event()
        self._wakeup: tuple[int, int] | None = None  # the pipe the C-level handler writes signal numbers to
        self._watchdog: threading.Thread | None = None
        self._old_wakeup = -1

    def left(self) -> str:
        """What an early end leaves, and how to go on from it."""
        if self.last_checkpoint is None:
            return "no checkpoint was written by this run: start it again"
        return f"{self.last_checkpoint}; continue with --resume"

    def _handle(self, signum, frame) -> None:
        self.received = self.received or signal.Signals(signum).name
        for sig, handler in self._previous.items():  # a second signal: the default action, at once
            signal.signal(sig, handler)

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is not threading.main_thread():  # signal.signal only works there
            return self
        for sig in self.SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        read, write = os.pipe()
        os.set_blocking(write, False)  # the C-level handler must never block on it
        self._wakeup = (read, write)
        self._old_wakeup = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        self._watchdog = threading.Thread(target=self._watch, name="stop-watchdog", daemon=True)
        self._watchdog.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._wakeup is None:
            return
        signal.set_wakeup_fd(self._old_wakeup)
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._returned.set()
        if self.received and _whole_process:  # it keeps the process's exit within the deadline
            return
        self._disarmed.set()
        os.write(self._wakeup[1], b"\0")  # wakes the watchdog where it waits for a signal
        self._watchdog.join()
        for fd in self._wakeup:
            os.close(fd)

    def _watch(self) -> None:
        while not self._disarmed.is_set():
            byte = os.read(self._wakeup[0], 1)  # every signal with a Python handler writes its number (SIGCHLD too)
            if not byte or byte == b"\0":
                return
            if byte[0] in self.SIGNALS:
                self._deadline(byte[0])
                return

    def _deadline(self, signum: int) -> None:
        started = time.monotonic()
        while not self._disarmed.wait(0.05):
            if time.monotonic() - started >= self.grace_s:
                self._hard_stop(signum)

    def _hard_stop(self, signum: int) -> None:
        name = signal.Signals(signum).name
        for path in atomic.close_all():  # the writes in progress: the previous files stay as they were
            try:
                os.unlink(path)
            except OSError:
                pass
        _stop_children()
        if not self._returned.is_set():
            rank = f"rank {os.environ['RANK']}: " if int(os.environ.get("WORLD_SIZE", "1")) > 1 else ""
            line = (
                f"{rank}stopped by {name}: the run could not stop at a step boundary within {self.grace_s:.0f} s "
                "(a long step, or one waiting on a file, another rank or the device), so it ends without a new "
                f"checkpoint; {self.left()}\n"
            )
            os.write(2, line.encode())  # not sys.stderr: the main thread may hold its lock
        os._exit(128 + signum)


def _stop_children() -> None:
    """This process's children (DataLoader workers, Inductor's compile workers) end with it, at once."""
    try:
        children = psutil.Process().children(recursive=True)
    except Exception:  # the exit must happen whatever psutil can or cannot tell
        return
    for child in children:
        try:
            child.kill()
        except Exception:
            pass
