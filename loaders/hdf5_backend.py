"""HDF5 through h5py: each worker process opens `data.h5` lazily on first use (an open h5py handle cannot cross a
fork, forkserver or spawn boundary) and reads a whole batch per call, sample by sample with plain integer indexing:
measured (bench/studies/format_choices.py) that is ~200k samples/s per process, while one fancy-index read of the same
128 indices goes through HDF5's selection machinery at ~5k/s. No decode: pixels stay uint8 until on the device.
Knobs: workers -> DataLoader num_workers (persistent across epochs); pin_memory -> pin_memory; prefetch ->
prefetch_factor; mp_context -> multiprocessing_context."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from common.torch_private import shutdown_workers

from .base import Batch, Loader, shard_indices
from .workers import dataloader_workers, start_worker, worker_errors


class BatchReader(torch.utils.data.Dataset):
    """dataset[list_of_indices] -> (x, y) of that batch, in the order asked."""

    def __init__(self, path: Path) -> None:
        self.path, self._file, self._pid = str(path), None, None

    def __getitem__(self, indices: list[int]):
        try:
            return self._read(indices)
        except Exception as e:  # a damaged chunk passes the open check; name the file wherever this runs
            from .integrity import DamagedDataError, fix

            problem = f"cannot read samples {indices[0]}.. ({type(e).__name__}: {e})"
            raise DamagedDataError(f"{self.path}: {problem}; {fix(Path(self.path).parent)}") from None

    def _read(self, indices: list[int]):
        from dataprep.formats.hdf5 import open_samples

        if self._file is None or self._pid != os.getpid():
            # 64 MiB chunk cache: neighbours of a sample read now are often asked for later in the epoch
            self._file, self._x, self._y = open_samples(Path(self.path), cache_bytes=64 << 20)
            self._pid = os.getpid()
        x = np.empty((len(indices), *self._x.shape[1:]), self._x.dtype)
        for k, i in enumerate(indices):
            x[k] = self._x[i]
        return torch.from_numpy(x), torch.from_numpy(self._y[np.asarray(indices)])

    def __getstate__(self):
        return {"path": self.path, "_file": None, "_pid": None}  # the open file stays with its process


class Hdf5Loader(Loader):
    def __init__(self, data_dir, manifest, opts) -> None:
        from dataprep.formats.hdf5 import data_file

        super().__init__(data_dir, manifest, opts)
        self.reader = BatchReader(data_file(self.data_dir))
        self._loader = None
        self.captions = stored_captions(self.data_dir, manifest)

    def _batches(self) -> list[list[int]]:
        idx = shard_indices(self.manifest["count"], self.opts, self.epoch)
        bs = self.opts.batch_size
        end = len(idx) - len(idx) % bs if self.opts.drop_last else len(idx)
        return [idx[i : i + bs].tolist() for i in range(0, end, bs)]

    def __iter__(self) -> Iterator[Batch]:
        o = self.opts
        if self._loader is None:
            self._sampler: list[list[int]] = []
            self._loader = torch.utils.data.DataLoader(
                self.reader,
                batch_size=None,
                sampler=_Proxy(self),
                worker_init_fn=start_worker,
                **dataloader_workers(o.workers, self.pin, o, persistent=True),
            )
        self._sampler = self._batches()
        with worker_errors("hdf5", self.data_dir):
            for i, (x, y) in enumerate(self._loader):
                x = x.to(o.device, non_blocking=self.pin)
                captions = None if self.captions is None else [self.captions[k] for k in self._sampler[i]]
                yield self.finish(x, y.to(o.device, non_blocking=self.pin), i, captions)

    def close(self) -> None:
        if self._loader is not None:
            shutdown_workers(self._loader)
        self._loader = None


def stored_captions(data_dir: Path, manifest: dict) -> list[str] | None:
    """Every sample's caption from data.h5 (small: read once, in the loading process), None without captions."""
    from dataprep.formats.base import has_captions
    from dataprep.formats.hdf5 import TEXT, data_file, read_text

    if not has_captions(manifest):
        return None
    import h5py

    with h5py.File(data_file(data_dir), "r") as f:
        return read_text(f[TEXT], 0, f[TEXT].shape[0])


class _Proxy(torch.utils.data.Sampler):
    """The sampler the persistent DataLoader holds: it reads the owner's batch list for the current epoch."""

    def __init__(self, owner: Hdf5Loader) -> None:
        self.owner = owner

    def __iter__(self):
        return iter(self.owner._sampler)

    def __len__(self) -> int:
        return len(self.owner._sampler)
