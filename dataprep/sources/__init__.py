"""Source registry and layout detection. Sources import only numpy and the standard library at module level."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from .archive import holds, is_archive, unpack_first
from .base import AudioSpec, BadSample, Chunk, InputError, Source

SOURCES = {
    "cifar10": "dataprep.sources.cifar10:Cifar10Source",
    "imagefolder": "dataprep.sources.imagefolder:ImageFolderSource",
    "kaggle": "dataprep.sources.kaggle:KaggleSource",
    "audio": "dataprep.sources.audio:AudioSource",
    "webdataset": "dataprep.sources.webdataset:WebDatasetSource",
    "synthetic-images": "dataprep.sources.synthetic:SyntheticImages",
    "synthetic-audio": "dataprep.sources.synthetic:SyntheticAudio",
}
RESIZABLE = ("cifar10", "imagefolder", "kaggle", "webdataset")  # the image sources read from files
LAYOUTS = (
    "cifar10: cifar-10-batches-py/ (data_batch_1..5, test_batch, batches.meta) or its .tar.gz; "
    "imagefolder: a folder of .png/.jpg images, flat or in ROOT/[train|test/]<class>/...; "
    "kaggle: ROOT/train/<id>.png + ROOT/trainLabels.csv; audio: a folder of .wav/.flac/.ogg clips; "
    "webdataset: .tar shards (a folder of them, a brace pattern, or s3://), KEY.jpg|png|webp [+ KEY.cls, KEY.txt]"
)


def detect(path: Path) -> str:
    """Name the source kind of `path` from its layout, or raise InputError listing the known layouts."""
    from .audio import AUDIO_EXTS
    from .cifar10 import find_batches_dir
    from .files import walk_files
    from .images import IMAGE_EXTS

    if not path.exists():
        raise InputError(f"{path}: no such file or folder")
    if path.is_file():
        if not is_archive(path):
            raise InputError(f"{path}: a file that is not a tar or zip archive; known layouts: {LAYOUTS}")
        what = holds(path)
        if what in ("images", "audio"):
            raise unpack_first(path, what)
        if what == "cifar10":
            return "cifar10"
        raise InputError(
            f"{path}: an archive with no CIFAR-10 batches, images or clips in it; known layouts: {LAYOUTS}"
        )
    if find_batches_dir(path):
        return "cifar10"
    if (path / "trainLabels.csv").is_file():
        return "kaggle"
    suffixes = {os.path.splitext(p)[1].lower() for p in walk_files(path)}
    if not suffixes:
        raise InputError(f"{path}: empty folder")
    if suffixes & set(AUDIO_EXTS):
        return "audio"
    if suffixes & set(IMAGE_EXTS):
        return "imagefolder"
    raise InputError(f"{path}: unknown layout; known layouts: {LAYOUTS}")


def build_source(
    name: str, path: Path | None, *, split: str, limit: int | None, audio: AudioSpec, size: int | None = None
) -> Source:
    if name == "auto":
        if path is None:
            raise InputError("--input is required unless --source is synthetic-images or synthetic-audio")
        from .webdataset import is_webdataset

        name = "webdataset" if is_webdataset(path) else detect(Path(path))
    if name not in SOURCES:
        raise InputError(f"unknown source {name!r}; valid: auto, {', '.join(SOURCES)}")
    if isinstance(path, Path) and path.is_file() and not name.startswith("synthetic"):  # not s3:// or a brace pattern
        _check_file_input(path, name)
    module, cls = SOURCES[name].split(":")
    source_cls = getattr(importlib.import_module(module), cls)
    if size is not None and name not in RESIZABLE:
        raise InputError(f"--size resizes images read from files ({', '.join(RESIZABLE)}); {name} is not one")
    if name.startswith("synthetic"):
        source = source_cls(limit) if name == "synthetic-images" else source_cls(limit, audio)
    elif path is None:
        raise InputError(f"--input is required for --source {name}")
    else:
        source = source_cls(path, split, audio) if name == "audio" else source_cls(path, split, size)
    source.name = name
    return source


def _check_file_input(path: Path, name: str) -> None:
    """A file where a folder is read, or an archive of images given as CIFAR-10: say what it is and what to do."""
    what = holds(path) if is_archive(path) else None
    if what in ("images", "audio"):
        raise unpack_first(path, what)
    if name != "cifar10":
        raise InputError(f"{path}: a file; --source {name} reads a folder ({LAYOUTS})")


__all__ = ["SOURCES", "AudioSpec", "BadSample", "Chunk", "InputError", "Source", "build_source", "detect"]
