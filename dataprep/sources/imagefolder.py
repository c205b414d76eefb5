"""A folder of images, labelled by folder or not at all.

Labels (torchvision's ImageFolder rule, extended to unlabeled data): with BASE = ROOT/<split> if that folder exists,
else ROOT,
- images directly in BASE (a flat folder, perhaps with subfolders too): one class, named after BASE, holding every
  image below BASE (what lucidrains' `Dataset` and diffusers' unconditional example train on);
- otherwise each folder directly in BASE is a class, holding every image below it at any depth (ROOT/cat/a/b/1.jpg
  is a "cat"); a single such folder is one class. Files directly in BASE beside the class folders are ignored.
Captions (caption files beside the images, or Hugging Face's metadata.jsonl/csv) are read as dataprep.sources.captions
says, and are not samples. Any other file that is not an image is a bad sample (named; `--on-bad-file skip` lists it),
never dropped silently.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from .base import InputError
from .captions import caption_files, read_captions
from .files import FileSource, list_files, mixed
from .images import IMAGE_EXTS, decode_image


class ImageFolderSource(FileSource):
    kind = "image"

    def __init__(self, root: Path, split: str = "train", size: int | None = None) -> None:
        self.root = Path(root)
        base = self.root / split if (self.root / split).is_dir() else self.root
        files = list_files(base)
        if not files:
            raise InputError(f"{base}: empty folder (expected images in it, or in {base}/<class>/...)")
        self.path = str(base)
        listed = files
        extra = caption_files(files, [p for p in files if p.suffix.lower() in IMAGE_EXTS])
        files = [p for p in files if p not in extra]
        if any(p.parent == base for p in files if p.suffix.lower() in IMAGE_EXTS):
            self.classes = [base.resolve().name or "images"]
            self.items = [(p, 0) for p in files]
        else:
            files = [p for p in files if p.parent != base]  # a README beside the class folders is not a sample
            depth = len(base.parts)  # every listed path starts with base's parts (list_files joins onto base)
            self.classes = sorted({p.parts[depth] for p in files})
            index = {c: i for i, c in enumerate(self.classes)}
            self.items = [(p, index[p.parts[depth]]) for p in files]
        if not any(p.suffix.lower() in IMAGE_EXTS for p, _ in self.items):
            raise InputError(f"{base}: no .png/.jpg/.jpeg files below it")
        self.items = mixed(self.items)
        self.caption_of = read_captions([p for p, _ in self.items if p.suffix.lower() in IMAGE_EXTS], listed)
        self.decode = partial(decode_image, size=size)
