"""NVIDIA DALI: a native `fn.readers.webdataset` over dataprep's DALI layout (raw uint8 pixels or float32 clips
in tar shards, with index files), `fn.crop_mirror_normalize` doing flip, HWC->CHW and x/127.5-1 in one kernel — on
the GPU when `device` is CUDA (`.gpu()` after reading on the CPU: GPUDirect Storage is not assumed), on the CPU with
`device_id=None` otherwise — and `DALIGenericIterator` handing torch tensors over.
Knobs: workers -> num_threads (at least 1); prefetch -> prefetch_queue_depth; pin_memory: DALI manages its own
pinned staging buffers, so it is ignored. Shuffling is DALI's: `random_shuffle` over a buffer of INITIAL_FILL
samples, seeded by `seed`, different every epoch; `set_epoch` cannot choose DALI's order (a fresh loader with the
same seed repeats the same sequence of epochs). Sharding: shard_id=rank, num_shards=world_size."""

from __future__ import annotations

from collections.abc import Iterator

import nvidia.dali  # noqa: F401  (imported here so a missing extra fails inside build_loader with the fix)
import torch

from dataprep.formats.base import captions_padded, has_captions

from .base import Batch, Loader

INITIAL_FILL = 4096  # shuffle buffer: big enough to mix classes across a whole CIFAR-sized shard quickly


class DaliLoader(Loader):
    order_from_epoch = False  # DALI's reader draws its own order; set_epoch cannot choose it

    def __init__(self, data_dir, manifest, opts) -> None:
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        super().__init__(data_dir, manifest, opts)
        self.captioned = has_captions(manifest)
        device = torch.device(opts.device)
        self.gpu = device.type == "cuda"
        self.pipe = self._pipeline(device.index or 0 if self.gpu else None)
        self.pipe.build()
        policy = LastBatchPolicy.DROP if opts.drop_last else LastBatchPolicy.PARTIAL
        outputs = ["x", "y", "txt"] if self.captioned else ["x", "y"]
        self.it = DALIGenericIterator(
            [self.pipe], outputs, reader_name="reader", last_batch_policy=policy, auto_reset=True
        )

    def _pipeline(self, device_id: int | None):
        from nvidia.dali import fn, pipeline_def, types

        from dataprep.formats.dali import LABEL_EXT, TEXT_EXT, data_ext, shard_paths

        o, m = self.opts, self.manifest
        paths, index_paths = shard_paths(self.data_dir)
        image = self.kind == "image"
        dtype = {"image": types.UINT8, "audio": types.FLOAT, "latent": types.FLOAT16}[self.kind]

        @pipeline_def(
            batch_size=o.batch_size,
            num_threads=max(1, o.workers),
            device_id=device_id,
            seed=o.seed,
            prefetch_queue_depth=max(1, o.prefetch),
        )
        def pipe():
            text = [TEXT_EXT] if self.captioned else []
            data, label, *caption = fn.readers.webdataset(
                paths=paths,
                index_paths=index_paths,
                ext=[data_ext(self.kind), LABEL_EXT, *text],
                dtypes=[dtype, types.INT64, *[types.UINT8] * len(text)],
                random_shuffle=o.shuffle,
                initial_fill=INITIAL_FILL,
                shard_id=o.rank,
                num_shards=o.world_size,
                name="reader",
                pad_last_batch=True,  # no sample of the next epoch leaks into the last batch of this one
            )
            data = fn.reshape(data, shape=m["sample_shape"], layout="HWC" if image else "")
            if self.gpu:  # labels too: a CPU label tensor would need a pageable copy, which waits for the GPU
                data, label = data.gpu(), label.gpu()
            if image:
                mirror = fn.random.coin_flip(probability=0.5) if o.augment else 0
                data = fn.crop_mirror_normalize(
                    data, dtype=types.FLOAT, output_layout="CHW", mean=[127.5] * 3, std=[127.5] * 3, mirror=mirror
                )
            # captions differ in length: padded with NULs to the batch's longest, on the host
            return (data, label, fn.pad(caption[0], fill_value=0)) if caption else (data, label)

        return pipe()

    def __len__(self) -> int:
        n = self._shard_size()
        bs = self.opts.batch_size
        return n // bs if self.opts.drop_last else -(-n // bs)

    def _shard_size(self) -> int:
        # DALI splits the sample list into contiguous shards: [n*rank//W, n*(rank+1)//W)
        n, r, w = self.manifest["count"], self.opts.rank, self.opts.world_size
        return n * (r + 1) // w - n * r // w

    def __iter__(self) -> Iterator[Batch]:
        o = self.opts
        for i, out in enumerate(self.it):
            x, y = out[0]["x"], out[0]["y"].reshape(-1)
            captions = captions_padded(out[0]["txt"].cpu()) if self.captioned else None
            if self.kind == "image":
                x = x.to(o.device).to(o.dtype)
                x = x.contiguous(memory_format=torch.channels_last) if x.is_cuda else x
                yield Batch(x, y.to(o.device), self.text(captions))
            else:  # audio's mel and latents' view and draw: the shared finishing on the device
                yield self.finish(x.to(o.device), y.to(o.device), i, captions)

    def close(self) -> None:
        self.it = None
        self.pipe = None
