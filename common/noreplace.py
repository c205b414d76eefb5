"""A rename that never replaces what stands at its target: how a conversion puts its output in place.

Linux's renameat2 with RENAME_NOREPLACE makes the check and the rename one step, so a folder created at the target
after the check (a user's, or another conversion's output) fails the rename instead of being replaced. Where the
kernel or the filesystem refuses the flag (EINVAL, ENOSYS, no renameat2 in the C library), the target is checked and
the rename made under an exclusive lock on the parent folder, which every publish on that filesystem then takes:
conversions never pass each other, and anything else has a window of microseconds. An empty folder at the target may
be replaced: nothing is lost, and `--output` may name one made beforehand."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

AT_FDCWD = -100
RENAME_NOREPLACE = 1
_UNSUPPORTED = (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP)


def rename_new(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Rename `src` to `dst`, which must be missing or an empty folder; FileExistsError (naming `dst`) otherwise, and
    `src` stays where it is."""
    src, dst = os.fspath(src), os.fspath(dst)
    if _empty_dir(dst):
        try:
            os.rename(src, dst)  # onto an empty folder only: the kernel refuses one that is no longer empty
        except OSError as e:
            if e.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                raise FileExistsError(errno.EEXIST, "something else is there now", dst) from None
            raise
        return
    sys.audit("os.rename", src, dst, -1, -1)  # the event os.rename raises: audit hooks see this rename as any other
    if not _renameat2(src, dst):
        rename_locked(src, dst)


def rename_locked(src: str, dst: str) -> None:
    """The fallback: check and rename under an exclusive lock on the parent folder of `dst`."""
    with _parent_locked(dst):
        if os.path.lexists(dst) and not _empty_dir(dst):
            raise FileExistsError(errno.EEXIST, "something else is there now", dst)
        os.rename(src, dst)


def _renameat2(src: str, dst: str) -> bool:
    """Rename with RENAME_NOREPLACE; False where the kernel, the filesystem or the C library cannot."""
    try:
        call = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    call.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if call(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), RENAME_NOREPLACE) == 0:
        return True
    err = ctypes.get_errno()
    if err in _UNSUPPORTED:
        return False
    if err == errno.EEXIST:
        raise FileExistsError(err, "something else is there now", dst)
    raise OSError(err, os.strerror(err), src, None, dst)


@contextmanager
def _parent_locked(path: str) -> Iterator[None]:
    fd = os.open(os.path.dirname(os.path.abspath(path)) or os.sep, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _empty_dir(path: str) -> bool:
    """A real folder (not a link to one) holding nothing."""
    try:
        if os.path.islink(path) or not os.path.isdir(path):
            return False
        with os.scandir(path) as entries:
            return next(entries, None) is None
    except OSError:
        return False
