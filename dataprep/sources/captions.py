"""Captions read where people keep them beside samples on disk, and captions made from class names by templates.

A folder of images or clips is captioned in one of two ways, read while the folder is listed (captions are tiny):
- a caption file per sample: `cat.jpg` + `cat.txt` in the same folder (UTF-8; surrounding white space dropped). Once
  one sample has one, every sample must: a sample without one is an error naming it, never an empty caption;
- Hugging Face's imagefolder metadata: `metadata.jsonl` (one object a line) or `metadata.csv`, each row a
  `file_name` (relative to the metadata file's folder) and its `text`. Every sample below the metadata file's folder
  needs a row, and every row a sample.
Without either, samples have no caption, and `--caption-template "a photo of a {label}"` (repeatable) makes one per
sample from its class name: one template drawn per sample, from a generator seeded with TEMPLATE_SEED, in output
order, so the same input always gets the same captions.
"""

from __future__ import annotations

import csv
import io
import json
import string
from pathlib import Path

import numpy as np

from common.paths import NotRegularError, open_regular

from .base import InputError

CAPTION_EXT = ".txt"
METADATA = ("metadata.jsonl", "metadata.csv")  # Hugging Face imagefolder's names
TEMPLATE_SEED = 0  # fixed: the same input and templates always give the same captions


def _read_text(path: Path, what: str) -> str:
    """The file's UTF-8 text, or an InputError naming it and saying what to do."""
    try:
        with open_regular(path) as f:
            return f.read().decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: {what} is not UTF-8 text ({e.reason} at byte {e.start}); save it as UTF-8") from None
    except NotRegularError as e:
        raise InputError(f"{path}: {e.problem}") from None
    except OSError as e:
        raise InputError(f"{path}: {what} unreadable ({e.strerror or e})") from None


def sidecars(samples: list[Path], files: list[Path]) -> dict[Path, Path]:
    """sample -> its caption file (`X.ext` -> `X.txt` in the same folder), for the samples that have one."""
    listed = set(files)
    return {p: c for p in samples if (c := p.with_suffix(CAPTION_EXT)) in listed and c != p}


def metadata_files(files: list[Path]) -> list[Path]:
    return [p for p in files if p.name in METADATA]


def _metadata_rows(path: Path) -> list[tuple[str, object]]:
    """(file_name, text) per row of a metadata.jsonl or metadata.csv, or an InputError naming the file and row."""
    text = _read_text(path, "metadata")
    if path.suffix == ".csv":
        rows = list(csv.DictReader(io.StringIO(text, newline="")))
        where = [f"row {i + 2}" for i in range(len(rows))]
    else:
        rows, where = [], []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as e:
                    raise InputError(f"{path}: line {number} is not JSON ({e})") from None
                where.append(f"line {number}")
    out = []
    for row, at in zip(rows, where):
        if not isinstance(row, dict) or not isinstance(row.get("file_name"), str) or "text" not in row:
            raise InputError(f'{path}: {at} needs "file_name" and "text" (Hugging Face imagefolder metadata)')
        out.append((row["file_name"], row["text"]))
    return out


def from_metadata(meta_files: list[Path], samples: list[Path]) -> dict[Path, str]:
    """sample -> caption from the metadata files; a row naming a file that is not a sample is an error."""
    known, captions = set(samples), {}
    for meta in meta_files:
        for name, text in _metadata_rows(meta):
            path = meta.parent / name
            if path not in known:
                raise InputError(f"{meta}: names {name!r}, which is not a sample in {meta.parent}; fix or drop the row")
            if not isinstance(text, str):
                raise InputError(f"{meta}: the text of {name!r} is {json.dumps(text)[:40]}, not a string")
            captions[path] = text.strip()
    return captions


def read_captions(samples: list[Path], files: list[Path]) -> dict[Path, str] | None:
    """Each sample's caption (see the module docstring), or None when the folder holds none."""
    meta, side = metadata_files(files), sidecars(samples, files)
    if meta and side:
        example = next(iter(side.values()))
        raise InputError(f"{meta[0]}: captions in metadata and in caption files such as {example}; keep one of the two")
    if meta:
        captions = from_metadata(meta, samples)
        where = f"a row in {meta[0]}"
    elif side:
        captions = {p: _read_text(c, "caption file").strip() for p, c in side.items()}
        where = "a caption file"
    else:
        return None
    missing = [p for p in samples if p not in captions]
    if missing:
        raise InputError(
            f"{missing[0]}: no caption ({len(missing)} of {len(samples)} samples have none, the others have "
            f"{where}); give every sample one, or remove them all"
        )
    return captions


def caption_files(files: list[Path], samples: list[Path]) -> set[Path]:
    """The listed files that are captions (sidecars and metadata), not samples: left out of the samples."""
    return set(sidecars(samples, files).values()) | set(metadata_files(files))


class Templates:
    """Captions from class names: `{label}` in each template is the sample's class; one template drawn per sample."""

    def __init__(self, templates: tuple[str, ...] | list[str]) -> None:
        for t in templates:
            fields = [f for _, f, _, _ in string.Formatter().parse(t) if f is not None]
            if fields != ["label"]:
                raise ValueError(f"--caption-template {t!r}: must hold {{label}} once and no other {{...}} field")
        self.templates = list(templates)
        self.rng = np.random.default_rng(TEMPLATE_SEED)

    def captions(self, labels: np.ndarray, classes: list[str]) -> list[str]:
        """The next len(labels) samples' captions, in output order."""
        picks = self.rng.integers(len(self.templates), size=len(labels))
        return [self.templates[t].format(label=classes[int(y)]) for t, y in zip(picks, labels)]
