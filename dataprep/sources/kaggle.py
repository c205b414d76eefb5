"""Kaggle's CIFAR-10 layout: ROOT/train/<id>.png and ROOT/trainLabels.csv (id,label)."""

from __future__ import annotations

import csv
import io
from functools import partial
from pathlib import Path

import numpy as np

from common.paths import NotRegularError, open_regular

from .base import BadSample, Chunk, InputError
from .files import FileSource
from .images import decode_image


class KaggleSource(FileSource):
    kind = "image"

    def __init__(self, root: Path, split: str = "train", size: int | None = None) -> None:
        self.root = Path(root)
        if split != "train":
            raise InputError(f"{root}: Kaggle's CIFAR-10 test images have no labels; use --split train")
        labels_csv = self.root / "trainLabels.csv"
        image_dir = self.root / "train"
        if not labels_csv.is_file() or not image_dir.is_dir():
            raise InputError(f"{root}: expected train/<id>.png and trainLabels.csv")
        self.labels = self._read_labels(labels_csv)
        self.classes = sorted(set(self.labels.values()))
        self.path = str(self.root)
        files = [p for p in image_dir.iterdir() if p.is_file() and not p.name.startswith(".")]
        files.sort(key=lambda p: (0, int(p.stem)) if p.stem.isdigit() else (1, p.stem))  # Kaggle ids are 1..50000
        index = {c: i for i, c in enumerate(self.classes)}
        # a file without a label row keeps label -1: chunks() reports it as a bad sample
        self.items = [(p, index.get(self.labels.get(p.stem), -1)) for p in files]
        if not self.items:
            raise InputError(f"{image_dir}: empty folder")
        self.decode = partial(decode_image, size=size)

    @staticmethod
    def _read_labels(path: Path) -> dict[str, str]:
        """id -> label; a malformed file is an InputError naming the line."""
        try:
            with open_regular(path) as f:
                rows = list(csv.reader(io.TextIOWrapper(f, encoding="utf-8-sig", newline="")))
        except (UnicodeDecodeError, csv.Error, NotRegularError) as e:
            raise InputError(f"{path}: not a readable CSV file ({e})") from None
        if not rows or [c.strip() for c in rows[0][:2]] != ["id", "label"]:
            raise InputError(f"{path}: expected a header 'id,label'")
        labels: dict[str, str] = {}
        for line, row in enumerate(rows[1:], 2):
            if not row:
                continue  # a blank line
            if len(row) < 2 or not row[0].strip() or not row[1].strip():
                raise InputError(f"{path}: line {line} needs an id and a label, it has {','.join(row)!r}")
            key, label = row[0].strip(), row[1].strip()
            if labels.setdefault(key, label) != label:
                raise InputError(f"{path}: line {line} labels id {key} {label!r}, an earlier line {labels[key]!r}")
        return labels

    def chunks(self, chunk_size: int, on_bad_file: str, workers: int):
        unlabelled = [p for p, y in self.items if y < 0]
        skipped = [{"path": str(p.relative_to(self.root)), "error": "no entry in trainLabels.csv"} for p in unlabelled]
        present = {p.stem for p, _ in self.items}
        missing = [f"train/{k}.png" for k in self.labels if k not in present]
        skipped += [{"path": m, "error": "listed in trainLabels.csv, but missing"} for m in missing]
        if skipped and on_bad_file == "error":
            raise BadSample(skipped[0]["path"], skipped[0]["error"])
        self.items = [(p, y) for p, y in self.items if y >= 0]
        if skipped:
            yield Chunk(np.zeros((0, 1, 1, 3), np.uint8), np.zeros(0, np.int64), None, skipped)
        yield from super().chunks(chunk_size, on_bad_file, workers)
