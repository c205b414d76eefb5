"""Paths found in a data directory stay inside it: the one check every reader of such a directory goes through.

A prepared directory travels (copied from a colleague, a shared drive, a download), so the names inside it are
untrusted input: the manifest's file lists, `files/index.csv`'s rows, the names a format opens, a results
directory's records, a run directory's checkpoint. Before anything is opened by such a name it must be relative,
without `..` components, and resolve (symbolic links followed) to a place inside the directory; otherwise
OutsideError, naming the entry, where it was found and the rule. What is checked where: docs/RELIABILITY.md."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

SCHEME = "s3://"  # a data location with it is an object-store prefix (dataprep.remote), any other a local path
DATA_FIX = "get a clean copy of the directory or convert the data again"
# a results directory (bench): its JSONs, and the plot names made of their fields
RESULTS = {"what": "results directory", "fix": "remove that entry, or the record that names it"}


class OutsideError(ValueError):
    """A path found in a directory leads outside it. A ValueError, as the CLIs report those as one-line errors."""


def inside(
    root: Path | str, entry: str, *, source: Path | str, what: str = "data directory", fix: str = DATA_FIX
) -> Path:
    """`root / entry`, once it is known to stay inside `root`; `source` is where the name was found."""
    scope = _Scope(root, source, what, fix)
    scope.lexical(entry)
    path = Path(root) / entry
    scope.resolved(entry, path)
    return path


def all_inside(
    root: Path | str,
    entries: Iterable[str],
    *,
    source: Path | str,
    under: str = "",
    what: str = "data directory",
    fix: str = DATA_FIX,
    links: bool = True,
) -> None:
    """Check the names of one listing at once (`root / under / entry`, e.g. the 50,000 rows of an index): a string
    test per entry, then per distinct folder one `realpath` and one directory listing, which names the symbolic
    links among the entries without a stat per file; only those are resolved. `links=False` skips the listings, for
    a caller that stats every entry anyway: its `lstat` tells the links apart, and it passes those to `inside`."""
    scope = _Scope(root, source, what, fix)
    base = os.path.join(root, under) if under else os.fspath(root)
    entries = entries if isinstance(entries, (list, tuple)) else list(entries)
    folders = set()
    for entry in entries:
        if _suspect(entry):
            scope.lexical(entry)  # the rare suspect gets the full test ("a..b" is a fine name)
        folders.add(entry.rpartition("/")[0])
    for folder in folders:
        path = os.path.join(base, folder) if folder else base
        scope.resolved(folder or under or ".", path)
        found = _links(path) if links else None
        if found:  # rare: find the entries that are links; one to a place inside the directory is allowed
            for entry in entries:
                head, _, name = entry.rpartition("/")
                if head == folder and name in found:
                    scope.resolved(entry, os.path.join(path, name))


def names_inside(
    root: Path | str, entries: Iterable[str], *, source: Path | str, what: str = "data directory", fix: str = DATA_FIX
) -> None:
    """The test of `all_inside` that needs no file: every entry relative, without `..`. For a listing whose files
    are elsewhere (a manifest downloaded from object storage) or not yet looked at (a manifest as it is loaded)."""
    scope = _Scope(root, source, what, fix)
    for entry in entries:
        if _suspect(entry):
            scope.lexical(entry)


def _suspect(entry) -> bool:
    """A string test that every bad name fails: only these get the full test."""
    return not isinstance(entry, str) or not entry or entry[0] == "/" or ".." in entry or "\0" in entry


def _links(folder: str) -> set[str]:
    """Names of the symbolic links in `folder` (the listing says so, no stat per file); none if it cannot be listed."""
    try:
        with os.scandir(folder) as it:
            return {e.name for e in it if e.is_symlink()}
    except OSError:  # missing or not a folder: its files are then reported missing by the readers
        return set()


@dataclass
class _Scope:
    root: Path | str
    source: Path | str
    what: str
    fix: str
    real: str = field(init=False)

    def __post_init__(self) -> None:
        self.real = os.path.realpath(self.root)

    def lexical(self, entry) -> None:
        if not isinstance(entry, str) or not entry or "\0" in entry:
            self.refuse(entry, "is not a file name")
        if os.path.isabs(entry):
            self.refuse(entry, "is an absolute path")
        if ".." in Path(entry).parts:
            self.refuse(entry, "has a '..' component")

    def resolved(self, entry: str, path: Path | str) -> None:
        real = os.path.realpath(path)
        if real != self.real and not real.startswith(self.real.rstrip(os.sep) + os.sep):
            self.refuse(entry, f"resolves to {real} through a symbolic link, outside {self.real}")

    def refuse(self, entry, reason: str) -> NoReturn:
        raise OutsideError(
            f"{self.source}: entry {entry!r} {reason}; refused, as paths in a {self.what} must stay inside it "
            f"({self.root}): {self.fix}"
        )


class NotRegularError(ValueError):
    """A name that should be a regular file is a FIFO, a device, a socket or a directory. Opening a FIFO blocks until
    a writer comes (for ever), and reading a device may never end: neither is data. `problem` is the message without
    the path (for errors that name the file their own way)."""

    def __init__(self, path: Path | str, mode: int, what: str) -> None:
        self.path, self.problem = path, f"is {file_kind(mode)}, not a regular {what}"
        super().__init__(f"{path}: {self.problem}; replace it with the real file")


def require_regular(path: Path | str, what: str = "file") -> None:
    """Raise NotRegularError unless `path` (symbolic links followed) is a regular file; FileNotFoundError (an
    OSError) where it is missing. `stat` never blocks, where `open` on a FIFO would."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise NotRegularError(path, mode, what)


def open_regular(path: Path | str, mode: str = "rb", what: str = "file"):
    """`open(path, mode)` for reading, refusing anything but a regular file without blocking on it: the file is opened
    non-blocking (a FIFO opens at once that way) and checked on its descriptor, so nothing can swap it in between."""
    if mode not in ("r", "rb"):
        raise ValueError(f"open_regular reads; mode {mode!r}")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        st_mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(st_mode):
            raise NotRegularError(path, st_mode, what)
        os.set_blocking(fd, True)
        return open(fd, mode, closefd=True)
    except BaseException:
        os.close(fd)
        raise


# a file's type, where not a regular file, in words (a link's only where its mode was read without following it)
FILE_KINDS = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFDIR: "a directory",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def file_kind(mode: int, words: Mapping[int, str] = FILE_KINDS) -> str:
    """What a file of `mode` is, in `words` ("not a regular file" for a type they do not name)."""
    return words.get(stat.S_IFMT(mode), "not a regular file")
