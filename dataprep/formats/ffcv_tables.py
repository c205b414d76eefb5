"""The open check of a `.beton` (its layout: ffcv_layout.py): FFCV's header, field table, per-sample metadata and
allocation table against the manifest, so that every pointer a decoder will follow lands inside the file. Without it
a truncated or doctored file surfaces as FFCV's `ValueError: negative dimensions are not allowed`, or as reads out of
bounds."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from common.paths import require_regular

from .base import has_captions
from .ffcv_layout import TEXT, data_file, field_names

RAW = 1  # FFCV's IMAGE_MODES["raw"]: dataprep writes decoded pixels, never JPEG


def check_tables(data_dir: Path, manifest: dict) -> str | None:
    """What is wrong with DIR/data.beton against the manifest (its path first), or None."""
    path = data_file(data_dir)
    require_regular(path)
    count, shape = int(manifest["count"]), tuple(int(s) for s in manifest["sample_shape"])
    try:
        problem = _tables(path, manifest, count, shape, field_names(manifest["kind"], has_captions(manifest)))
    except Exception as e:  # garbage in the field table makes FFCV's own parsing fail in many ways
        problem = f"unreadable header or tables ({type(e).__name__}: {e})"
    return problem and f"{path}: {problem}"


def _tables(path: Path, manifest: dict, count: int, shape: tuple, names: tuple) -> str | None:
    """FFCV's Reader parses header, fields, metadata and allocation table (what its Loader does anyway); every
    pointer a decoder will follow must then land inside the data region, or FFCV reads out of bounds."""
    from ffcv.reader import Reader
    from ffcv.types import ALLOC_TABLE_TYPE, CURRENT_VERSION, HeaderType

    size = path.stat().st_size
    header = np.fromfile(path, dtype=HeaderType, count=1)[0]
    table_at = int(header["alloc_table_ptr"])
    if header["version"] != CURRENT_VERSION or header["num_samples"] != count or header["num_fields"] != len(names):
        return (
            f"header says version {header['version']}, {header['num_samples']} samples, {header['num_fields']} "
            f"fields; expected version {CURRENT_VERSION}, {count} samples, {len(names)} fields"
        )
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
    if TEXT in names:
        text = meta[meta.dtype.names[names.index(TEXT)]]
        if (text["ptr"] + text["size"] > table_at).any() or not np.isin(text["ptr"], starts).all():
            return "caption pointers outside the allocated data"
    labels = meta[meta.dtype.names[1]]
    if ((labels < 0) | (labels >= len(manifest["classes"]))).any():
        return f"labels outside 0..{len(manifest['classes']) - 1}"
    return None
