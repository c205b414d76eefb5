"""Where a conversion writes: `.<name>.tmp-<pid>` beside the output, renamed into place at the end.

An interrupted or failed conversion never leaves a directory that looks complete. A conversion killed outright
(SIGKILL, a power cut) cannot clean up, so the next conversion into the same output removes the temporary output of
conversions whose process is gone, and says so. Whether a process is gone is asked of a lock, not of its pid
alone: the conversion holds an exclusive `flock` on `.lock` in its temporary directory while it runs, the kernel
drops it when the process dies however it dies, and a pid that a new process has reused still reads as gone."""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

LOCK = ".lock"


class OutputError(Exception):
    """The output cannot be created or replaced."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def _owner_alive(leftover: Path, pid: int) -> bool:
    try:
        fd = os.open(leftover / LOCK, os.O_RDWR)
    except FileNotFoundError:  # made by a conversion killed before it took the lock, or one from an older version
        return _pid_alive(pid)
    except OSError:
        return True  # cannot tell: leave it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # releases the lock if we got it
    return False


def remove_stale(out: Path) -> list[str]:
    """Delete what killed conversions into `out` left behind; never a live conversion's. Returns what was done."""
    said = []
    for leftover in sorted(out.parent.glob(f".{out.name}.*-*")):
        kind, _, pid = leftover.name.rpartition("-")
        if kind not in (f".{out.name}.tmp", f".{out.name}.old") or not pid.isdigit() or int(pid) == os.getpid():
            continue
        if not _owner_alive(leftover, int(pid)):
            shutil.rmtree(leftover, ignore_errors=True)
            said.append(f"removed {leftover}: left by a conversion (process {pid}) that has ended")
    return said


class Workdir:
    """The temporary output of this conversion, locked while it lives."""

    def __init__(self, out: Path, overwrite: bool) -> None:
        self.out = Path(out)
        self.tmp = self.out.parent / f".{self.out.name}.tmp-{os.getpid()}"
        self._lock: int | None = None
        try:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            self.removed = remove_stale(self.out)
        except OSError as e:
            raise OutputError(f"{self.out}: cannot write the output ({e.strerror or e})") from None
        if self.out.exists() and not overwrite and (self.out.is_file() or any(self.out.iterdir())):
            raise OutputError(f"{self.out}: already exists and is not empty; pass --overwrite to replace it")
        try:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp.mkdir()
            self._lock = os.open(self.tmp / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(self._lock, fcntl.LOCK_EX)
        except OSError as e:
            self.discard()
            raise OutputError(f"{self.out}: cannot write the output ({e.strerror or e})") from None

    def publish(self) -> None:
        """Move the finished output into place (replacing an old one); the lock goes, it is not part of the data."""
        (self.tmp / LOCK).unlink()
        old = self.out.parent / f".{self.out.name}.old-{os.getpid()}"
        if self.out.exists():
            os.replace(self.out, old)
        os.replace(self.tmp, self.out)
        shutil.rmtree(old, ignore_errors=True)
        self._unlock()

    def empty(self) -> None:
        """Truncate every file written so far, freeing its space while the writers still hold it open."""
        for here, _, files in os.walk(self.tmp):
            for name in files:
                try:
                    os.truncate(os.path.join(here, name), 0)
                except OSError:
                    pass

    def discard(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)
        self._unlock()

    def _unlock(self) -> None:
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None
