"""A folder of WAV/FLAC/OGG clips at any rate and channel count, made uniform: resampled (soxr), downmixed,
cropped or zero-padded to a fixed length, keeping the true length.

Labels come from the parent folder name when the clips sit in two or more folders (ROOT/<label>/*.wav), else
from the file-name prefix before the first underscore (`7_jackson_12.wav` -> "7", as in the spoken-digit set).
If ROOT has a `train` or `test` folder, `--split` picks it; otherwise every clip is used.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np

from .base import AudioSpec, BadSample, InputError
from .files import FileSource, list_files

AUDIO_EXTS = (".wav", ".flac", ".ogg")


def decode_audio(path: Path, spec: AudioSpec) -> tuple[np.ndarray, int]:
    import soundfile as sf
    import soxr

    if path.suffix.lower() not in AUDIO_EXTS:
        raise BadSample(path, f"not an audio file (extension {path.suffix or 'none'}; expected {AUDIO_EXTS})")
    try:
        data, rate = sf.read(path, dtype="float32", always_2d=True)
    except Exception as e:  # soundfile raises LibsndfileError, RuntimeError or TypeError depending on the damage
        raise BadSample(path, f"corrupt or unreadable audio ({e})") from None
    if data.shape[0] == 0:
        raise BadSample(path, "audio file holds no samples")
    if spec.channels == 1 or data.shape[1] not in (1, spec.channels):
        data = data.mean(axis=1, keepdims=True)
    if data.shape[1] != spec.channels:
        data = np.repeat(data, spec.channels, axis=1)
    if rate != spec.sample_rate:
        data = soxr.resample(data, rate, spec.sample_rate, quality="HQ").astype(np.float32)
    n = min(data.shape[0], spec.num_samples)
    out = np.zeros((spec.num_samples, spec.channels), np.float32)
    out[:n] = data[:n]
    return (out[:, 0] if spec.channels == 1 else np.ascontiguousarray(out.T)), n


NO_LABEL = "no label: put clips in <label>/ folders or name them <label>_<anything>.wav"


def _label(path: Path, by_folder: bool) -> str | None:
    if by_folder:
        return path.parent.name
    return path.stem.split("_", 1)[0] if "_" in path.stem else None


def decode_clip(path: Path, spec: AudioSpec, by_folder: bool) -> tuple[np.ndarray, int]:
    """decode_audio for a clip that has a label; one without is a bad sample (so --on-bad-file skip can skip it)."""
    if path.suffix.lower() in AUDIO_EXTS and _label(path, by_folder) is None:
        raise BadSample(path, NO_LABEL)
    return decode_audio(path, spec)


class AudioSource(FileSource):
    kind = "audio"

    def __init__(self, root: Path, split: str = "train", spec: AudioSpec | None = None) -> None:
        self.root = Path(root)
        self.spec = spec or AudioSpec()
        base = self.root / split if (self.root / split).is_dir() else self.root
        files = list_files(base)
        if not files:
            raise InputError(f"{base}: empty folder")
        clips = {p for p in files if p.suffix.lower() in AUDIO_EXTS}
        if not clips:
            raise InputError(f"{base}: no .wav/.flac/.ogg files")
        folders = {p.parent for p in clips}
        by_folder = len(folders) >= 2
        labels = {p: _label(p, by_folder) for p in clips}
        self.classes = sorted({c for c in labels.values() if c is not None})
        if not self.classes:
            raise InputError(f"{base}: {NO_LABEL}")
        index = {c: i for i, c in enumerate(self.classes)}
        # files beside the clips and clips without a label are reported as bad samples (decode_clip names them), not
        # silently ignored
        self.items = [(p, index.get(labels.get(p), -1)) for p in files if p.parent in folders]
        self.path = str(base)
        self.decode = partial(decode_clip, spec=self.spec, by_folder=by_folder)

    def audio(self) -> AudioSpec:
        return self.spec
