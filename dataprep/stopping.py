"""How a `dataprep`, `bench` or `train` command ends: within seconds of the first Ctrl-C or SIGTERM (exit 130 or 143, as
a shell reports a death by that signal), and promptly after its error, whichever thread or process the error came
from. `train`'s loop takes the signals over while it runs (training.stopping: it checkpoints first).

The first SIGINT or SIGTERM raises `Stopped` in the main thread (not KeyboardInterrupt, which click turns into exit
1), so the command's own cleanup runs as for any error: worker processes are killed, the temporary output is
removed. Two things could still hold the process: a main thread blocked in a call that never returns to Python (a
signal taken by another thread does not interrupt it), and threads or generators the interpreter waits for at exit.
So the signal also arms a deadline from a thread of its own, woken by Python's signal wakeup fd however the main
thread is blocked, and so does the end of every command: past it the process exits at once (`os._exit`) with the
code it was going to exit with. A second signal exits at once. `bench watch` alone waits for the program it watches
to stop, however long that takes (wait_for_the_program)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import click

SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACE_S = 3.0  # cleanup after a stop request or an error: removing a temporary output of GBs takes ~1 s
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


def _handle(signum: int, frame) -> None:
    if _stopping:  # the second: the user insists
        _exit_now(128 + signum, f"stopped by {signal.Signals(signum).name} again: exiting now")
    _stopping.append(signum)
    if not _patient:
        _deadline(GRACE_S, 128 + signum)
    raise Stopped(signum)


def _exit_now(code: int, why: str | None = None) -> None:
    if why:
        try:
            print(why, file=sys.stderr, flush=True)
        except Exception:
            pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


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
        _exit_now(code, why and f"{why.format(s=seconds)}: exiting now")

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
