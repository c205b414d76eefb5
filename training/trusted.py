"""The compile cache is read as an SSH key is: only files of this user, in folders no one else can write.

What the cache holds runs when it is loaded: torch's compiled artifacts are pickles, Python's bytecode is code. A file
another user could have written or replaced is code anyone could run as this user, so a file is read only where it
is a regular file owned by this user and writable by no one else, and every folder from the cache's root down to it
is a real folder (no symbolic link below the root) owned by this user and writable by no one else; otherwise
`Untrusted`, saying what and why, and the caller compiles anew. Files are opened without following links and without
blocking (a FIFO at a cache file's name opens at once and is refused), and checked on the descriptor they are read
from, so nothing can be swapped in between. The root itself may be a link (the user named it); it is checked where it
leads. Torch-free: the bytecode check runs before torch is imported.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from common.paths import FILE_KINDS, file_kind


class Untrusted(Exception):
    """A cache file or folder that another user could have written: skipped, never read."""


def _check(st: os.stat_result, path: Path | str, kind: str) -> None:
    if kind == "folder" and not stat.S_ISDIR(st.st_mode):
        raise Untrusted(f"{path} is not a folder")
    if kind == "file" and not stat.S_ISREG(st.st_mode):
        raise Untrusted(f"{path} is {file_kind(st.st_mode, _KINDS)}, not a regular file")
    if st.st_uid != os.geteuid():
        raise Untrusted(f"{path} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()})")
    if st.st_mode & 0o022:
        who = " and ".join(w for bit, w in ((0o020, "its group"), (0o002, "everyone")) if st.st_mode & bit)
        raise Untrusted(f"{path} can be written by {who} (mode {stat.S_IMODE(st.st_mode):04o}): chmod go-w {path}")


# the cache's words for a file's type: folders, as everywhere in its messages
_KINDS = FILE_KINDS | {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFDIR: "a folder",
    stat.S_IFCHR: "a device",
    stat.S_IFBLK: "a device",
}


def _open(name: str | Path, dir_fd: int | None, flags: int, path: Path) -> int:
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as e:
        if e.errno not in (errno.ELOOP, errno.ENOTDIR):  # what O_NOFOLLOW and O_DIRECTORY refuse
            raise
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
        kind = file_kind(mode, _KINDS)
        raise Untrusted(f"{path} is {kind}" + ("" if stat.S_ISLNK(mode) else ", not a folder")) from None


def _folders(root: Path, relative: str) -> int:
    """A descriptor of root/relative's folder, each level checked; the caller closes it."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the root: followed, checked where it leads
    try:
        _check(os.fstat(fd), root, "folder")
        path = root
        for part in Path(relative).parts:
            path = path / part
            child = _open(part, fd, os.O_RDONLY | os.O_DIRECTORY, path)
            os.close(fd)
            fd = child
            _check(os.fstat(fd), path, "folder")
        return fd
    except BaseException:
        os.close(fd)
        raise


def check_folder(root: Path, relative: str = "") -> None:
    """Untrusted unless root/relative and every folder between are this user's alone; FileNotFoundError if missing."""
    os.close(_folders(Path(root), relative))


def open_trusted(root: Path, relative: str) -> BinaryIO:
    """root/relative opened for reading, once it and its folders pass; FileNotFoundError where it is missing."""
    root, rel = Path(root), Path(relative)
    folder = _folders(root, str(rel.parent) if rel.parent != Path(".") else "")
    try:
        fd = _open(rel.name, folder, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY, root / rel)
    finally:
        os.close(folder)
    try:
        _check(os.fstat(fd), root / rel, "file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_tree(root: Path, relative: str) -> int:
    """Check root/relative and everything beneath it (folders and files alike; nothing else may be there); returns
    the number of files. FileNotFoundError where root/relative is missing."""
    check_folder(root, relative)
    files, stack = 0, [Path(root) / relative]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    _check(st, entry.path, "folder")
                    stack.append(Path(entry.path))
                else:
                    _check(st, entry.path, "file")
                    files += 1
    return files


def make_private_dirs(path: Path) -> None:
    """mkdir -p, each folder it creates readable and writable by this user alone (0700); existing ones kept as
    they are (the check says where one is not safe)."""
    missing = []
    path = Path(path)
    while not path.exists():
        missing.append(path)
        if path.parent == path:
            break
        path = path.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            if not folder.is_dir():
                raise
