"""What `dataprep convert` says about its output: the DatasetMeta its writers are given, and the manifest (schema in
docs/DESIGN.md) that describes the converted samples, where they came from and every file written."""

from __future__ import annotations

import sys
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from . import __version__
from .convert_config import ConvertConfig
from .digest import SampleDigest
from .formats.base import DatasetMeta
from .sources import AudioSpec, Chunk
from .sources.images import RESIZE_METHOD


def dataset_meta(source, chunk: Chunk, spec: AudioSpec, encoder=None) -> DatasetMeta:
    """The writers' view of the dataset, from the source and its first (encoded, with --vae) chunk."""
    kind = "latent" if encoder is not None else source.kind
    rate = spec.sample_rate if kind == "audio" else None
    shape, captions = tuple(chunk.x.shape[1:]), chunk.text is not None
    return DatasetMeta(kind, shape, str(chunk.x.dtype), list(source.classes), rate, captions)


def recorded_command(cfg: ConvertConfig) -> str:
    """The command line the manifest records: --command's, or this process's own."""
    return cfg.command or " ".join([Path(sys.argv[0]).name] + sys.argv[1:])


def build_manifest(
    cfg: ConvertConfig,
    source,
    meta: DatasetMeta,
    spec: AudioSpec,
    digest: SampleDigest,
    formats: dict,
    skipped: list,
    encoder=None,
) -> dict:
    """The manifest but its "timings" and "digest.fields", which come last (of the values as written)."""
    manifest = {
        "gpufeed_version": __version__,
        "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": recorded_command(cfg),
        "source": {"kind": source.name, "path": source.path, "split": cfg.split},
        "kind": meta.kind,
        "sample_shape": list(meta.sample_shape),
        "dtype": meta.dtype,
        "count": digest.count,
        "classes": meta.classes,
        "class_counts": [int(n) for n in digest.per_class] + [0] * (len(meta.classes) - len(digest.per_class)),
        "audio": asdict(spec) | {"num_samples": spec.num_samples} if meta.kind == "audio" else None,
        "resize": None if cfg.size is None else {"size": cfg.size, "method": RESIZE_METHOD},
        "digest": digest.result(),
        "schema": _schema(meta),
        "formats": formats,
        "skipped": skipped,
    }
    if meta.captions:
        manifest["captions"] = caption_stats(digest, cfg.caption_templates)
    if encoder is not None:
        manifest |= {"audio": None, "latent": encoder.describe()}
    return manifest


def _schema(meta: DatasetMeta) -> dict:
    """What one sample holds; `txt` (a caption) only where the source had captions or templates made them."""
    schema = {"x": f"{meta.dtype} {list(meta.sample_shape)}", "y": "int64 index into classes"}
    if meta.kind == "audio":
        schema["length"] = "int64 valid samples before the zero padding"
    if meta.captions:
        schema["txt"] = "utf-8 caption"
    return schema


def caption_stats(digest: SampleDigest, templates: tuple[str, ...]) -> dict:
    """The captions' templates (None: read from the input) and the distribution of their lengths, for `info`."""

    def spread(values: list[int]) -> dict:
        v = np.asarray(values or [0])
        q = np.percentile(v, [50, 95]).round(1).tolist()
        return {
            "min": int(v.min()),
            "median": q[0],
            "p95": q[1],
            "max": int(v.max()),
            "mean": round(float(v.mean()), 2),
        }

    text = digest.text
    return {
        "templates": list(templates) or None,
        "empty": sum(1 for n in text.chars if n == 0),
        "chars": spread(text.chars),
        "words": spread(text.words),
    }
