"""The whole dataset resident on the device as uint8 (as airbench does for CIFAR-10): no workers, no copies, no
decoding. The work is done per epoch, not per batch: `torch.randperm` on the host, one gather, one flip of about
half the samples and the shared `finish_images` over the whole epoch; every batch is then a slice of that epoch
tensor, free to hand out. On a CPU device the data stays in host memory. Audio is kept as its finished features
(the mel is the same every epoch, so it is computed once); latents as their stored float16 moments, a view and a
draw per sample taken for the whole epoch at once. Knobs: workers, pin_memory and prefetch are ignored
(there is nothing to overlap). It loads from data.h5 (or the plain files) once, and refuses a dataset whose
resident copy plus one finished epoch exceed MAX_FREE_FRACTION of the device's free memory (host memory for a CPU
device), leaving room for the model."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from . import LoaderError
from .base import Batch, Loader, finish_audio, finish_images, finish_latents, noise_generator

MAX_FREE_FRACTION = 0.5  # the model, its activations and the optimizer need the rest


class DatasetTooLarge(LoaderError, MemoryError):
    """Refused before allocating: a MemoryError, and a LoaderError whose message the CLIs print as it is."""


class GpuResidentLoader(Loader):
    def __init__(self, data_dir, manifest, opts) -> None:
        super().__init__(data_dir, manifest, opts)
        device = torch.device(opts.device)
        itemsize = torch.empty((), dtype=opts.dtype).element_size()
        per_sample = int(np.prod(manifest["sample_shape"]))
        stored = self.kind != "audio"  # kept as stored; audio as its finished features
        resident = per_sample * (np.dtype(manifest["dtype"]).itemsize if stored else itemsize)
        finished = int(np.prod(manifest["latent"]["shape"])) if self.kind == "latent" else per_sample
        nbytes = (resident + finished * itemsize) * manifest["count"]  # resident set + one finished epoch
        free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else _host_available()
        if nbytes > MAX_FREE_FRACTION * free:
            where = device if device.type == "cuda" else "the host (device cpu)"
            raise DatasetTooLarge(
                f"{data_dir}: {nbytes / 2**30:.2f} GiB of resident samples exceed {MAX_FREE_FRACTION:.0%} of "
                f"the {free / 2**30:.2f} GiB free on {where}; use the hdf5, ffcv or dali loader instead"
            )
        x, y = self._load()
        x = torch.from_numpy(x).to(device)
        self._refuse_non_finite(x)
        if stored:
            self.x = x  # uint8 NHWC (a quarter of float32's bytes, so 4x the dataset fits), or latents' float16
        else:
            rate = int(manifest["audio"]["sample_rate"])
            self.x = torch.cat([finish_audio(c, opts.dtype, opts.representation, rate) for c in x.split(4096)])
        self.y = torch.from_numpy(y).to(device)

    def _load(self) -> tuple[np.ndarray, np.ndarray]:
        """Every sample and label (and caption, kept in `self.captions`) read from data.h5 or the plain files."""
        from dataprep.formats import module

        fmt = "hdf5" if "hdf5" in self.manifest["formats"] else "files"
        try:
            chunks = list(module(fmt).read_chunks(self.data_dir, self.manifest, 8192))
        except Exception as e:  # damage the open check cannot see (sizes intact): name the data and the fix
            from .integrity import DamagedDataError, fix

            raise DamagedDataError(
                f"{self.data_dir}: cannot read its {fmt} samples ({type(e).__name__}: {e}); {fix(self.data_dir)}"
            ) from None
        self.captions = None if chunks[0].text is None else [t for c in chunks for t in c.text]
        return np.concatenate([c.x for c in chunks]), np.concatenate([c.y for c in chunks])

    def _refuse_non_finite(self, x: torch.Tensor) -> None:
        """Every sample is on the device once: a NaN or an infinity among them (stored before the conversion refused
        them, or edited in since) is found there in one pass, 4096 samples at a time (a mask of the whole set could
        take the model's room), read back once."""
        if not x.is_floating_point() or len(x) == 0:
            return
        bad = torch.cat([~torch.isfinite(c.reshape(len(c), -1)).all(1) for c in x.split(4096)])
        if bool(bad.any()):
            from .integrity import DamagedDataError, fix

            first = int(bad.nonzero()[0, 0])
            problem = f"sample {first} holds NaN or Inf, which would make the loss NaN"
            raise DamagedDataError(f"{self.data_dir}: {problem}; {fix(self.data_dir)}")

    def _seed(self, salt: int) -> int:
        return (self.opts.seed * 100_003 + self.epoch) * 2 + salt

    def _generator(self, salt: int) -> torch.Generator:
        return torch.Generator(device=self.x.device).manual_seed(self._seed(salt))

    def _indices(self) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's order for the epoch, on the host and on the device. Drawn on the host: reading a device
        permutation back for the captions would wait for every step already queued, and the GPU would then idle
        while the next ones are launched (seen at each epoch start of a captioned run)."""
        o, n = self.opts, len(self.y)
        # every rank draws the same permutation (same seed and epoch) and takes its own stride of it
        host = torch.Generator().manual_seed(self._seed(0))
        order = torch.randperm(n, generator=host) if o.shuffle else torch.arange(n)
        mine = order[o.rank :: o.world_size]
        mine = mine[: n // o.world_size] if o.drop_last else mine
        cuda = self.x.device.type == "cuda"
        return mine, (mine.pin_memory() if cuda else mine).to(self.x.device, non_blocking=cuda)

    def __iter__(self) -> Iterator[Batch]:
        order, idx = self._indices()
        bs = self.opts.batch_size
        x, y = self.x[idx], self.y[idx]
        if self.kind == "image":
            flip = None
            if self.opts.augment:
                flip = torch.rand(len(idx), device=x.device, generator=self._generator(1)) < 0.5
            x = finish_images(x, self.opts.dtype, flip)
        elif self.kind == "latent":
            flip = noise = None
            if self.opts.augment:
                flip = torch.rand(len(idx), device=x.device, generator=self._generator(1)) < 0.5
                noise = noise_generator(x.device, self.opts, self.epoch, -1)  # -1: the whole epoch
            x = finish_latents(x, self.opts.dtype, self.manifest["latent"], flip, noise)
        end = len(idx) - len(idx) % bs if self.opts.drop_last else len(idx)
        order = None if self.captions is None else order.tolist()
        for start in range(0, end, bs):
            captions = None if order is None else [self.captions[k] for k in order[start : start + bs]]
            yield Batch(x[start : start + bs], y[start : start + bs], self.text(captions))


def _host_available() -> int:
    import psutil

    return psutil.virtual_memory().available
