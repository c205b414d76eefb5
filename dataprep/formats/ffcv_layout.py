"""What a `.beton` holds, as the FFCV writer (ffcv.py), its reader, the open check (ffcv_tables.py) and the loader
backend agree on: the file `data.beton` with fields `image` (RGBImageField, write_mode="raw": the decoded uint8
pixels, no JPEG) or `audio` (NDArrayField float32, sample_shape) or `latent` (NDArrayField int16, sample_shape: the
float16 values' bit patterns, since FFCV's numba-compiled loader has no float16 type; `stored_dtype`), `label`
(IntField), for audio `length` (IntField) and, for captioned samples, `text` (BytesField: the caption's UTF-8 bytes;
then one NUL byte: FFCV misreads the sample after an empty field. Its BytesDecoder pads them to the longest in the file,
so a reader takes each caption's length from the field's metadata, `caption_sizes`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from common.paths import inside

from .base import DatasetMeta

FILENAME = "data.beton"


def stored_dtype(dtype: str) -> np.dtype:
    """What the .beton holds for samples of `dtype`: float16 as its int16 bit patterns (read back with .view)."""
    return np.dtype("int16") if dtype == "float16" else np.dtype(dtype)


def field_names(kind: str, captions: bool = False) -> tuple[str, ...]:
    names = {"image": ("image", "label"), "latent": ("latent", "label")}.get(kind, ("audio", "label", "length"))
    return (*names, TEXT) if captions else names


TEXT = "text"  # the captions' field


def fields(meta: DatasetMeta) -> dict:
    """FFCV's field objects for the writer, by name (imports FFCV: call it in the writer's process)."""
    from ffcv.fields import BytesField, IntField, NDArrayField, RGBImageField

    text = {TEXT: BytesField()} if meta.captions else {}
    if meta.kind == "image":
        return {"image": RGBImageField(write_mode="raw"), "label": IntField(), **text}
    data = NDArrayField(dtype=stored_dtype(meta.dtype), shape=tuple(meta.sample_shape))
    if meta.kind == "latent":
        return {"latent": data, "label": IntField(), **text}
    return {"audio": data, "label": IntField(), "length": IntField(), **text}


def caption_sizes(path: Path) -> np.ndarray:
    """Each sample's caption length in bytes, in sample order, from the `text` field's metadata."""
    from ffcv.reader import Reader

    reader = Reader(str(path))
    meta = reader.metadata
    return np.asarray(meta[meta.dtype.names[reader.field_names.index(TEXT)]]["size"], np.int64)


def stored_caption(text: str) -> bytes:
    """What the `text` field holds for a caption: its UTF-8 bytes and a NUL, so that no field is empty."""
    return text.encode("utf-8", "surrogateescape") + b"\0"


def captions_from(padded: np.ndarray, sizes: np.ndarray) -> list[str]:
    """BytesDecoder's padded rows cut to their sizes less the NUL, as str."""
    return [bytes(row[: n - 1]).decode("utf-8", "surrogateescape") for row, n in zip(np.asarray(padded), sizes)]


def data_file(data_dir: Path) -> Path:
    """DIR/data.beton, once it is known not to lead out of DIR (a symbolic link): what every reader opens."""
    return inside(data_dir, FILENAME, source=data_dir)
