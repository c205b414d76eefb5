"""ROOT/<class>/*.{png,jpg,jpeg}, or ROOT/<split>/<class>/... (e.g. the CIFAR-10 JPEG tree)."""

from __future__ import annotations

from pathlib import Path

from .base import BadSample, InputError
from .files import IMAGE_EXTS, FileSource, decode_image


def _decode_known_ext(path: Path):
    if path.suffix.lower() not in IMAGE_EXTS:
        raise BadSample(path, f"not an image file (extension {path.suffix or 'none'}; expected {IMAGE_EXTS})")
    return decode_image(path)


class ImageFolderSource(FileSource):
    kind = "image"

    def __init__(self, root: Path, split: str = "train") -> None:
        self.root = Path(root)
        base = self.root / split if (self.root / split).is_dir() else self.root
        class_dirs = sorted(d for d in base.iterdir() if d.is_dir() and not d.name.startswith("."))
        if not class_dirs:
            raise InputError(f"{base}: no class folders (expected {base}/<class>/*.png|jpg)")
        self.path = str(base)
        self.classes = [d.name for d in class_dirs]
        self.items = []
        for label, d in enumerate(class_dirs):
            files = sorted(p for p in d.iterdir() if p.is_file() and not p.name.startswith("."))
            self.items += [(p, label) for p in files]
        if not self.items:
            raise InputError(f"{base}: the class folders hold no files")
        self.decode = _decode_known_ext
