"""Decoded chunks in, stored latents out: what `dataprep convert --vae` writes in place of pixels or clips.

Per sample it stores, as float16 (V, 2, C, h, w): for each view the mean and the standard deviation of the
autoencoder's latent distribution. Images have two views, the image and its horizontal mirror, because a latent
cannot be mirrored as a tensor (the encoder's receptive fields are not symmetric), so flip augmentation survives
caching only if the mirror is encoded too; clips have one (a spectrogram has no mirror that sounds alike). Mean and
std rather than one draw: the loaders draw z = mean + std * noise afresh every epoch (as EDM2 does), which is what
encoding in the loop gives, and the mean alone is the deterministic encoding anyone can compare with their own.

Under torchrun every rank reads the same input and encodes every world_size-th batch of each chunk; rank 0 gathers
and writes, so the output is the same dataset as one process writes (the batches are the same batches)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch

from ..sources.base import AudioSpec, Chunk
from .graphed import GraphedMoments
from .vae import Vae, VaeError

VIEWS = {"image": ("image", "mirrored"), "audio": ("clip",)}
STORED = ("mean", "std")
DTYPE = "float16"  # half the bytes of float32; its rounding (2^-11 relative) is far below the noise drawn each epoch


class LatentEncoder:
    """Encodes chunks of one source kind; `describe()` is the manifest's "latent" entry."""

    def __init__(self, vae: Vae, kind: str, sample_shape: tuple[int, ...], audio: AudioSpec, *, batch_size: int,
                 precision: str = "fp32", compile: bool = False) -> None:  # fmt: skip
        self.vae, self.kind, self.audio, self.batch_size = vae, kind, audio, batch_size
        self.device = next(vae.model.parameters()).device
        self.views = VIEWS[kind]
        if kind == "image":
            height, width, channels = sample_shape
            self.input = {"kind": "image", "height": height, "width": width, "range": "[-1, 1]"}
        else:
            from .mel import mel_input

            mono = len(sample_shape) == 1  # clips are (T,) mono, (C, T) otherwise
            args = audio.sample_rate, 1 if mono else sample_shape[0], sample_shape[-1]
            (channels, height, width), self.input = mel_input(*args)
        self.latent = vae.latent_shape(channels, height, width, f"the {kind} input ({channels}x{height}x{width})")
        self.sample_shape = (len(self.views), len(STORED), *self.latent)
        autocast = precision == "bf16" and self.device.type == "cuda"
        self.autocast = torch.autocast("cuda", torch.bfloat16) if autocast else nullcontext()
        self.precision = "bf16" if autocast else "fp32"
        self._moments = torch.compile(vae.moments, dynamic=False) if compile else vae.moments
        # eager on a GPU: one graph replay per batch, the mel or the scaling and mirroring in it too (graphed.py)
        self._graphed = None
        if not compile and self.device.type == "cuda":
            self._graphed = GraphedMoments(self._prepared_moments, torch.bfloat16 if autocast else None)
        self.one_shape = compile or self.device.type == "cuda"  # a new shape costs a compile or a capture
        self.rank, self.world = _dist()
        self.piece = batch_size  # samples encoded at once: batch_size until the GPU runs out of memory
        # (samples, seconds since the previous chunk's result, seconds of it waiting for the GPU) per chunk; the first
        # holds the compiling
        self.chunks: list[tuple[int, float, float]] = []
        self._last_end: float | None = None

    def describe(self) -> dict:
        return {
            "of": self.kind,
            "views": list(self.views),
            "stored": list(STORED),
            "shape": list(self.latent),
            "dtype": DTYPE,
            "scaling_factor": self.vae.scaling_factor,
            "shift_factor": self.vae.shift_factor,
            "input": self.input,
            "vae": self.vae.identity,
            "encoded": {"device": str(self.device), "precision": self.precision, "processes": self.world},
        }

    def pace(self) -> float | None:
        """Samples per second from the first chunk's result to the last's, waits for input included (the first chunk
        holds compiling and warm-up); None for one chunk."""
        rest = self.chunks[1:]
        seconds = sum(s for _, s, _ in rest)
        return round(sum(n for n, *_ in rest) / seconds, 1) if rest and seconds > 0 else None

    def _on_device(self, x: np.ndarray) -> torch.Tensor:
        """A piece as decoded, on the encoder's device. From pinned memory, so the copy does not wait for the GPU to
        finish the piece before."""
        t = torch.from_numpy(x)
        return t.pin_memory().to(self.device, non_blocking=True) if self.device.type == "cuda" else t

    def _prepared_moments(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._moments(self._inputs(t))

    def _inputs(self, t: torch.Tensor) -> torch.Tensor:
        """A decoded piece as the autoencoder takes it: AudioLDM's mel of each clip, or the images scaled to [-1, 1]
        with their mirrors appended after them."""
        if self.kind == "audio":
            from .mel import audioldm_mel

            return audioldm_mel(t.float())[:, None]
        t = t.permute(0, 3, 1, 2).float().div_(127.5).sub_(1.0)
        t = torch.cat([t, t.flip(3)])
        return t.contiguous(memory_format=torch.channels_last) if t.is_cuda else t

    def _encode(self, x: np.ndarray) -> torch.Tensor:
        """(n, V, 2, C, h, w) float16 on the device for n samples, `self.piece` at a time. Compiled or on a GPU, a
        short last piece is padded to the full size: a new shape would be compiled anew (tens of seconds for an
        SD-sized encoder) or captured anew (a graph's memory each). Halves the pieces when the GPU runs out of memory
        (the batches stay as they are: under torchrun they are what the ranks share out)."""
        out, start = [], 0
        while start < len(x):
            piece = x[start : start + self.piece]
            n = len(piece)
            if self.one_shape and n < self.piece:
                piece = np.concatenate([piece, np.repeat(piece[-1:], self.piece - n, axis=0)])
            try:
                t = self._on_device(piece)
                with self.autocast:
                    mean, std = self._graphed(t) if self._graphed is not None else self._prepared_moments(t)
            except torch.OutOfMemoryError:
                self._halve()
                continue
            both = torch.stack([mean, std], 1).reshape(len(self.views), len(piece), len(STORED), *self.latent)
            out.append(both[:, :n].transpose(0, 1).to(torch.float16))
            start += n
        return torch.cat(out)

    def _halve(self) -> None:
        if self.piece == 1:
            raise VaeError(f"out of GPU memory encoding a single sample on {self.device}; free the GPU or convert on "
                           "another device (--device cpu)")  # fmt: skip
        if self._graphed is not None:
            self._graphed.reset()
        torch.cuda.empty_cache()
        self.piece //= 2
        print(f"encode: out of GPU memory; encoding {self.piece} at a time from now on (--batch-size {self.piece} "
              "avoids the retry)", file=sys.stderr)  # fmt: skip

    def queue(self, chunk: Chunk) -> _Queued:
        """Queue the GPU's work for this rank's batches of the chunk, and their copy back into pinned memory; return
        before it is done. Under torchrun rank r encodes batches r, r + world, ..."""
        t0, bs = time.perf_counter(), self.batch_size
        mine = {s: self._to_host(self._encode(chunk.x[s : s + bs]))
                for k, s in enumerate(range(0, len(chunk), bs)) if k % self.world == self.rank}  # fmt: skip
        done = None
        if self.device.type == "cuda":
            done = torch.cuda.Event()
            done.record()
        return _Queued(chunk, mine, done, t0)

    def collect(self, q: _Queued) -> Chunk:
        """The queued chunk's latents, once the GPU is done with them; under torchrun every rank gets all."""
        t0 = time.perf_counter()
        if q.done is not None:
            q.done.synchronize()
        waited = time.perf_counter() - t0
        mine = {s: v.numpy() for s, v in q.latents.items()}
        if self.world > 1:
            parts: list = [None] * self.world
            torch.distributed.all_gather_object(parts, mine)
            mine = {s: v for part in parts for s, v in part.items()}
        out = Chunk(np.concatenate([mine[s] for s in range(0, len(q.chunk), self.batch_size)]), q.chunk.y, None,
                    q.chunk.skipped, q.chunk.text)  # fmt: skip
        end = time.perf_counter()
        # from the previous chunk's result to this one's: the pace of the whole pipeline, waits for input included
        self.chunks.append((len(q.chunk), end - (self._last_end or q.t0), waited))
        self._last_end = end
        return out

    def encode(self, chunk: Chunk) -> Chunk:
        """The chunk's latents, one chunk at a time (the GPU waits while the result is copied back and the next chunk
        is queued; `stream` does not)."""
        self._last_end = None
        return self.collect(self.queue(chunk))

    def stream(self, chunks: Iterator[Chunk]) -> Iterator[Chunk]:
        """The chunks' latents in order. In a thread, chunk k + 1 is queued on the GPU before chunk k is collected, so
        the GPU always holds the next chunk's work while the host copies one back and the caller writes it."""
        self._last_end = None
        with ThreadPoolExecutor(1, thread_name_prefix="encode") as pool:  # one thread: its tasks run in order
            queued = collected = None
            for chunk in chunks:
                ahead = pool.submit(self.queue, chunk)
                if queued is not None:
                    collected, previous = pool.submit(lambda f: self.collect(f.result()), queued), collected
                    if previous is not None:
                        yield previous.result()
                queued = ahead
            if collected is not None:
                yield collected.result()
            if queued is not None:
                yield self.collect(queued.result())

    def _to_host(self, t: torch.Tensor) -> torch.Tensor:
        """A copy back to the host, queued behind the work that computes `t` (pinned memory: the copy is
        asynchronous)."""
        if t.device.type != "cuda":
            return t
        host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        return host.copy_(t, non_blocking=True)


@dataclass
class _Queued:
    chunk: Chunk
    latents: dict[int, torch.Tensor]  # batch start -> (n, V, 2, C, h, w) on the host, complete once `done` is
    done: torch.cuda.Event | None  # recorded after the copies back; None on the CPU, where all is done already
    t0: float


def _dist() -> tuple[int, int]:
    d = torch.distributed
    return (d.get_rank(), d.get_world_size()) if d.is_available() and d.is_initialized() else (0, 1)
