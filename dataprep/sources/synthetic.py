"""The embedded defaults: CIFAR-shaped images and short audio clips generated deterministically, with structure
(gradients, shapes, texture; harmonic tones with envelopes) so PNG, JPEG and FLAC behave as on real data, not as on
white noise. Sample i depends only on (seed, i): any `--limit` is a prefix of a larger set."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .base import AudioSpec, Chunk, Source

IMAGE_CLASSES = ["gradient", "disc", "square", "stripes", "checker", "ring", "cross", "dots", "wave", "mixed"]
AUDIO_CLASSES = [f"tone{i}" for i in range(10)]
SEED = 20201219  # fixed: the synthetic set is part of the tool, like a test vector


def _rngs(start: int, n: int) -> list[np.random.Generator]:
    return [np.random.default_rng([SEED, i]) for i in range(start, start + n)]


class SyntheticImages(Source):
    kind = "image"
    classes = IMAGE_CLASSES

    def __init__(self, limit: int | None = None, size: int = 32) -> None:
        self.n = 2000 if limit is None else limit
        self.size = size
        self.path = None

    def __len__(self) -> int:
        return self.n

    def _image(self, i: int, rng: np.random.Generator) -> np.ndarray:
        s = self.size
        yy, xx = np.mgrid[0:s, 0:s].astype(np.float32) / (s - 1)
        c = i % len(self.classes)
        base = rng.uniform(40, 200, 3)
        slope = rng.uniform(-80, 80, (2, 3))
        img = base + xx[..., None] * slope[0] + yy[..., None] * slope[1]
        cx, cy, r = rng.uniform(0.25, 0.75, 2).tolist() + [rng.uniform(0.12, 0.3)]
        d2 = (xx - cx) ** 2 + (yy - cy) ** 2
        # only the class's own mask is computed: building all nine per image made generation 2x slower
        shapes = {
            1: lambda: d2 < r**2,
            2: lambda: (abs(xx - cx) < r) & (abs(yy - cy) < r),
            3: lambda: np.sin(xx * (6 + 4 * r) * np.pi) > 0,
            4: lambda: ((xx * 4).astype(int) + (yy * 4).astype(int)) % 2 == 0,
            5: lambda: (d2 < r**2) & (d2 > (r * 0.6) ** 2),
            6: lambda: (abs(xx - cx) < r / 3) | (abs(yy - cy) < r / 3),
            7: lambda: (np.sin(xx * 18) * np.sin(yy * 18)) > 0.5,
            8: lambda: yy > 0.5 + 0.2 * np.sin(xx * 9 + r * 10),
            9: lambda: (d2 < r**2) | ((xx * 5).astype(int) % 2 == 0),
        }
        if c in shapes:
            img = np.where(shapes[c]()[..., None], rng.uniform(0, 255, 3), img)
        img += rng.normal(0, 6, img.shape)  # sensor-like noise so codecs cannot compress it to nothing
        return np.clip(img, 0, 255).astype(np.uint8)

    def chunks(self, chunk_size: int, on_bad_file: str, workers: int) -> Iterator[Chunk]:
        for start in range(0, self.n, chunk_size):
            n = min(chunk_size, self.n - start)
            x = np.stack([self._image(start + k, rng) for k, rng in enumerate(_rngs(start, n))])
            yield Chunk(x, np.arange(start, start + n, dtype=np.int64) % len(self.classes))


class SyntheticAudio(Source):
    kind = "audio"
    classes = AUDIO_CLASSES

    def __init__(self, limit: int | None = None, spec: AudioSpec | None = None) -> None:
        self.n = 500 if limit is None else limit
        self.spec = spec or AudioSpec()
        self.path = None

    def __len__(self) -> int:
        return self.n

    def audio(self) -> AudioSpec:
        return self.spec

    def _clip(self, i: int, rng: np.random.Generator) -> tuple[np.ndarray, int]:
        sr, T = self.spec.sample_rate, self.spec.num_samples
        n = int(T * rng.uniform(0.3, 1.0))  # true length; the rest is zero padding, as with real short clips
        t = np.arange(n) / sr
        f0 = 150.0 * 2 ** ((i % 10) / 5) * rng.uniform(0.97, 1.03)
        phase = 2 * np.pi * np.cumsum(f0 * (1 + 0.05 * np.sin(2 * np.pi * rng.uniform(3, 7) * t))) / sr
        wave = sum((0.6**k) * np.sin(k * phase) for k in range(1, 5))
        env = np.minimum(1, t / 0.02) * np.exp(-t * rng.uniform(1, 4))
        wave = 0.3 * wave * env + rng.normal(0, 0.003, n)
        out = np.zeros(T, np.float32)
        out[:n] = wave
        if self.spec.channels > 1:
            out = np.repeat(out[None], self.spec.channels, axis=0)
        return out, n

    def chunks(self, chunk_size: int, on_bad_file: str, workers: int) -> Iterator[Chunk]:
        for start in range(0, self.n, chunk_size):
            n = min(chunk_size, self.n - start)
            clips = [self._clip(start + k, rng) for k, rng in enumerate(_rngs(start, n))]
            x = np.stack([c for c, _ in clips])
            length = np.array([m for _, m in clips], np.int64)
            yield Chunk(x, np.arange(start, start + n, dtype=np.int64) % len(self.classes), length)
