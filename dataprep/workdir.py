"""Where a conversion writes: `.<name>.tmp-<pid>` beside the output, renamed into place at the end.

An interrupted or failed conversion never leaves a directory that looks complete. The conversion holds an exclusive
`flock` on `.lock` in its temporary directory while it runs, so that the next conversion into the same output can
tell a dead one's leftovers from a live one's and complete, roll back or remove them (dataprep.leftovers). The
output is resolved first (symbolic links followed) and checked against the input, and an existing one is replaced
only where dataprep wrote it (dataprep.overwrite): checked at the start, and again at the publish, whose rename
never replaces anything that appeared in between (common.noreplace)."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from common.atomic import LOCK
from common.noreplace import rename_new
from common.text import printable

from .leftovers import recover
from .overwrite import OutputError, check_apart, check_replaceable, real, still_replaceable

__all__ = ["LOCK", "OutputError", "Workdir"]


class Workdir:
    """The temporary output of this conversion, locked while it lives."""

    def __init__(self, out: Path, overwrite: bool, inputs: Iterable[str] = ()) -> None:
        """`inputs`: the paths the conversion reads (resolved), which the output and its siblings must stay apart
        from."""
        self.out = Path(real(out))
        self.tmp = self.out.parent / f".{self.out.name}.tmp-{os.getpid()}"
        self._lock: int | None = None
        self.overwrite = overwrite
        inputs = list(inputs)
        check_apart(str(self.out), inputs)
        try:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            self.removed = recover(self.out, inputs)
            check_replaceable(str(self.out), overwrite)
        except OSError as e:
            raise OutputError(f"{printable(self.out)}: cannot write the output ({e.strerror or e})") from None
        try:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp.mkdir()
            self._lock = os.open(self.tmp / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(self._lock, fcntl.LOCK_EX)
        except OSError as e:
            self.discard()
            raise OutputError(f"{printable(self.out)}: cannot write the output ({e.strerror or e})") from None

    def publish(self) -> None:
        """Move the finished output into place. What stands there is replaced only where the check made at the start
        still holds (missing, an empty folder, or with --overwrite a folder that dataprep wrote); anything else that
        appeared while the conversion ran stays as it is, and the finished output is kept beside it (OutputError names
        both). The lock goes, it is not part of the data. It is held over the first rename, so that a conversion
        killed between the two still reads as ended only once it has (dataprep.leftovers completes its publish)."""
        old = self.out.parent / f".{self.out.name}.old-{os.getpid()}"
        with _signals_held():  # Ctrl-C or SIGTERM between the renames acts after them
            why = still_replaceable(str(self.out), self.overwrite)
            if why is not None:
                self._keep(why)
            moved = os.path.lexists(self.out) and any(os.scandir(self.out))
            if moved:
                os.replace(self.out, old)
            try:
                (self.tmp / LOCK).unlink()
                rename_new(self.tmp, self.out)
            except FileExistsError:
                self._keep("it appeared while this conversion ran, as the output was being replaced")
            except BaseException:
                if moved and not os.path.lexists(self.out):
                    os.replace(old, self.out)  # the previous output back, as it was
                raise
        shutil.rmtree(old, ignore_errors=True)
        self._unlock()

    def _keep(self, why: str) -> None:
        """Raise OutputError saying why the output was not published, with the finished output kept under a name of
        its own beside it (one the next conversion leaves alone), or discarded where that cannot be."""
        kept = self.out.parent / f"{self.out.name}.unpublished-{os.getpid()}"
        try:
            (self.tmp / LOCK).unlink(missing_ok=True)
            rename_new(self.tmp, kept)
            where = f"the finished conversion is in {printable(kept)}: move it where you want it, or remove it"
        except OSError as e:
            where = f"the finished conversion is discarded (it could not be kept beside it: {e.strerror or e})"
        raise OutputError(f"{printable(self.out)}: not replaced: {why}; {where}")

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


@contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM held back until the block ends, then acted on as usual, so a stop request cannot land
    between two renames that belong together. (Masking them would not do: another thread would take the signal and
    Python would still run the handler here, in the main thread.)"""
    if threading.current_thread() is not threading.main_thread():  # handlers run in the main thread only
        yield
        return
    came: list[int] = []
    held = {sig: signal.signal(sig, lambda sig, _: came.append(sig)) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in held.items():
            signal.signal(sig, handler)
        for sig in came[:1]:
            signal.raise_signal(sig)
