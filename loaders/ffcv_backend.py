"""FFCV: `ffcv.loader.Loader` over data.beton with FFCV's own pipelines — SimpleRGBImageDecoder (raw pixels, no
JPEG), ToTensor, ToDevice (non-blocking, onto CUDA) — so reading, collation and the host-to-device copy run in FFCV's
compiled threads; ToTorchImage/normalize/flip are the shared on-device `finish_images`, so every backend computes
the same numbers. Knobs: workers -> num_workers threads (at least 1); pin_memory: FFCV always uses page-locked
buffers for ToDevice, so it is ignored; prefetch -> batches_ahead. Sharding: FFCV's `distributed=True` needs an
initialized torch.distributed group, so this backend passes each rank's indices itself (same deal as the others:
one permutation, dealt round-robin), which works with or without a process group."""

from __future__ import annotations

from collections.abc import Iterator

import ffcv  # noqa: F401  (imported here so a missing extra fails inside build_loader with the fix)
import numpy as np
import torch

from .base import Batch, Loader, shard_indices


class FfcvLoader(Loader):
    def __init__(self, data_dir, manifest, opts) -> None:
        super().__init__(data_dir, manifest, opts)
        self._loader = None

    def _pipelines(self) -> dict:
        from ffcv.fields.decoders import IntDecoder, NDArrayDecoder, SimpleRGBImageDecoder
        from ffcv.transforms import Squeeze, ToDevice, ToTensor

        device = torch.device(self.opts.device)
        to_dev = [ToDevice(device, non_blocking=True)] if device.type == "cuda" else []
        label = [IntDecoder(), ToTensor(), Squeeze(), *to_dev]
        if self.kind == "image":
            return {"image": [SimpleRGBImageDecoder(), ToTensor(), *to_dev], "label": label}
        if self.kind == "latent":  # int16 bit patterns of float16 (dataprep.formats.ffcv.stored_dtype)
            return {"latent": [NDArrayDecoder(), ToTensor(), *to_dev], "label": label}
        return {"audio": [NDArrayDecoder(), ToTensor(), *to_dev], "label": label, "length": None}

    def __iter__(self) -> Iterator[Batch]:
        from ffcv.loader import Loader as FfLoader
        from ffcv.loader import OrderOption

        from dataprep.formats.ffcv import data_file

        o = self.opts
        # SEQUENTIAL traversal returns the indices we give it as they are: our shuffled shard order, exactly
        indices = shard_indices(self.manifest["count"], o, self.epoch).astype(np.uint64)
        if self._loader is None:  # built once: FFCV compiles its pipeline per Loader, which takes seconds
            self._loader = FfLoader(
                str(data_file(self.data_dir)), batch_size=o.batch_size, num_workers=max(1, o.workers),
                order=OrderOption.SEQUENTIAL, indices=indices, drop_last=o.drop_last,
                pipelines=self._pipelines(), batches_ahead=max(1, o.prefetch),
            )  # fmt: skip
        self._loader.indices = self._loader.traversal_order.indices = indices
        for i, batch in enumerate(self._loader):
            # FFCV recycles its output buffers batches_ahead batches later: copy what finish() would not
            x, y = batch[0], batch[1].reshape(-1).clone()
            if self.kind == "latent":  # finish_latents writes new tensors, as finish_images does
                x = x.view(torch.float16)
            yield self.finish(x if self.kind != "audio" else x.clone(), y, i)

    def close(self) -> None:
        self._loader = None  # FFCV's threads live only while an epoch is being iterated
