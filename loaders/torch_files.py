"""The baseline people write today: a `torch.utils.data.Dataset` over one file per sample (PIL decodes PNG,
soundfile decodes WAV, numpy reads a latent's .npy), torchvision's ToTensor + Normalize on the CPU in each worker,
`DataLoader(num_workers, pin_memory)`, then `.to(device)`. Knobs: workers -> num_workers; pin_memory -> pin_memory;
prefetch -> prefetch_factor (workers > 0 only). Workers are not persistent, as in the tutorials: each epoch starts them
again.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from dataprep.finite import first_non_finite
from dataprep.formats.base import DatasetMeta, has_captions
from dataprep.formats.files import caption_column, check_sample

from .base import Batch, Loader, shard_indices
from .workers import dataloader_workers, start_worker, worker_errors


class FilesDataset(torch.utils.data.Dataset):
    def __init__(
        self, root: Path, rows: list[list[str]], kind: str, seed: int, augment: bool, shape: tuple, dtype: str
    ) -> None:
        from torchvision import transforms

        self.root, self.rows, self.kind, self.seed, self.augment = root, rows, kind, seed, augment
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)  # the manifest's: each sample read is checked against
        self.epoch = 0
        self.to_tensor = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.5,) * 3, (0.5,) * 3)])

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int):
        from .integrity import DamagedDataError, fix

        try:
            return self._read(i)
        except _Unfit as e:  # decoded, but not what the manifest describes: the message names the file
            raise DamagedDataError(f"{e}; {fix(self.root.parent)}") from None
        except Exception as e:  # a damaged file passes the open check when its size is intact; name it
            path = self.root / self.rows[i][0]
            raise DamagedDataError(
                f"{path}: cannot decode ({type(e).__name__}: {e}); {fix(self.root.parent)}"
            ) from None

    def _read(self, i: int):
        path, label = self.root / self.rows[i][0], int(self.rows[i][1])
        if self.kind == "latent":  # mirrored view and draw happen on the device, per batch (loaders.base)
            return torch.from_numpy(self._checked(np.load(path, allow_pickle=False), path)), label
        if self.kind == "audio":
            import soundfile as sf

            x, _ = sf.read(path, dtype="float32", always_2d=True)
            x = self._checked(x[:, 0] if len(self.shape) == 1 else np.ascontiguousarray(x.T), path)
            return torch.from_numpy(x.reshape(-1, x.shape[-1])), label
        from PIL import Image

        with Image.open(path) as im:
            if im.size != (self.shape[1], self.shape[0]):
                want = f"{self.shape[1]}x{self.shape[0]}"
                raise _Unfit(f"{path}: a {im.size[0]}x{im.size[1]} image, the manifest says {want} (replaced?)")
            im = im.convert("RGB")
            # per-sample coin from (seed, epoch, index): reproducible whatever the worker count
            if self.augment and np.random.default_rng([self.seed, self.epoch, i]).random() < 0.5:
                im = im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
            return self.to_tensor(im), label

    def _checked(self, x: np.ndarray, path: Path) -> np.ndarray:
        """The sample, if it has the manifest's shape and dtype (a `.npy` header edited after conversion would give
        a batch that cannot be stacked, naming no file, or wrong values) and no NaN or Inf (a NaN loss)."""
        try:
            check_sample(x, path, self.shape, self.dtype)
        except ValueError as e:
            raise _Unfit(str(e)) from None
        if first_non_finite(x[None]) is not None:
            raise _Unfit(f"{path}: holds NaN or Inf, which would make the loss NaN")
        return x


class _Unfit(Exception):
    """A sample that decodes, but not to what the manifest describes; the message names its file."""


class TorchFilesLoader(Loader):
    def __init__(self, data_dir, manifest, opts) -> None:
        from dataprep.formats.files import DIRNAME, read_index

        super().__init__(data_dir, manifest, opts)
        if self.kind == "audio":
            import soundfile  # noqa: F401  (fail here, where build_loader names the extra, not in a worker)
        listed = {f["path"] for f in manifest["formats"]["files"]["files"]}  # checked by build_loader
        rows = read_index(data_dir, checked=listed)
        shape, dtype = manifest["sample_shape"], manifest["dtype"]
        self.dataset = FilesDataset(self.data_dir / DIRNAME, rows, self.kind, opts.seed, opts.augment, shape, dtype)
        self.captions = None
        if has_captions(manifest):
            column = caption_column(DatasetMeta.from_manifest(manifest))
            self.captions = [r[column] for r in rows]

    def __iter__(self) -> Iterator[Batch]:
        o = self.opts
        self.dataset.epoch = self.epoch
        indices = shard_indices(len(self.dataset), o, self.epoch).tolist()
        loader = torch.utils.data.DataLoader(
            self.dataset,
            batch_size=o.batch_size,
            sampler=indices,
            drop_last=o.drop_last,
            worker_init_fn=start_worker,
            **dataloader_workers(o.workers, self.pin, o, persistent=False),
        )
        with worker_errors("torch", self.data_dir):
            for i, (x, y) in enumerate(loader):
                x = x.to(o.device, non_blocking=self.pin)
                y = y.to(o.device, non_blocking=self.pin)
                batch = indices[i * o.batch_size : (i + 1) * o.batch_size]  # the sampler's order, batch by batch
                captions = None if self.captions is None else [self.captions[k] for k in batch]
                if self.kind == "image":  # already normalized and flipped on the CPU by the transforms
                    x = x.to(o.dtype)
                    x = x.contiguous(memory_format=torch.channels_last) if x.is_cuda else x
                    yield Batch(x, y, self.text(captions))
                else:
                    yield self.finish(x, y, i, captions)
