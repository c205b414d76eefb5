"""`DIR/manifest.json`: what a prepared directory holds (schema in docs/DESIGN.md). Written last, atomically."""

from __future__ import annotations

import json
import os
from pathlib import Path

NAME = "manifest.json"
REQUIRED = ("kind", "sample_shape", "dtype", "count", "classes", "digest", "formats")


class ManifestError(Exception):
    pass


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def load_manifest(data_dir: Path | str) -> dict:
    path = Path(data_dir) / NAME
    if not path.is_file():
        raise ManifestError(f"{path}: missing; is {data_dir} a directory made by `dataprep convert`?")
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ManifestError(f"{path}: not valid JSON ({e})") from None
    missing = [k for k in REQUIRED if k not in manifest]
    if missing:
        raise ManifestError(f"{path}: missing keys {missing}")
    return manifest


def resize_line(manifest: dict) -> str:
    r = manifest["resize"]
    return f"to {r['size']} x {r['size']} at conversion ({r['method']})"


def describe(manifest: dict) -> str:
    """A readable summary for `dataprep info`."""
    src = manifest.get("source", {})
    lines = [
        f"{manifest['count']:,} {manifest['kind']} samples, shape {tuple(manifest['sample_shape'])} "
        f"{manifest['dtype']}, {len(manifest['classes'])} classes",
        f"source:  {src.get('kind')} {src.get('path') or '(embedded)'} split={src.get('split')}",
        f"classes: {', '.join(manifest['classes'])}",
    ]
    if manifest.get("audio"):
        a = manifest["audio"]
        lines.append(f"audio:   {a['sample_rate']} Hz, {a['clip_seconds']} s clips, {a['channels']} channel(s)")
    if manifest.get("resize"):
        lines.append(f"resized: {resize_line(manifest)}")
    for name, fmt in manifest["formats"].items():
        size = sum(f["bytes"] for f in fmt["files"])
        lines.append(f"format:  {name:6s} {len(fmt['files']):6,} file(s) {size / 2**20:9.1f} MiB")
    lines.append(f"digest:  {manifest['digest']['total']}")
    if manifest.get("skipped"):
        lines.append(f"skipped: {len(manifest['skipped'])} bad file(s), e.g. {manifest['skipped'][0]['path']}")
    lines.append(f"made by: gpufeed {manifest.get('gpufeed_version')} at {manifest.get('created')}")
    lines.append(f"command: {manifest.get('command')}")
    return "\n".join(lines)
