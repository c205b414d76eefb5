"""The stream loader's shard cache: one folder per loader under `cache_root()`, its size limit, and the manifest's
shard hashes kept in it for the checking downloader.

A folder is `cache-PID-XXXX`. Whether its loader still runs is asked of a lock, not of the PID alone: the loader
holds an exclusive flock on `.lock` inside it for its life, the kernel drops it however the process dies, and a
second container sharing the cache volume has PIDs of its own that /proc here knows nothing of. The folder is made
hidden (`.cache-...`), locked and filled, then renamed into view, so cleanup never sees one of a live loader
unlocked. Cleanup removes only the folders whose lock it can take (dataprep.leftovers.owner_alive)."""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import shutil
import tempfile
from pathlib import Path

from common.atomic import LOCK, owner_alive
from common.noreplace import rename_new

from .errors import LoaderError

DEFAULT_CACHE = "GPUFEED_STREAM_CACHE"  # where the cache folders go (default: the system's temporary folder)
HASHES = ".gpufeed-sha256.json"  # the manifest's shard hashes, in the cache folder, for the checking downloader
# LitData's units (powers of 1000, as it parses max_cache_size); a bare number is bytes
UNITS = {"": 1, "b": 1} | {u + b: 1000 ** (i + 1) for i, u in enumerate("kmgt") for b in ("", "b")}
SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*", re.IGNORECASE)
FOLDER = re.compile(r"cache-\d+-\w+")  # a cache folder's name: cache-PID-XXXX (tempfile's random part)
LITDATA_MIN = "25GB"  # LitData warns of eviction thrash below this max_cache_size
SIZE_FORMS = (
    f"a positive size such as 20GB or 500MB (B, KB, MB, GB, TB: powers of 1000; LitData warns below {LITDATA_MIN})"
)


def parse_size(value: str | int) -> int:
    """A cache limit ("20GB", "500MB", 300000) as a positive number of bytes; ValueError naming the value if not."""
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    else:
        match = SIZE.fullmatch(str(value))
        unit = UNITS.get(match.group(2).lower()) if match else None
        if unit is None:
            raise ValueError(f"{value!r} is not a cache size: give {SIZE_FORMS}")
        number = float(match.group(1))
        size = int(number * unit) if math.isfinite(number * unit) else 0
    if size <= 0:
        raise ValueError(f"{value!r} is not a cache size: give {SIZE_FORMS}")
    return size


def cache_root() -> Path:
    return Path(os.environ.get(DEFAULT_CACHE) or Path(tempfile.gettempdir()) / "gpufeed-stream")


def remove_stale_caches(root: Path) -> None:
    """Cache folders (`cache-PID-...`) whose loader has ended, killed before close(): those whose lock is free."""
    for folder in root.glob("cache-*-*"):
        pid = folder.name.split("-")[1]
        if pid.isdigit() and folder.is_dir() and not owner_alive(folder, int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


class CacheFolder:
    """A locked cache folder of this process's own, holding the shard hashes; close() removes it."""

    def __init__(self, hashes: dict[str, str]) -> None:
        root = cache_root()
        self._lock: int | None = None
        hidden = None
        try:
            root.mkdir(parents=True, exist_ok=True)
            remove_stale_caches(root)
            hidden = Path(tempfile.mkdtemp(prefix=f".cache-{os.getpid()}-", dir=root))
            self._lock = os.open(hidden / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            (hidden / HASHES).write_text(json.dumps(hashes))
            self.path = root / hidden.name[1:]
            rename_new(hidden, self.path)
        except OSError as e:
            if hidden is not None:
                shutil.rmtree(hidden, ignore_errors=True)
            if self._lock is not None:
                os.close(self._lock)
                self._lock = None
            raise LoaderError(unusable(root, e)) from None

    def close(self) -> None:
        if self._lock is not None:
            shutil.rmtree(self.path, ignore_errors=True)  # while locked: no cleanup races this removal
            os.close(self._lock)
            self._lock = None


def unusable(root: Path, error: OSError) -> str:
    """One line for a cache root that cannot hold cache folders: what is wrong and the fix."""
    fix = f"set {DEFAULT_CACHE} to a writable folder (the stream loader's shard cache goes there)"
    for level in (root, *root.parents):
        if os.path.lexists(level) and not level.is_dir():
            where = f"{root}" if level == root else f"{root} cannot be a folder: {level}"
            return f"{where} is {'a file' if level.is_file() else 'not a folder'}; {fix}"
    return f"{root}: the stream loader cannot write its shard cache there ({error.strerror or error}); {fix}"


def expected_hashes(path: Path) -> dict[str, str] | None:
    """The manifest's hashes kept in the cache folder that holds `path` (None when no cache folder does), or a
    LoaderError naming that folder when they are gone: a shard that cannot be checked is never handed to the reader."""
    folder = next((p for p in path.parents if FOLDER.fullmatch(p.name)), None)
    if folder is None:
        return None
    try:
        hashes = json.loads((folder / HASHES).read_text())
        if not isinstance(hashes, dict):
            raise ValueError("not a JSON object")
        return hashes
    except (OSError, ValueError) as e:
        why = "missing" if isinstance(e, FileNotFoundError) else f"unreadable ({type(e).__name__}: {e})"
        raise LoaderError(
            f"{folder / HASHES}: {why}, so {path.name} cannot be checked against the manifest; something "
            f"changed the stream loader's cache folder while it ran: keep other programs (and cleanups) out of "
            f"{folder.parent} and continue with --resume"
        ) from None
