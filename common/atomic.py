"""Files written whole or not at all: `.NAME.tmp-PID` beside NAME, renamed over it when complete. Every file that
dataprep, train and bench write in place (a manifest, a checkpoint, a compile-cache file, a result) goes through
`written`: the one place that makes a temporary name, so none can write through a link planted there.

A crash mid-write leaves the previous file intact. The writer holds an exclusive `flock` on its temporary file while
it writes; the kernel drops it when the process dies however it dies, so the next run can tell a killed writer's
leftover (no lock, the process gone) from a live one's and remove it. A hard stop (common.stopping) removes the
files this process is writing before it exits: nothing half-written outlives it. Torch-free: the compile cache's
bytecode side uses it before torch is imported; it imports nothing of gpufeed, so `bench watch` can load
it inside a watched program under a private name (bench.watcher.state).
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_in_flight: set[str] = set()  # temporary files this process is writing now
_lock = threading.Lock()
_closed = threading.Event()  # a hard stop is removing them: no new one may start


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists (someone else's included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def close_all() -> list[str]:
    """The temporary files being written now, for a hard stop to remove; after this call no write starts."""
    with _lock:
        _closed.set()
        return sorted(_in_flight)


def temporary_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


@contextmanager
def written(path: Path, mode: int = 0o666) -> Iterator[Path]:
    """Yield the temporary name to write `path`'s new content to; on success it replaces `path` in one rename, on any
    error (or a hard stop) it is removed. `mode`: the new file's permission bits (the umask applies)."""
    path = Path(path)
    tmp = temporary_name(path)
    tmp.unlink(missing_ok=True)  # this process's own, from an earlier failed write
    with _lock:
        if _closed.is_set():  # the process is ending: wait for it rather than leave a file behind
            threading.Event().wait()
        # O_EXCL and O_NOFOLLOW: a name planted here (a FIFO, a link) is never written through
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        _in_flight.add(str(tmp))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held until the rename: the mark of a live writer
        yield tmp
        os.replace(tmp, path)
    finally:
        _in_flight.discard(str(tmp))
        tmp.unlink(missing_ok=True)
        os.close(fd)


def write_text(path: os.PathLike | str, text: str, mode: int = 0o666) -> None:
    """Write `text` to `path` whole or not at all, through `written`."""
    with written(Path(path), mode) as tmp, open(tmp, "w", encoding="utf-8", opener=_no_follow) as f:
        f.write(text)


def _no_follow(path: str, flags: int) -> int:
    """Open the temporary file `written` made, never a link put in its place since."""
    return os.open(path, flags | os.O_NOFOLLOW)


def write_json(path: os.PathLike | str, obj: object) -> None:
    """Write `obj` as indented JSON (values JSON cannot hold as their str) to `path`, whole or not at all."""
    write_text(path, json.dumps(obj, indent=1, default=str) + "\n")


LOCK = ".lock"  # in a temporary folder: its writer holds an flock on it while it writes there


def owner_alive(tmp: Path, pid: int) -> bool:
    """Whether process `pid`, which writes the temporary folder `tmp` (a conversion's output, a stream cache),
    still does: it holds the lock on `tmp`'s LOCK, or it took none yet and runs."""
    try:
        fd = os.open(tmp / LOCK, os.O_RDWR | os.O_NONBLOCK)
    except FileNotFoundError:  # killed before it took the lock, after it let it go, or tmp itself is gone
        return pid_alive(pid)
    except OSError:
        return True  # cannot tell: leave it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # releases the lock if we got it
    return False


def _writer_alive(leftover: Path, pid: int) -> bool:
    """A leftover's writer is alive while it holds the file's lock, or (a file from before the lock, or one caught
    between its creation and its lock) while its process exists."""
    try:
        fd = os.open(leftover, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return True  # gone already: nothing to do
    except OSError:
        return True  # a link, or unreadable: cannot tell, leave it
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return True  # not something a writer made: leave it
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # releases the lock if we got it
    return pid_alive(pid)


def remove_stale(folder: Path, pattern: str, what: str) -> list[str]:
    """Delete the temporary files matching `pattern` (a glob of `.NAME.tmp-PID` names) in `folder` whose writer has
    ended (killed mid-write); never a live writer's. Returns a line per file removed, for the run's log."""
    said = []
    try:
        leftovers = sorted(Path(folder).glob(pattern))
    except OSError:
        return said
    for leftover in leftovers:
        pid = leftover.name.rpartition(".tmp-")[2]
        if not pid.isdigit() or int(pid) == os.getpid() or _writer_alive(leftover, int(pid)):
            continue
        try:
            leftover.unlink()
        except OSError:
            continue
        said.append(f"removed {leftover}: a {what} that process {pid} did not finish writing (it has ended)")
    return said


def stale_pattern(name: str) -> str:
    """The glob of `name`'s temporary files."""
    return f".{glob.escape(name)}.tmp-*"
