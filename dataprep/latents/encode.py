"""Decoded chunks in, stored latents out: what `dataprep convert --vae` writes in place of pixels or clips.

Per sample it stores, as float16 (V, 2, C, h, w): for each view the mean and the standard deviation of the
autoencoder's latent distribution. Images have two views, the image and its horizontal mirror, because a latent
cannot be mirrored as a tensor (the encoder's receptive fields are not symmetric), so flip augmentation survives
caching only if the mirror is encoded too; clips have one (a spectrogram has no mirror that sounds alike). Mean and
std rather than one draw: the loaders draw z = mean + std * noise afresh every epoch (as EDM2 does), which is what
encoding in the loop gives, and the mean alone is the deterministic encoding anyone can compare with their own.

Under torchrun every rank lists the same input, decodes the files of its own batches (convert_latents.share_decoding)
and encodes every world_size-th batch of each chunk; rank 0 gathers and writes, so the output is the same dataset as
one process writes (the batches are the same batches)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch

from common.vae import Vae, VaeError

from ..graphed import Graphed
from ..sources.base import AudioSpec, Chunk

VIEWS = {"image": ("image", "mirrored"), "audio": ("clip",)}
STORED = ("mean", "std")
DTYPE = "float16"  # half the bytes of float32; its rounding (2^-11 relative) is far below the noise drawn each epoch


class LatentEncoder:
    """Encodes chunks of one source kind; `describe()` is the manifest's "latent" entry."""

    def __init__(
        self,
        vae: Vae,
        kind: str,
        sample_shape: tuple[int, ...],
        audio: AudioSpec,
        *,
        batch_size: int,
        precision: str = "fp32",
        compile: bool = False,
    ) -> None:
        self.vae, self.kind, self.audio, self.batch_size = vae, kind, audio, batch_size
        self.device = next(vae.model.parameters()).device
        self.views = VIEWS[kind]
        if kind == "image":
            height, width, channels = sample_shape
            self.input = {"kind": "image", "height": height, "width": width, "range": "[-1, 1]"}
        else:
            from ..features import audioldm_input

            mono = len(sample_shape) == 1  # clips are (T,) mono, (C, T) otherwise
            args = audio.sample_rate, 1 if mono else sample_shape[0], sample_shape[-1]
            (channels, height, width), self.input = audioldm_input(*args)
        self.latent = vae.latent_shape(channels, height, width, f"the {kind} input ({channels}x{height}x{width})")
        self.sample_shape = (len(self.views), len(STORED), *self.latent)
        autocast = precision == "bf16" and self.device.type == "cuda"
        self.autocast = torch.autocast("cuda", torch.bfloat16) if autocast else nullcontext()
        self.precision = "bf16" if autocast else "fp32"
        self._moments = torch.compile(vae.moments, dynamic=False) if compile else vae.moments
        # eager on a GPU: one graph replay per batch, the mel or the scaling and mirroring in it too (dataprep.graphed)
        self._graphed = None
        if not compile and self.device.type == "cuda":
            self._graphed = Graphed(self._prepared_moments, torch.bfloat16 if autocast else None)
        self.one_shape = compile or self.device.type == "cuda"  # a new shape costs a compile or a capture
        self.rank, self.world = _dist()
        self.piece = batch_size  # samples encoded at once: batch_size until the GPU runs out of memory
        # (samples, seconds since the previous chunk's result, seconds of it waiting for the GPU) per chunk; the first
        # holds the compiling
        self.chunks: list[tuple[int, float, float]] = []
        self._last_end: float | None = None
        self.collected = 0  # samples of the chunks collected so far: the output index of the next chunk's first
        self.total: int | None = None  # samples to encode, where known: a CPU's estimate is said from the first batch
        self._estimated = False

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
            from ..features import audioldm_mel

            return audioldm_mel(t.float())[:, None]
        t = t.permute(0, 3, 1, 2).float().div_(127.5).sub_(1.0)
        t = torch.cat([t, t.flip(3)])
        return t.contiguous(memory_format=torch.channels_last) if t.is_cuda else t

    def _encode(self, x: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """(n, V, 2, C, h, w) float16 on the device for n samples, `self.piece` at a time, and (n,) bool: whether each
        sample's stored values are all finite (checked on the device after the cast to float16, where a value beyond
        its 65504 becomes Inf; read with the latents, so it costs no wait for the GPU). Compiled or on a GPU, a
        short last piece is padded to the full size: a new shape would be compiled anew (tens of seconds for an
        SD-sized encoder) or captured anew (a graph's memory each). Halves the pieces when the GPU runs out of memory
        (the batches stay as they are: under torchrun they are what the ranks share out)."""
        out, finite, start = [], [], 0
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
            finite.append(torch.isfinite(out[-1]).flatten(1).all(1))
            start += n
        return torch.cat(out), torch.cat(finite)

    def _halve(self) -> None:
        if self.piece == 1:
            raise VaeError(
                f"out of GPU memory encoding a single sample on {self.device}; free the GPU or convert on "
                "another device (--device cpu)"
            )
        if self._graphed is not None:
            self._graphed.reset()
        torch.cuda.empty_cache()
        self.piece //= 2
        print(
            f"encode: out of GPU memory; encoding {self.piece} at a time from now on (--batch-size {self.piece} "
            "avoids the retry)",
            file=sys.stderr,
        )

    def queue(self, chunk: Chunk) -> _Queued:
        """Queue the GPU's work for this rank's batches of the chunk, and their copy back into pinned memory; return
        before it is done. Under torchrun rank r encodes batches r, r + world, ..."""
        t0, bs = time.perf_counter(), self.batch_size
        with self._current():
            mine = {}
            for k, s in enumerate(range(0, len(chunk), bs)):
                if k % self.world == self.rank:
                    t_batch = time.perf_counter()
                    mine[s] = tuple(self._to_host(t) for t in self._encode(chunk.x[s : s + bs]))
                    self._estimate(len(chunk.x[s : s + bs]), time.perf_counter() - t_batch)
            done = None
            if self.device.type == "cuda":
                done = torch.cuda.Event()
                done.record()
        return _Queued(chunk, mine, done, t0)

    def _estimate(self, n: int, seconds: float) -> None:
        """On a CPU, where an SD-shaped encoder takes seconds an image, the whole encoding's time from the first batch,
        said once before the rest starts."""
        if self.device.type != "cpu" or self.total is None or self._estimated or self.rank:
            return
        self._estimated = True
        left = seconds / n * self.total
        took = f"{left / 60:,.0f} minutes" if left >= 90 else f"{left:,.0f} s"
        print(
            f"encode on a CPU: {seconds / n:.2f} s a sample over the first batch of {n}: about {took} for "
            f"{self.total:,} samples (a GPU, --device cuda, takes a small fraction of that)",
            file=sys.stderr,
        )

    def _current(self):
        """The encoder's GPU as the current device of the calling thread. CUDA's current device is per thread, and
        `stream` works in a thread of its own, where it is cuda:0 whatever the main thread set: there, under torchrun,
        every rank's streams, events, graph captures and NCCL's object collectives went to cuda:0 ("Duplicate GPU
        detected", every capture failing, events that waited for nothing)."""
        return torch.cuda.device(self.device) if self.device.type == "cuda" else nullcontext()

    def collect(self, q: _Queued) -> Chunk:
        """The queued chunk's latents, once the GPU is done with them; under torchrun every rank gets all."""
        t0 = time.perf_counter()
        if q.done is not None:
            q.done.synchronize()
        waited = time.perf_counter() - t0
        mine = {s: (v.numpy(), ok.numpy()) for s, (v, ok) in q.latents.items()}
        if self.world > 1:
            parts: list = [None] * self.world
            with self._current():  # NCCL gathers the pickled objects on the current device
                torch.distributed.all_gather_object(parts, mine)
            mine = {s: v for part in parts for s, v in part.items()}
        starts = range(0, len(q.chunk), self.batch_size)
        finite = np.concatenate([mine[s][1] for s in starts])
        if not finite.all():
            self._refuse(finite, q.chunk)
        x = np.concatenate([mine[s][0] for s in starts])
        out = Chunk(x, q.chunk.y, None, q.chunk.skipped, q.chunk.names, q.chunk.text)
        self.collected += len(q.chunk)
        end = time.perf_counter()
        # from the previous chunk's result to this one's: the pace of the whole pipeline, waits for input included
        self.chunks.append((len(q.chunk), end - (self._last_end or q.t0), waited))
        self._last_end = end
        return out

    def _refuse(self, finite: np.ndarray, chunk: Chunk) -> None:
        """A latent with a NaN or an infinity must not be stored: the loaders would deliver it and the model's loss
        would turn NaN. Name the first such sample (its index in the output, and its file where it has one)."""
        k = int(np.argmin(finite))
        name = f" ({chunk.names[k]})" if chunk.names else ""
        raise VaeError(
            f"sample {self.collected + k}{name}: the autoencoder's latent holds NaN or Inf ({int((~finite).sum())} of "
            f"the {len(finite)} samples of its chunk), so nothing was written; check {self.vae.identity['name']} on "
            "this input (values beyond float16's 65504 become Inf when stored), or try --vae-precision fp32"
        )

    def encode(self, chunk: Chunk) -> Chunk:
        """The chunk's latents, one chunk at a time (the GPU waits while the result is copied back and the next chunk
        is queued; `stream` does not)."""
        self._last_end = None
        return self.collect(self.queue(chunk))

    def stream(self, chunks: Iterator[Chunk]) -> Iterator[Chunk]:
        """The chunks' latents in order. In a thread, chunk k + 1 is queued on the GPU before chunk k is collected, so
        the GPU always holds the next chunk's work while the host copies one back and the caller writes it."""
        self._last_end, self.collected = None, 0
        pool = ThreadPoolExecutor(1, thread_name_prefix="encode")  # one thread: its tasks run in order
        finished = False
        try:
            queued = collected = None
            for chunk in chunks:
                ahead = pool.submit(self.queue, chunk)
                if queued is not None:
                    collected, previous = pool.submit(lambda f: self.collect(f.result()), queued), collected
                    if previous is not None:
                        yield _result(previous)
                queued = ahead
            if collected is not None:
                yield _result(collected)
            if queued is not None:
                yield self.collect(_result(queued))
            finished = True
        finally:  # closed early or failed: the queued chunks are not wanted, and nothing waits for them
            pool.shutdown(wait=finished, cancel_futures=not finished)

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
    latents: dict[int, tuple[torch.Tensor, torch.Tensor]]  # batch start -> ((n, V, 2, C, h, w), (n,) finite) on the
    # host, complete once `done` is
    done: torch.cuda.Event | None  # recorded after the copies back; None on the CPU, where all is done already
    t0: float


def _result(future):
    """A future's result, waited for in short steps: the main thread acts on a stop signal at once even when another
    thread took it. (concurrent.futures.TimeoutError is the built-in one since Python 3.11.)"""
    while True:
        try:
            return future.result(timeout=0.2)
        except TimeoutError:
            continue


def _dist() -> tuple[int, int]:
    d = torch.distributed
    return (d.get_rank(), d.get_world_size()) if d.is_available() and d.is_initialized() else (0, 1)
