"""Large files' sha256, remembered between runs: a text encoder's weights (5 GB for a T5-XL-sized one, 19 GB for
T5-XXL in fp32) are hashed for the manifest at every conversion and checked at every training start, a read of the
whole file each time (about 5 s for T5-XL on an H200 host).

A file's hash is kept under the file's device, inode, size and modification time (nanoseconds): writing the file
changes the last two, so the hash is taken again. The book is one JSON file, $GPUFEED_HASH_BOOK, else
~/.cache/gpufeed/sha256.json ($XDG_CACHE_HOME respected), written whole (common.atomic); a book that cannot be read
or written is ignored, and the file hashed as if it had none."""

from __future__ import annotations

import json
import os
from pathlib import Path

from common.atomic import write_json
from common.paths import open_regular

from .digest import stream_sha256

REMEMBER_BYTES = 64 << 20  # smaller files are hashed again: cheaper than a page of the book
KEEP = 4096  # entries kept: the newest, when the book grows past them


def book_path() -> Path:
    if path := os.environ.get("GPUFEED_HASH_BOOK"):
        return Path(path)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpufeed" / "sha256.json"


def remembered_sha256(path: Path) -> str:
    """sha256 of the regular file `path`, from the book where this very file (same inode, size and time) was hashed
    before; otherwise hashed and written into it."""
    with open_regular(path) as f:  # a FIFO in its place is refused, not waited on
        st = os.fstat(f.fileno())
        if st.st_size < REMEMBER_BYTES:
            return stream_sha256(f)
        key = f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"
        book = _read()
        if isinstance(known := book.get(key), str):
            return known
        digest = stream_sha256(f)
    if os.stat(path).st_mtime_ns == st.st_mtime_ns:  # not written while it was read
        book = _read()  # another process may have added its own meanwhile
        book[key] = digest
        _write(dict(list(book.items())[-KEEP:]))
    return digest


def _read() -> dict:
    try:
        book = json.loads(book_path().read_text())
    except (OSError, ValueError):
        return {}
    return book if isinstance(book, dict) else {}


def _write(book: dict) -> None:
    try:
        book_path().parent.mkdir(parents=True, exist_ok=True)
        write_json(book_path(), book)
    except OSError:  # a read-only home: hashed again next time
        pass
