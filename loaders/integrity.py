"""Cheap checks of a prepared directory at loader open, so a damaged file stops the run with its name and the fix.

Without them a truncated `.beton` surfaces as FFCV's `ValueError: negative dimensions are not allowed`, a truncated
DALI shard as `Current pipeline object is no longer valid`, and a damaged HDF5 file as a traceback from inside a
DataLoader worker. What is checked costs no hashing: every name found in the directory stays inside it
(dataprep.paths); every listed file's existence and size against the manifest; the HDF5 datasets' shapes and dtypes;
the FFCV header, field table, per-sample metadata and allocation table (every pointer inside the file); each DALI
index line (extensions, sizes, offsets inside its shard); the `files` index against the listed files. A flipped bit
that leaves all of these intact (a pixel, a tar header) passes: `dataprep verify` re-hashes every file and catches
it, and the loaders then deliver the damaged values without crashing.
Measured costs are in docs/RELIABILITY.md."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from stat import S_ISLNK, S_ISREG

import numpy as np

from dataprep.fields import changed_fields
from dataprep.paths import NotRegularError, all_inside, inside, require_regular

from .errors import LoaderError

RAW = 1  # FFCV's IMAGE_MODES["raw"]: dataprep writes decoded pixels, never JPEG


class DamagedDataError(LoaderError):
    """A file of a prepared directory does not match its manifest."""


def fix(data_dir: Path) -> str:
    return f"run `dataprep verify {data_dir}` to see what is damaged, or convert the data again"


def check_format(data_dir: Path, manifest: dict, fmt: str) -> None:
    """Raise DamagedDataError naming the first file of format `fmt` that does not match the manifest."""
    data_dir = Path(data_dir)
    try:
        listed = manifest["formats"][fmt]["files"]
        sizes = {str(f["path"]): int(f["bytes"]) for f in listed}
        count, shape = int(manifest["count"]), tuple(int(s) for s in manifest["sample_shape"])
        np.dtype(manifest["dtype"])
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise DamagedDataError(
            f"{data_dir / 'manifest.json'}: malformed ({type(e).__name__}: {e}); {fix(data_dir)}"
        ) from None
    changed = changed_fields(manifest)  # a value edited after conversion changes what is delivered, silently
    if changed:
        raise DamagedDataError(f"{data_dir / 'manifest.json'}: {changed[0]}; {fix(data_dir)}")
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
    if problem:
        raise DamagedDataError(f"{problem}; {fix(data_dir)}")


def _hdf5(data_dir: Path, manifest: dict, count: int, shape: tuple, sizes: dict) -> str | None:
    from dataprep.formats.hdf5 import check_layout

    return check_layout(data_dir, manifest)


def _ffcv(data_dir: Path, manifest: dict, count: int, shape: tuple, sizes: dict) -> str | None:
    from dataprep.formats.ffcv import data_file, field_names

    # outside the try: a missing extra is build_loader's to name, not damage; through the backend, which keeps
    # torch's thread count as FFCV is imported (by name: `from . import` would take a stale package attribute)
    importlib.import_module("loaders.ffcv_backend")

    path = data_file(data_dir)
    require_regular(path)
    try:
        problem = _ffcv_tables(path, manifest, count, shape, field_names(manifest["kind"]))
    except Exception as e:  # garbage in the field table makes FFCV's own parsing fail in many ways
        problem = f"unreadable header or tables ({type(e).__name__}: {e})"
    return problem and f"{path}: {problem}"


def _ffcv_tables(path: Path, manifest: dict, count: int, shape: tuple, names: tuple) -> str | None:
    """FFCV's Reader parses header, fields, metadata and allocation table (what its Loader does anyway); every
    pointer a decoder will follow must then land inside the data region, or FFCV reads out of bounds."""
    from ffcv.reader import Reader
    from ffcv.types import ALLOC_TABLE_TYPE, CURRENT_VERSION, HeaderType

    size = path.stat().st_size
    header = np.fromfile(path, dtype=HeaderType, count=1)[0]
    table_at = int(header["alloc_table_ptr"])
    if header["version"] != CURRENT_VERSION or header["num_samples"] != count or header["num_fields"] != len(names):
        return (f"header says version {header['version']}, {header['num_samples']} samples, {header['num_fields']} "
                f"fields; expected version {CURRENT_VERSION}, {count} samples, {len(names)} fields")  # fmt: skip
    if not (HeaderType.itemsize < table_at <= size - ALLOC_TABLE_TYPE.itemsize):
        return f"allocation table offset {table_at} outside the file ({size} bytes)"
    if (size - table_at) % ALLOC_TABLE_TYPE.itemsize:
        return "allocation table does not end at the end of the file"
    r = Reader(str(path))
    if tuple(r.field_names) != names:
        return f"fields {r.field_names}, expected {list(names)}"
    table = r.alloc_table
    if (table["sample_id"] >= count).any() or (table["ptr"] + table["size"] > table_at).any():
        return "allocation table points outside the data region"
    meta, starts = r.metadata, np.sort(table["ptr"])
    data = meta[meta.dtype.names[0]]
    if manifest["kind"] == "image":
        h, w = shape[:2]
        if (data["mode"] != RAW).any() or (data["height"] != h).any() or (data["width"] != w).any():
            return f"image metadata differs from the manifest's {h}x{w} raw pixels"
        ptrs, nbytes = data["data_ptr"], h * w * 3
    else:
        ptrs, nbytes = data, int(np.prod(shape)) * np.dtype(manifest["dtype"]).itemsize
    if (ptrs + nbytes > table_at).any() or not np.isin(ptrs, starts).all():
        return "sample pointers outside the allocated data"
    labels = meta[meta.dtype.names[1]]
    if ((labels < 0) | (labels >= len(manifest["classes"]))).any():
        return f"labels outside 0..{len(manifest['classes']) - 1}"
    return None


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
