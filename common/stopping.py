"""How every `dataprep`, `bench` and `train` command ends after the first Ctrl-C or SIGTERM (exit 130 or 143, as a
shell reports a death by that signal) or after its error, whichever thread or process the error came from. One
policy: the process has ended GRACE_S seconds after the signal, or, in `train`'s loop, after two of its measured steps
and a second where that is longer (grace_for): the step in flight ends and a checkpoint is written.

A command's first stop signal raises `Stopped` in the main thread (not KeyboardInterrupt, which click turns into exit
1), so the command's own cleanup runs as for any error. `train`'s loop takes the signals over while it runs
(StopOnSignal): they set a flag the loop polls between steps, and it checkpoints and returns. Either way the signal
also arms a deadline from a thread of its own, woken by Python's signal wakeup fd however the main thread is blocked
(a FIFO's open(), a collective waiting for a gone rank, a first compiled step): past it the process removes the files
it is writing (common.atomic), so nothing half-written remains, stops its child processes, says what survives and
exits with the code the signal would have given. A second signal exits at once. `bench watch` alone waits for the
program it watches to stop, however long that takes (wait_for_the_program)."""

from __future__ import annotations

import os
import signal
import statistics
import sys
import threading
import time
from collections import deque

import click
import psutil

from . import atomic

SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACE_S = 3.0  # cleanup after a stop or an error (removing a temporary output of GBs takes ~1 s); ended within 5 s
SUCCESS_GRACE_S = 30.0  # the interpreter's teardown after success, left as it is unless something hangs it


class Stopped(BaseException):
    """A stop signal arrived. A BaseException, as KeyboardInterrupt is: `except Exception` must not swallow it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


_stopping: list[int] = []  # the signal that arrived first, once one has
_seen: list[int] = []  # every stop signal, also those another handler took (training's loop installs its own)
_whole_process: list[bool] = []  # set by `train`: the run is the process, so its exit is bounded too


def _handle(signum: int, frame) -> None:
    if _stopping:  # the second: the user insists
        _exit_now(128 + signum, f"stopped by {signal.Signals(signum).name} again: exiting now")
    _stopping.append(signum)
    if not _patient:
        _deadline(GRACE_S, 128 + signum)
    raise Stopped(signum)


def grace_for(step_s: float | None, base: float | None = None) -> float:
    """Seconds from a stop signal to the hard stop: `base` (GRACE_S), or where a loop's steps take `step_s` and that
    is longer, two steps and a second: the step in flight, then the checkpoint."""
    base = GRACE_S if base is None else base
    return base if step_s is None else max(base, 2 * step_s + 1.0)


def _exit_now(code: int, why: str | None = None, hard: bool = False) -> None:
    """Exit at once, the files being written removed (the previous ones stay as they were); after a deadline (`hard`)
    the children (DataLoader workers, Inductor's compile workers) stopped too."""
    for path in atomic.close_all():
        try:
            os.unlink(path)
        except OSError:
            pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    if why:
        os.write(2, f"{why}\n".encode())  # not sys.stderr: the main thread may hold its lock
    if hard:
        _stop_children()
    os._exit(code)


def _stop_children() -> None:
    try:
        children = psutil.Process().children(recursive=True)
    except Exception:  # the exit must happen whatever psutil can or cannot tell
        return
    for child in children:
        try:
            child.kill()
        except Exception:
            pass


_armed: list[float] = []
_patient: list[bool] = []  # set by a command that waits for a program of the user's to stop (bench watch)


def wait_for_the_program() -> None:
    """For a command that runs a program of the user's and passes stop signals on to it (`bench watch`): no deadline
    after a stop signal, since the program decides how long its stop takes (a checkpoint), and the command then
    writes what it measured. A second signal still exits at once."""
    _patient.append(True)


def _deadline(seconds: float, code: int, why: str | None = "still not ended {s:.0f} s after stopping") -> None:
    """Exit with `code` in `seconds` unless the process has ended by then (a daemon thread: it ends with it)."""
    if _armed and _armed[0] <= time.monotonic() + seconds:
        return
    _armed[:] = [time.monotonic() + seconds]

    def wait() -> None:
        time.sleep(seconds)
        _exit_now(code, why and f"{why.format(s=seconds)}: exiting now", hard=True)

    threading.Thread(target=wait, daemon=True, name="gpufeed-exit-deadline").start()


def _watch_wakeup(fd: int) -> None:
    """Read the signal numbers Python's C-level handler writes, whichever thread took the signal and however the
    main thread is blocked, and arm the deadline for a stop signal."""
    while True:
        try:
            data = os.read(fd, 64)
        except OSError:
            return
        if not data:
            return
        for signum in data:
            if signum in SIGNALS:
                _seen.append(signum)
                if not _patient:
                    _deadline(GRACE_S + 1.0, 128 + signum)


def run(command: click.Command) -> None:
    """Run a click command line as its console script does, with the stop signals handled as above; never returns.
    A KeyboardInterrupt that still reaches here (a SIGINT handler of a library's, restored) is a stop by SIGINT too,
    not click's "Aborted!" and exit 1, which a script cannot tell from a failure."""
    code = 0
    for s in SIGNALS:
        signal.signal(s, _handle)
    read, write = os.pipe()
    os.set_blocking(write, False)
    signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    threading.Thread(target=_watch_wakeup, args=(read,), daemon=True, name="gpufeed-stop-watch").start()
    try:
        code = _invoke(command)
    except Stopped as e:
        code = e.exit_code
        print(f"stopped by {e}", file=sys.stderr)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    for s in SIGNALS:  # the command has ended: a signal now only hurries the exit
        signal.signal(s, lambda signum, _: _exit_now(128 + signum))
    stopped_by = (_stopping or _seen)[:1]
    if stopped_by and not _patient:  # a stop signal decides the code, whoever handled it (however late it came);
        code = 128 + stopped_by[0]  # bench watch's is its program's
    _end(code)


def _invoke(command: click.Command) -> int:
    """The command's exit status; click's own handling of errors, with an interrupt as a stop by SIGINT."""
    try:
        result = command.main(standalone_mode=False)
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except (click.Abort, KeyboardInterrupt) as e:
        if isinstance(e, click.Abort) and not isinstance(e.__context__, KeyboardInterrupt):
            print("Aborted!", file=sys.stderr)  # end of input at a prompt: no signal
            return 1
        print("stopped by SIGINT", file=sys.stderr)
        return 128 + signal.SIGINT
    return result if isinstance(result, int) else 0


def _end(code: int) -> None:
    """Exit with `code`. After a failure or a stop, the interpreter's own teardown is skipped once the exit handlers
    have run: it waits for every thread (an encoder still busy with a chunk nobody wants) and collects the whole
    heap (2.5 s with torch loaded on a busy 2-core machine)."""
    import atexit

    if code == 0:
        _deadline(SUCCESS_GRACE_S, code, None)
        sys.exit(code)
    _deadline(GRACE_S, code, "still not ended {s:.0f} s after the error or stop")
    atexit._run_exitfuncs()
    _exit_now(code)


def stop_within_deadline() -> None:
    """This process is the run (the `train` command): after a stop, the watchdog stays until the process ends, so
    its shutdown is within the deadline as well. Library callers (bench, tests) get their process back instead."""
    _whole_process.append(True)


class StopOnSignal:
    """Turns SIGINT/SIGTERM into a flag the loop polls, and ends the process if the loop has not returned within
    grace_for(its steps, `grace_s`) of the first one. `last_checkpoint` (kept current by the loop) is what the hard
    stop's message says survives."""

    def __init__(self, grace_s: float | None = None) -> None:
        self.received: str | None = None
        self.last_checkpoint: str | None = None  # "RUN_DIR/ckpt.pt (step N) is ...": what a stop leaves
        self.grace_s = GRACE_S if grace_s is None else grace_s
        self._steps: deque[float] = deque(maxlen=5)  # the latest intervals between step boundaries, in seconds
        self._boundary: float | None = None
        self._previous: dict = {}
        self._returned = threading.Event()  # the loop is done: a hard stop would only cut the process's shutdown
        self._disarmed = threading.Event()
        self._wakeup: tuple[int, int] | None = None  # the pipe the C-level handler writes signal numbers to
        self._watchdog: threading.Thread | None = None
        self._old_wakeup = -1

    def at_boundary(self) -> None:
        """The loop is between two steps: the time since the last boundary is a step's, which the grace follows."""
        now = time.monotonic()
        if self._boundary is not None:
            self._steps.append(now - self._boundary)
        self._boundary = now

    @property
    def step_s(self) -> float | None:
        """The typical step of late (the median of the last few: one stalled step or checkpoint does not set it)."""
        return statistics.median(self._steps) if self._steps else None

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
        for sig in SIGNALS:
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
            if byte[0] in SIGNALS:
                self._deadline(byte[0])
                return

    def _deadline(self, signum: int) -> None:
        started = time.monotonic()
        while not self._disarmed.wait(0.05):
            grace = grace_for(self.step_s, self.grace_s)
            if time.monotonic() - started >= grace:
                self._hard_stop(signum, grace)

    def _hard_stop(self, signum: int, grace: float) -> None:
        line = None
        if not self._returned.is_set():
            rank = f"rank {os.environ['RANK']}: " if int(os.environ.get("WORLD_SIZE", "1")) > 1 else ""
            line = (
                f"{rank}stopped by {signal.Signals(signum).name}: the run could not stop at a step boundary within "
                f"{grace:.0f} s (a long step, or one waiting on a file, another rank or the device), so it ends "
                f"without a new checkpoint; {self.left()}"
            )
        _exit_now(128 + signum, line, hard=True)
