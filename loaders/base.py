"""The loader contract every backend implements, and the batch finishing shared by all of them.

Backends differ in how uint8 pixels (or float32 clips) reach `device`. Unshuffled and unflipped, every backend yields
the same samples in the same order with the same values (the conformance suite checks it pixel by pixel): the
arithmetic is one definition here, `finish_images` (normalize to [-1, 1], flip, channels_last), `finish_audio`
(dataprep.features.train_log_mel, computed on `device`) and `finish_latents` (a view and a draw from the stored
latent moments, scaled by common.vae.scale_latents); DALI's fused crop_mirror_normalize computes the same.
Shuffled, each backend draws its own order and flips from the seed (every sample once per epoch, about half flipped),
so two backends train on equally distributed but not identical batch sequences."""

from __future__ import annotations

import math
import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from common.vae import scale_latents
from dataprep.features import train_log_mel


@dataclass
class Batch:
    x: torch.Tensor  # images (N,3,H,W) in [-1,1]; audio (N,C,n_mels,frames) log-mel in about [-1,1], or (N,C,T) wave;
    # latents (N,C,h,w) scaled by the autoencoder's scaling_factor (about unit variance)
    y: torch.Tensor  # int64 labels (N,)
    # captions: dataprep.textenc.TextEmbeddings on the device (cached embeddings, padded per batch), or the raw
    # captions as a list of str (`train --text-encoder` encodes them in the step); None for data without captions
    text: object = None


@dataclass(kw_only=True)
class LoaderOptions:
    batch_size: int
    # the backend's closest knob: processes (torch, hdf5, stream) or threads (ffcv, dali); 4, at most the cores (more
    # only queue for them, and torch's DataLoader warns)
    workers: int = field(default_factory=lambda: min(4, len(os.sched_getaffinity(0))))
    pin_memory: bool = True  # page-locked host buffers so the copy to the GPU can overlap compute
    device: str = "cpu"
    shuffle: bool = True
    augment: bool = True  # random horizontal flip of images, as DDPM trains on CIFAR-10; latents: flip and draw
    drop_last: bool = True  # equal batch shapes: torch.compile and CUDA graphs want them
    seed: int = 0
    rank: int = 0
    world_size: int = 1
    dtype: torch.dtype = torch.float32
    representation: str = "mel"  # audio only: "mel" or "wave"
    prefetch: int = 2  # batches prepared ahead, where the backend has such a queue
    mp_context: str | None = None  # worker processes: "fork", "forkserver" or "spawn" (None: the platform default)
    cache_limit: str | int | None = None  # stream: bytes ("20GB") of shards on local disk (None: LitData's choice)

    def __post_init__(self) -> None:
        checks = [
            (self.batch_size >= 1, f"batch_size must be at least 1, not {self.batch_size}"),
            (self.workers >= 0, f"workers must be 0 (load in the main process) or more, not {self.workers}"),
            (self.prefetch >= 1, f"prefetch must be at least 1 batch, not {self.prefetch}"),
            (self.world_size >= 1, f"world_size must be at least 1, not {self.world_size}"),
            (0 <= self.rank < self.world_size, f"rank must be in [0, world_size={self.world_size}), not {self.rank}"),
            (self.representation in ("mel", "wave"), f"representation is 'mel' or 'wave', not {self.representation!r}"),
        ]
        for ok, message in checks:
            if not ok:
                from .errors import LoaderError

                raise LoaderError(message)


class Loader(ABC):
    """One epoch of `Batch`es on `device` per iteration. Call set_epoch(e) before iterating epoch e."""

    order_from_epoch = True  # the shuffle is a function of (seed, epoch), so a resumed run replays it exactly

    def __init__(self, data_dir: Path, manifest: dict, opts: LoaderOptions) -> None:
        self.data_dir, self.manifest, self.opts = Path(data_dir), manifest, opts
        self.epoch = 0
        self.kind = manifest["kind"]
        # page-locked memory only helps a copy to a GPU; on a CPU device it would be wasted work (and a warning)
        self.pin = opts.pin_memory and torch.device(opts.device).type == "cuda"
        self._table = None  # the cached caption embeddings (dataprep.textcache), opened at the first batch

    @abstractmethod
    def __iter__(self) -> Iterator[Batch]: ...

    def __len__(self) -> int:
        n = len(shard_indices(self.manifest["count"], self.opts, 0))
        return n // self.opts.batch_size if self.opts.drop_last else math.ceil(n / self.opts.batch_size)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def close(self) -> None:
        """Stop every worker thread or process. Safe to call twice."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def text(self, captions: list[str] | None):
        """A batch's `text`: its captions' cached embeddings on the device, padded to the batch's longest caption,
        where the data has them (convert --text-encoder); else the captions themselves; None without captions."""
        if captions is None:
            return None
        if "text" not in self.manifest:
            return list(captions)
        if self._table is None:
            from dataprep.textcache import TextTable

            self._table = TextTable(self.data_dir, self.manifest)
        cuda = torch.device(self.opts.device).type == "cuda"  # from pageable memory the copy would wait for the GPU
        return self._table.lookup(captions, pin_memory=cuda).to(self.opts.device)

    def finish(self, x: torch.Tensor, y: torch.Tensor, batch_index: int, captions: list[str] | None = None) -> Batch:
        """Raw batch on device -> model input: images NHWC uint8 or audio (N[,C],T) float32; `captions` -> text."""
        if self.kind == "image":
            flip = flip_mask(len(y), self.opts, self.epoch, batch_index) if self.opts.augment else None
            x = finish_images(x, self.opts.dtype, flip)
        elif self.kind == "latent":
            noise = noise_generator(x.device, self.opts, self.epoch, batch_index) if self.opts.augment else None
            flip = flip_mask(len(y), self.opts, self.epoch, batch_index) if self.opts.augment else None
            x = finish_latents(x, self.opts.dtype, self.manifest["latent"], flip, noise)
        else:
            x = finish_audio(x, self.opts.dtype, self.opts.representation, int(self.manifest["audio"]["sample_rate"]))
        return Batch(x, y.to(torch.int64), self.text(captions))


def shard_indices(n: int, opts: LoaderOptions, epoch: int) -> np.ndarray:
    """This rank's sample indices for `epoch`: one permutation shared by all ranks (same seed), dealt round-robin.
    With drop_last every rank keeps n // world_size samples, so all ranks run the same number of steps."""
    order = np.random.default_rng([opts.seed, epoch]).permutation(n) if opts.shuffle else np.arange(n)
    mine = order[opts.rank :: opts.world_size]
    return mine[: n // opts.world_size] if opts.drop_last else mine


def flip_mask(n: int, opts: LoaderOptions, epoch: int, batch_index: int) -> torch.Tensor:
    """Which samples of a batch to mirror: a pure function of (seed, rank, epoch, batch), on the CPU (n booleans)."""
    g = torch.Generator().manual_seed(hash((opts.seed, opts.rank, epoch, batch_index)) & (2**62 - 1))
    return torch.rand(n, generator=g) < 0.5


def noise_generator(device: torch.device, opts: LoaderOptions, epoch: int, batch_index: int) -> torch.Generator:
    """The latent draws of a batch: a generator on the batch's device seeded by (seed, rank, epoch, batch)."""
    # ints only: a str in the tuple would hash differently in every interpreter (PYTHONHASHSEED), so a run resumed in
    # a new process would draw other noise; the trailing 1 keeps the seed apart from flip_mask's 4-tuple
    seed = hash((opts.seed, opts.rank, epoch, batch_index, 1)) & (2**62 - 1)
    return torch.Generator(device=device).manual_seed(seed)


def finish_latents(
    x: torch.Tensor, dtype: torch.dtype, latent: dict, flip: torch.Tensor | None, noise: torch.Generator | None
) -> torch.Tensor:
    """Stored moments (N, V, 2, C, h, w) float16 on device -> (N, C, h, w) dtype model input: the mirrored view
    where `flip` (when stored), mean + std * noise when `noise`, else the mean; then (z - shift) * scaling_factor,
    as diffusers' latent diffusion scripts scale it."""
    view = x[:, 0]
    if flip is not None and x.shape[1] > 1:
        view = torch.where(flip.to(x.device, non_blocking=True)[:, None, None, None, None], x[:, 1], view)
    z = view[:, 0].float()
    if noise is not None:
        eps = torch.randn(z.shape, device=z.device, generator=noise)
        z = z + view[:, 1].float() * eps
    z = scale_latents(z, latent["shift_factor"], latent["scaling_factor"])
    z = z.to(dtype)
    return z.contiguous(memory_format=torch.channels_last) if z.is_cuda else z.contiguous()


def finish_images(x: torch.Tensor, dtype: torch.dtype, flip: torch.Tensor | None) -> torch.Tensor:
    """uint8 NHWC on device -> dtype NCHW in [-1, 1] (x / 127.5 - 1), mirrored where `flip`, channels_last on CUDA."""
    x = x.permute(0, 3, 1, 2)
    if flip is not None:
        x = torch.where(flip.to(x.device, non_blocking=True)[:, None, None, None], x.flip(3), x)
    x = x.to(dtype).div_(127.5).sub_(1.0)
    return x.contiguous(memory_format=torch.channels_last) if x.is_cuda else x.contiguous()


def finish_audio(x: torch.Tensor, dtype: torch.dtype, representation: str, sample_rate: int) -> torch.Tensor:
    """(N, T) or (N, C, T) float32 on device -> (N, C, n_mels, frames) or the wave (N, C, T)."""
    if x.dim() == 2:
        x = x[:, None]
    return (train_log_mel(x, sample_rate) if representation == "mel" else x).to(dtype)
