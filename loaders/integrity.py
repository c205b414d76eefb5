"""Cheap checks of a prepared directory at loader open, so a damaged file stops the run with its name and the fix.

Without them a truncated `.beton` surfaces as FFCV's `ValueError: negative dimensions are not allowed`, a truncated
DALI shard as `Current pipeline object is no longer valid`, and a damaged HDF5 file as a traceback from inside a
DataLoader worker. What is checked costs no hashing: every name found in the directory stays inside it
(common.paths); every listed file's existence and size against the manifest; the HDF5 datasets' shapes and dtypes;
the FFCV header, field table, per-sample metadata and allocation table (every pointer inside the file); each DALI
index line (extensions, sizes, offsets inside its shard); the `files` index against the listed files. A flipped bit
that leaves all of these intact (a pixel, a tar header) passes: `dataprep verify` re-hashes every file and catches
it, and the loaders then deliver the damaged values without crashing. A dataset in object storage gets the checks
that need the manifest alone (check_manifest), as a local one does: its files are not here to look at, and the
stream loader checks each one's sha256 as it is downloaded.
Measured costs are in docs/RELIABILITY.md."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from stat import S_ISLNK, S_ISREG

import numpy as np

from common.paths import NotRegularError, all_inside, inside
from dataprep.fields import changed_fields

from .errors import LoaderError


class DamagedDataError(LoaderError):
    """A file of a prepared directory does not match its manifest."""


def fix(data_dir: Path) -> str:
    return f"run `dataprep verify {data_dir}` to see what is damaged, or convert the data again"


def check_manifest(data_dir: Path | str, manifest: dict, fmt: str) -> tuple[dict[str, int], int, tuple]:
    """The checks that need the manifest alone, for a local directory and a dataset in object storage alike (whose
    files are checked as they arrive); its listed names were checked as it was loaded (dataprep.manifest). Returns
    format `fmt`'s listed files with their sizes, the sample count and the sample shape."""
    where = manifest_name(data_dir)
    try:
        sizes = {str(f["path"]): int(f["bytes"]) for f in manifest["formats"][fmt]["files"]}
        count, shape = int(manifest["count"]), tuple(int(s) for s in manifest["sample_shape"])
        np.dtype(manifest["dtype"])
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise DamagedDataError(f"{where}: malformed ({type(e).__name__}: {e}); {fix(data_dir)}") from None
    changed = changed_fields(manifest)  # a value edited after conversion changes what is delivered, silently
    if changed:
        raise DamagedDataError(f"{where}: {changed[0]}; {fix(data_dir)}")
    return sizes, count, shape


def manifest_name(data_dir: Path | str) -> str:
    """The manifest as messages name it: DIR/manifest.json, or s3://BUCKET/PREFIX/manifest.json."""
    from dataprep.remote import MANIFEST, S3Url, is_remote

    return f"{S3Url.parse(data_dir)}/{MANIFEST}" if is_remote(data_dir) else str(Path(data_dir) / MANIFEST)


def check_format(data_dir: Path, manifest: dict, fmt: str) -> None:
    """Raise DamagedDataError naming the first file of format `fmt` that does not match the manifest."""
    sizes, count, shape = check_manifest(data_dir, manifest, fmt)
    data_dir = Path(data_dir)
    # before anything is opened: a name leading out of the directory is refused (build_loader reports it as is); the
    # lstat each file gets anyway tells the links apart, which spares a directory listing per folder
    source = data_dir / "manifest.json"
    all_inside(data_dir, sizes, source=source, links=False)
    prefix = os.path.join(data_dir, "")  # joined as strings: a Path per file costs 4 us, 0.2 s for 50,000 files
    for rel, size in sizes.items():
        try:
            st = os.lstat(prefix + rel)
            st = os.stat(inside(data_dir, rel, source=source)) if S_ISLNK(st.st_mode) else st
        except OSError as e:
            raise DamagedDataError(f"{data_dir / rel}: {e.strerror.lower()}; {fix(data_dir)}") from None
        if not S_ISREG(st.st_mode):  # a FIFO would block the backend's open for ever; refused from the stat made anyway
            raise DamagedDataError(f"{NotRegularError(data_dir / rel, st.st_mode, 'file')}; {fix(data_dir)}")
        actual = st.st_size
        if actual != size:
            raise DamagedDataError(
                f"{data_dir / rel}: {actual:,} bytes, the manifest says {size:,} (truncated or changed after "
                f"conversion); {fix(data_dir)}"
            )
    problem = CHECKS[fmt](data_dir, manifest, count, shape, sizes)
    if problem is None and isinstance(manifest.get("text"), dict):
        problem = _text_table(data_dir, manifest)
    if problem:
        raise DamagedDataError(f"{problem}; {fix(data_dir)}")


def _text_table(data_dir: Path, manifest: dict) -> str | None:
    """The cached caption embeddings (dataprep.textcache): inside the directory, regular files, sizes and offsets
    that fit the manifest, so a lookup never reads past a file."""
    from common.paths import require_regular
    from dataprep.textcache import check_table

    names = [f["path"] for f in manifest["text"]["files"]]
    all_inside(data_dir, names, source=data_dir / "manifest.json")
    try:
        for name in names:
            require_regular(data_dir / name)
        return check_table(data_dir, manifest)
    except OSError as e:
        return f"{e.filename or data_dir}: {e.strerror or e}"


def _hdf5(data_dir: Path, manifest: dict, count: int, shape: tuple, sizes: dict) -> str | None:
    from dataprep.formats.hdf5 import check_layout

    return check_layout(data_dir, manifest)


def _ffcv(data_dir: Path, manifest: dict, count: int, shape: tuple, sizes: dict) -> str | None:
    from dataprep.formats.ffcv_tables import check_tables

    # outside the check: a missing extra is build_loader's to name, not damage; through the backend, which keeps
    # torch's thread count as FFCV is imported (by name: `from . import` would take a stale package attribute)
    importlib.import_module("loaders.ffcv_backend")
    return check_tables(data_dir, manifest)


def _dali(data_dir: Path, manifest: dict, count: int, shape: tuple, sizes: dict) -> str | None:
    from dataprep.formats.dali import check_shards

    return check_shards(data_dir, manifest)


def _files(data_dir: Path, manifest: dict, count: int, shape: tuple, sizes: dict) -> str | None:
    from dataprep.formats.files import check_index

    return check_index(data_dir, manifest, sizes)


def _stream(data_dir: Path, manifest: dict, count: int, shape: tuple, sizes: dict) -> str | None:
    from dataprep.formats.stream import check_index

    return check_index(data_dir, count)


CHECKS = {"hdf5": _hdf5, "ffcv": _ffcv, "dali": _dali, "files": _files, "stream": _stream}
