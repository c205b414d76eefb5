"""HDF5 (`data.h5`): datasets `x` (N, *sample_shape) uint8|float32, `y` (N,) int64 and, for audio, `length` (N,)
int64; attributes `classes`, `kind` and (audio) `sample_rate`. Uncompressed: the loaders read random samples every
step, and decompression would cost more CPU than the bytes it saves.

Chunking, measured with `python -m bench.studies.format_choices` (bench/results/format_choices.json; 10,000 CIFAR-10
images, 2-core dev machine, page cache warm, random batches of 128 read sample by sample as the loader does):
1 sample/chunk 154k samples/s, 16: 187k, 64: 199k, 256: 202k. The read method matters 40x more than the chunk: one
sorted fancy-index read of the same batch runs at 4-5k samples/s whatever the chunking. We take 16 (48 KiB chunks):
within 10% of the best when cached, while a cold random read drags in 16x less unrelated data than 256 would.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..paths import inside, require_regular
from ..sources.base import Chunk
from .base import DatasetMeta, FormatWriter

FILENAME = "data.h5"
# samples per HDF5 chunk: small chunks keep a random read from dragging in neighbours it does not need; see docstring
CHUNK_SAMPLES = 16


class Hdf5Writer(FormatWriter):
    def __init__(self, out_dir: Path, meta: DatasetMeta, workers: int = 1, progress: bool = False, early=None) -> None:
        import h5py

        super().__init__(out_dir, meta, workers, progress)
        self.f = h5py.File(self.out_dir / FILENAME, "w")
        shape = tuple(meta.sample_shape)
        per_chunk = max(1, CHUNK_SAMPLES * 3072 // meta.record_bytes)  # ~48 KiB chunks whatever the sample size
        self.x = self.f.create_dataset(
            "x", (0, *shape), maxshape=(None, *shape), dtype=meta.dtype, chunks=(per_chunk, *shape)
        )
        self.y = self.f.create_dataset("y", (0,), maxshape=(None,), dtype="int64", chunks=(4096,))
        self.length = None
        if meta.kind == "audio":
            self.length = self.f.create_dataset("length", (0,), maxshape=(None,), dtype="int64", chunks=(4096,))
            self.f.attrs["sample_rate"] = meta.sample_rate
        self.f.attrs["kind"] = meta.kind
        self.f.attrs["classes"] = meta.classes
        self.count = 0

    def write(self, chunk: Chunk, encoded: None = None) -> None:
        n, end = len(chunk), self.count + len(chunk)
        if n == 0:
            return
        for ds, values in ((self.x, chunk.x), (self.y, chunk.y), (self.length, chunk.length)):
            if ds is not None:
                ds.resize(end, axis=0)
                ds[self.count : end] = values
        self.count = end

    def finish(self) -> list[Path]:
        self.f.close()
        return [Path(FILENAME)]

    def abort(self) -> None:
        self.f.close()


def data_file(data_dir: Path) -> Path:
    """DIR/data.h5, once it is known not to lead out of DIR (a symbolic link): what every reader opens."""
    return inside(data_dir, FILENAME, source=data_dir)


def read_chunks(data_dir: Path, manifest: dict, chunk_size: int) -> Iterator[Chunk]:
    import h5py

    path = data_file(data_dir)
    require_regular(path)  # HDF5's own open would wait on a FIFO for ever
    with h5py.File(path, "r") as f:
        n = f["y"].shape[0]
        for start in range(0, n, chunk_size):
            end = min(n, start + chunk_size)
            length = f["length"][start:end] if "length" in f else None
            yield Chunk(f["x"][start:end], f["y"][start:end].astype(np.int64), length)
