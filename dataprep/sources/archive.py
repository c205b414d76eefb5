"""An archive given as --input. CIFAR-10's python tarball is read as it is (sources.cifar10). A tar or zip of an image
folder or of audio clips is not unpacked behind the user's back (it needs as much disk as the folder, somewhere the
user did not choose): the error says what the archive holds and the commands that unpack and convert it.

Only the first entries are read, up to the first that tells: a gzip tarball of 60,000 images is not decompressed
to the end to say what it is."""

from __future__ import annotations

import shlex
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

from .base import InputError

CIFAR_NAMES = {"batches.meta", "test_batch", "data_batch_1"}
LOOK_AT = 10_000  # entries read at most before giving up on telling what an archive holds


def is_archive(path: Path) -> bool:
    return path.is_file() and (tarfile.is_tarfile(path) or zipfile.is_zipfile(path))


def _names(path: Path):
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            yield from z.namelist()[:LOOK_AT]
        return
    with tarfile.open(path) as tar:
        for i, member in enumerate(tar):
            if i >= LOOK_AT:
                return
            if member.isfile():
                yield member.name


def holds(path: Path) -> str:
    """What an archive holds, from its first entries: "cifar10", "images", "audio" or "unknown"."""
    from .audio import AUDIO_EXTS
    from .images import IMAGE_EXTS

    try:
        for name in _names(path):
            p = PurePosixPath(name)
            if p.name in CIFAR_NAMES:
                return "cifar10"
            if p.suffix.lower() in IMAGE_EXTS:
                return "images"
            if p.suffix.lower() in AUDIO_EXTS:
                return "audio"
    except (OSError, tarfile.TarError, zipfile.BadZipFile, EOFError) as e:
        raise InputError(f"{path}: an unreadable archive ({type(e).__name__}: {e})") from None
    return "unknown"


def unpack_first(path: Path, what: str) -> InputError:
    """The error for an archive of an image folder or of clips: what it holds, and how to unpack and convert it."""
    stem = path.name
    for suffix in (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar", ".zip"):
        if stem.lower().endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    folder = Path(stem or "unpacked")  # here, where the user runs the command: the archive's folder may be read-only
    src, dst = shlex.quote(str(path)), shlex.quote(str(folder))
    unpack = f"unzip -q {src} -d {dst}" if zipfile.is_zipfile(path) else f"mkdir -p {dst} && tar -xf {src} -C {dst}"
    kind = "an image folder" if what == "images" else "audio clips"
    fix = f"unpack it and convert the folder: {unpack} && dataprep convert --input {dst} ..."
    return InputError(f"{path}: an archive of {kind}, not CIFAR-10's python batches; {fix}")
