"""The whole dataset resident on the device as uint8 (as airbench does for CIFAR-10): no workers, no copies, no
decoding. Shuffling is `torch.randperm` on the device and augmentation runs on whole batches there. On a CPU
device the data stays in host memory. Knobs: workers, pin_memory and prefetch are ignored (nothing to overlap).
It loads from data.h5 (or, failing that, the plain files) once, and refuses a dataset larger than
MAX_FREE_FRACTION of the device's free memory, leaving room for the model."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from .base import Batch, Loader

MAX_FREE_FRACTION = 0.5  # the model, its activations and the optimizer need the rest


class GpuResidentLoader(Loader):
    def __init__(self, data_dir, manifest, opts) -> None:
        super().__init__(data_dir, manifest, opts)
        nbytes = int(np.prod(manifest["sample_shape"])) * np.dtype(manifest["dtype"]).itemsize * manifest["count"]
        device = torch.device(opts.device)
        if device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(device)
            if nbytes > MAX_FREE_FRACTION * free:
                raise MemoryError(
                    f"{data_dir}: {nbytes / 2**30:.1f} GiB of samples exceed {MAX_FREE_FRACTION:.0%} of the "
                    f"{free / 2**30:.1f} GiB free on {device}; use the hdf5, ffcv or dali loader instead"
                )
        x, y = self._load()
        self.x = torch.from_numpy(x).to(device)
        self.y = torch.from_numpy(y).to(device)

    def _load(self) -> tuple[np.ndarray, np.ndarray]:
        from dataprep.formats import module

        fmt = "hdf5" if "hdf5" in self.manifest["formats"] else "files"
        chunks = list(module(fmt).read_chunks(self.data_dir, self.manifest, 8192))
        return np.concatenate([c.x for c in chunks]), np.concatenate([c.y for c in chunks])

    def _indices(self) -> torch.Tensor:
        o, n = self.opts, len(self.y)
        if o.shuffle:
            # every rank draws the same permutation (same seed and epoch) and takes its own stride of it
            g = torch.Generator(device=self.x.device).manual_seed(o.seed * 100_003 + self.epoch)
            order = torch.randperm(n, device=self.x.device, generator=g)
        else:
            order = torch.arange(n, device=self.x.device)
        mine = order[o.rank :: o.world_size]
        return mine[: n // o.world_size] if o.drop_last else mine

    def __iter__(self) -> Iterator[Batch]:
        idx, bs = self._indices(), self.opts.batch_size
        end = len(idx) - len(idx) % bs if self.opts.drop_last else len(idx)
        for i, start in enumerate(range(0, end, bs)):
            take = idx[start : start + bs]
            yield self.finish(self.x[take], self.y[take], i)
