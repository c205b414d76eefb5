"""A folder of WAV/FLAC/OGG clips at any rate and channel count, made uniform: resampled (soxr), downmixed,
cropped or zero-padded to a fixed length, keeping the true length.

Labels, with BASE = ROOT/<split> if that folder exists, else ROOT:
- clips spread over two or more folders directly in BASE: each such folder is a class, holding every clip below it
  at any depth (BASE/yes/a/1.wav is a "yes");
- otherwise (a flat folder, or one folder): the file-name prefix before the first underscore when the clips have
  one (`7_jackson_12.wav` -> "7", as in the spoken-digit set; a clip without one beside them is a bad sample, named),
  else one class named after the folder, for unconditional training.
Captions, caption files beside the clips or metadata.jsonl/csv, are read as dataprep.sources.captions says.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np

from common.paths import NotRegularError, require_regular

from .base import AudioSpec, BadSample, InputError
from .captions import caption_files, read_captions
from .files import FileSource, list_files, mixed

AUDIO_EXTS = (".wav", ".flac", ".ogg")


def decode_audio(path: Path, spec: AudioSpec) -> tuple[np.ndarray, int]:
    """The clip as stored: (num_samples,) mono or (channels, num_samples), zero-padded; and its true length."""
    return padded(*decoded_audio(path, spec), spec)


def decoded_audio(path: Path, spec: AudioSpec) -> tuple[np.ndarray, int]:
    """The clip resampled and downmixed, (n, channels) float32, before padding, and n: what a decoding process sends
    back. Padding it there would send every 10.24 s clip whole through the pool's pipe, whose reading in the
    converting process held the encoder back (a spoken digit is under a second)."""
    import soundfile as sf
    import soxr

    if path.suffix.lower() not in AUDIO_EXTS:
        raise BadSample(path, f"not an audio file (extension {path.suffix or 'none'}; expected {AUDIO_EXTS})")
    try:
        require_regular(path)  # a FIFO named .wav would block libsndfile's open for ever
        data, rate = sf.read(path, dtype="float32", always_2d=True)
    except NotRegularError as e:
        raise BadSample(path, e.problem) from None
    except Exception as e:  # soundfile raises LibsndfileError, RuntimeError or TypeError depending on the damage
        raise BadSample(path, f"corrupt or unreadable audio ({e})") from None
    if data.shape[0] == 0:
        raise BadSample(path, "audio file holds no samples")
    _require_finite(path, data, rate, "NaN or infinite values (a float WAV can hold them)")
    if spec.channels == 1 or data.shape[1] not in (1, spec.channels):
        with np.errstate(over="ignore"):  # an overflow is found below and named with the file, not warned about
            data = data.mean(axis=1, keepdims=True)
    if data.shape[1] != spec.channels:
        data = np.repeat(data, spec.channels, axis=1)
    if rate != spec.sample_rate:
        data = soxr.resample(data, rate, spec.sample_rate, quality="HQ").astype(np.float32)
    n = min(data.shape[0], spec.num_samples)
    _require_finite(path, data[:n], spec.sample_rate, "values so large that downmixing or resampling overflows")
    return np.ascontiguousarray(data[:n], np.float32), n


def _require_finite(path: Path, data: np.ndarray, rate: int, what: str) -> None:
    """A non-finite sample would reach the model as a NaN loss: the clip is a bad sample, named with where it is."""
    finite = np.isfinite(data).all(axis=1)
    if not finite.all():
        first = int(np.argmin(finite))
        where = f"the first at {first / rate:.3f} s (frame {first})"
        raise BadSample(path, f"holds {what}: {int((~finite).sum())} frame(s), {where}")


def padded(data: np.ndarray, n: int, spec: AudioSpec) -> tuple[np.ndarray, int]:
    out = np.zeros((spec.num_samples, spec.channels), np.float32)
    out[:n] = data
    return (out[:, 0] if spec.channels == 1 else np.ascontiguousarray(out.T)), n


NO_LABEL = (
    "no label: the clips beside it are named <label>_<anything>.wav; name it so too, put the clips in <label>/ "
    "folders, or give none of them a prefix (one class)"
)


def _prefix(path: Path) -> str | None:
    return path.stem.split("_", 1)[0] if "_" in path.stem else None


def _labeller(base: Path, clips: set[Path]):
    """path -> label (None: unlabelled), following the rule in the module docstring."""
    tops = {p.relative_to(base).parts[0] for p in clips if p.parent != base}
    if len(tops) >= 2 and all(p.parent != base for p in clips):
        return lambda p: p.relative_to(base).parts[0]
    if any(_prefix(p) is not None for p in clips):
        return _prefix
    only = next(iter(tops)) if tops else (base.resolve().name or "clips")
    return lambda p: only


def decode_clip(path: Path, spec: AudioSpec, unlabelled: frozenset) -> tuple[np.ndarray, int]:
    """decoded_audio for a clip that has a label; one without is a bad sample (so --on-bad-file skip can skip it)."""
    if path in unlabelled:
        raise BadSample(path, NO_LABEL)
    return decoded_audio(path, spec)


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
        listed, extra = files, caption_files(files, sorted(clips))
        files = [p for p in files if p not in extra]
        label = _labeller(base, clips)
        labels = {p: label(p) for p in clips}
        self.classes = sorted({c for c in labels.values() if c is not None})
        index = {c: i for i, c in enumerate(self.classes)}
        folders = {p.parent for p in clips}
        # files beside the clips and clips without a label are reported as bad samples (the decoder names them), not
        # silently ignored
        self.items = mixed([(p, index.get(labels.get(p), -1)) for p in files if p.parent in folders])
        self.path = str(base)
        self.caption_of = read_captions([p for p, _ in self.items if p in clips], listed)
        unlabelled = frozenset(p for p, c in labels.items() if c is None)
        self.decode = partial(decode_clip, spec=self.spec, unlabelled=unlabelled)

    def audio(self) -> AudioSpec:
        return self.spec

    def received(self, value: tuple[np.ndarray, int]) -> tuple[np.ndarray, int]:
        return padded(*value, self.spec)
