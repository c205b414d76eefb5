"""FFCV: `ffcv.loader.Loader` over data.beton with FFCV's own pipelines — SimpleRGBImageDecoder (raw pixels, no
JPEG), ToTensor, ToDevice (non-blocking, onto CUDA) — so reading, collation and the host-to-device copy run in FFCV's
compiled threads; ToTorchImage/normalize/flip are the shared on-device `finish_images`, so every backend computes
the same numbers. Knobs: workers -> num_workers threads (at least 1, at most numba's limit: `threads`); pin_memory:
FFCV always uses page-locked buffers for ToDevice, so it is ignored; prefetch -> batches_ahead. FFCV sets torch's
own thread count (to 1 as it is imported, to its workers' as an epoch starts); this module puts it back each time,
so a model trained on the CPU keeps its threads. Sharding: FFCV's `distributed=True` needs an initialized
torch.distributed group, so this backend passes each rank's indices itself (same deal as the others: one
permutation, dealt round-robin), which works with or without a process group."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import numpy as np
import torch

from dataprep.formats.base import captions_padded, has_captions

from .base import Batch, Loader, shard_indices


def _import_ffcv() -> None:
    """FFCV's compiler sets torch's threads to 1 as it is imported: a model on the CPU would train at half speed."""
    threads = torch.get_num_threads()
    import ffcv.loader  # noqa: F401

    torch.set_num_threads(threads)


_import_ffcv()  # here, so a missing extra fails inside build_loader with the fix


def thread_limit() -> int:
    """The most threads FFCV may run: numba refuses more than NUMBA_NUM_THREADS, by default the cores this process
    may use (a 2-core machine refuses FFCV's 4 workers with "The number of threads must be between 1 and 2")."""
    import numba

    return int(numba.config.NUMBA_NUM_THREADS)


class FfcvLoader(Loader):
    def __init__(self, data_dir, manifest, opts) -> None:
        super().__init__(data_dir, manifest, opts)
        self._loader = None
        self.captioned = has_captions(manifest)
        self.threads = min(max(1, opts.workers), thread_limit())
        if opts.workers > self.threads:
            print(
                f"ffcv: {opts.workers} workers asked, numba runs at most {self.threads} threads here (the cores "
                f"this process may use, or NUMBA_NUM_THREADS): running {self.threads}",
                file=sys.stderr,
            )

    def _pipelines(self) -> dict:
        from ffcv.fields.bytes import BytesDecoder
        from ffcv.fields.decoders import IntDecoder, NDArrayDecoder, SimpleRGBImageDecoder
        from ffcv.transforms import Squeeze, ToDevice, ToTensor

        from dataprep.formats.ffcv_layout import TEXT, field_names

        device = torch.device(self.opts.device)
        to_dev = [ToDevice(device, non_blocking=True)] if device.type == "cuda" else []
        label = [IntDecoder(), ToTensor(), Squeeze(), *to_dev]
        # latents: int16 bit patterns of float16 (dataprep.formats.ffcv_layout.stored_dtype)
        data = SimpleRGBImageDecoder() if self.kind == "image" else NDArrayDecoder()
        sample, labels, *rest = field_names(self.kind, self.captioned)  # audio's `length` is not read
        pipelines = {sample: [data, ToTensor(), *to_dev], labels: label, **dict.fromkeys(rest)}
        if self.captioned:  # the captions' bytes, padded to the file's longest, stay on the host
            pipelines[TEXT] = [BytesDecoder()]
        return pipelines

    def __iter__(self) -> Iterator[Batch]:
        from ffcv.loader import Loader as FfLoader
        from ffcv.loader import OrderOption

        from dataprep.formats.ffcv_layout import data_file

        o = self.opts
        # SEQUENTIAL traversal returns the indices we give it as they are: our shuffled shard order, exactly
        indices = shard_indices(self.manifest["count"], o, self.epoch).astype(np.uint64)
        torch_threads = torch.get_num_threads()  # FFCV sets it to num_workers in the caller's thread
        if self._loader is None:  # built once: FFCV compiles its pipeline per Loader, which takes seconds
            self._loader = FfLoader(
                str(data_file(self.data_dir)),
                batch_size=o.batch_size,
                num_workers=self.threads,
                order=OrderOption.SEQUENTIAL,
                indices=indices,
                drop_last=o.drop_last,
                pipelines=self._pipelines(),
                batches_ahead=max(1, o.prefetch),
            )
        self._loader.indices = self._loader.traversal_order.indices = indices
        epoch = iter(self._loader)
        torch.set_num_threads(torch_threads)  # a CPU model trained at half speed beside a 1-thread FFCV loader
        for i, batch in enumerate(epoch):
            # FFCV recycles its output buffers batches_ahead batches later: copy what finish() would not
            x, y = batch[0], batch[1].reshape(-1).clone()
            if self.kind == "latent":  # finish_latents writes new tensors, as finish_images does
                x = x.view(torch.float16)
            captions = captions_padded(batch[-1]) if self.captioned else None
            yield self.finish(x if self.kind != "audio" else x.clone(), y, i, captions)

    def close(self) -> None:
        self._loader = None  # FFCV's threads live only while an epoch is being iterated
