"""What a `.beton` holds, as the FFCV writer (ffcv.py), its reader, the open check (ffcv_tables.py) and the loader
backend agree on: the file `data.beton` with fields `image` (RGBImageField, write_mode="raw": the decoded uint8
pixels, no JPEG) or `audio` (NDArrayField float32, sample_shape) or `latent` (NDArrayField int16, sample_shape: the
float16 values' bit patterns, since FFCV's numba-compiled loader has no float16 type; `stored_dtype`), `label`
(IntField) and, for audio, `length` (IntField)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..paths import inside
from .base import DatasetMeta

FILENAME = "data.beton"


def stored_dtype(dtype: str) -> np.dtype:
    """What the .beton holds for samples of `dtype`: float16 as its int16 bit patterns (read back with .view)."""
    return np.dtype("int16") if dtype == "float16" else np.dtype(dtype)


def field_names(kind: str) -> tuple[str, ...]:
    return {"image": ("image", "label"), "latent": ("latent", "label")}.get(kind, ("audio", "label", "length"))


def fields(meta: DatasetMeta) -> dict:
    """FFCV's field objects for the writer, by name (imports FFCV: call it in the writer's process)."""
    from ffcv.fields import IntField, NDArrayField, RGBImageField

    if meta.kind == "image":
        return {"image": RGBImageField(write_mode="raw"), "label": IntField()}
    data = NDArrayField(dtype=stored_dtype(meta.dtype), shape=tuple(meta.sample_shape))
    if meta.kind == "latent":
        return {"latent": data, "label": IntField()}
    return {"audio": data, "label": IntField(), "length": IntField()}


def data_file(data_dir: Path) -> Path:
    """DIR/data.beton, once it is known not to lead out of DIR (a symbolic link): what every reader opens."""
    return inside(data_dir, FILENAME, source=data_dir)
