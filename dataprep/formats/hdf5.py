"""HDF5 (`data.h5`): datasets `x` (N, *sample_shape) uint8|float32, `y` (N,) int64, for audio `length` (N,) int64 and,
for captioned samples, `txt` (N,) variable-length UTF-8 strings; attributes `classes`, `kind` and (audio)
`sample_rate`. This module owns that layout: the writer, `read_chunks`, `open_samples` (what the loader reads) and
`check_layout` (what the loader checks at open) all take it from here. Uncompressed: the loaders read random samples
every step, and decompression would cost more CPU than the bytes it saves.

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

from common.paths import inside, require_regular

from ..sources.base import Chunk
from .base import DatasetMeta, FormatWriter, has_captions

FILENAME = "data.h5"
X, Y, LENGTH, TEXT = "x", "y", "length", "txt"  # samples, labels, (audio) each clip's length, (captioned) captions
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
            X, (0, *shape), maxshape=(None, *shape), dtype=meta.dtype, chunks=(per_chunk, *shape)
        )
        self.y = self.f.create_dataset(Y, (0,), maxshape=(None,), dtype="int64", chunks=(4096,))
        self.length = None
        if meta.kind == "audio":
            self.length = self.f.create_dataset(LENGTH, (0,), maxshape=(None,), dtype="int64", chunks=(4096,))
            self.f.attrs["sample_rate"] = meta.sample_rate
        self.text = None
        if meta.captions:
            self.text = self.f.create_dataset(TEXT, (0,), maxshape=(None,), dtype=text_dtype(), chunks=(4096,))
        self.f.attrs["kind"] = meta.kind
        self.f.attrs["classes"] = meta.classes
        self.count = 0

    def write(self, chunk: Chunk, encoded: None = None) -> None:
        n, end = len(chunk), self.count + len(chunk)
        if n == 0:
            return
        parts = ((self.x, chunk.x), (self.y, chunk.y), (self.length, chunk.length), (self.text, chunk.text))
        for ds, values in parts:
            if ds is not None:
                ds.resize(end, axis=0)
                ds[self.count : end] = values
        self.count = end

    def finish(self) -> list[Path]:
        self.f.close()
        return [Path(FILENAME)]

    def abort(self) -> None:
        self.f.close()


def text_dtype():
    """h5py's variable-length UTF-8 string type, the captions' dtype."""
    import h5py

    return h5py.string_dtype("utf-8")


def read_text(ds, start: int, end: int) -> list[str]:
    """Captions start..end of the `txt` dataset as str (h5py reads them as UTF-8 bytes)."""
    return [t.decode("utf-8", "surrogateescape") for t in ds[start:end]]


def data_file(data_dir: Path) -> Path:
    """DIR/data.h5, once it is known not to lead out of DIR (a symbolic link): what every reader opens."""
    return inside(data_dir, FILENAME, source=data_dir)


def read_chunks(data_dir: Path, manifest: dict, chunk_size: int) -> Iterator[Chunk]:
    import h5py

    path = data_file(data_dir)
    require_regular(path)  # HDF5's own open would wait on a FIFO for ever
    with h5py.File(path, "r") as f:
        n = f[Y].shape[0]
        for start in range(0, n, chunk_size):
            end = min(n, start + chunk_size)
            length = f[LENGTH][start:end] if LENGTH in f else None
            text = read_text(f[TEXT], start, end) if has_captions(manifest) else None
            yield Chunk(f[X][start:end], f[Y][start:end].astype(np.int64), length, text=text)


def open_samples(path: Path, cache_bytes: int):
    """(file, samples, labels) for random reads: the open h5py file, its sample dataset (read sample by sample) and
    every label, in memory (they are tiny). `cache_bytes` is HDF5's chunk cache per open file."""
    import h5py

    f = h5py.File(path, "r", rdcc_nbytes=cache_bytes)
    return f, f[X], f[Y][:]


def expected_layout(manifest: dict) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """name -> (shape, dtype) of every dataset a file converted with this manifest holds."""
    count, shape = int(manifest["count"]), tuple(int(s) for s in manifest["sample_shape"])
    want = {X: ((count, *shape), np.dtype(manifest["dtype"])), Y: ((count,), np.dtype("int64"))}
    if manifest["kind"] == "audio":
        want[LENGTH] = ((count,), np.dtype("int64"))
    if has_captions(manifest):
        want[TEXT] = ((count,), text_dtype())
    return want


def check_layout(data_dir: Path, manifest: dict) -> str | None:
    """What is wrong with DIR/data.h5's datasets against the manifest (its path first), or None: names, shapes and
    dtypes, read from the object headers alone (no sample data)."""
    import h5py

    path = data_file(data_dir)
    require_regular(path)  # an unlisted file must not block HDF5's open either
    try:
        with h5py.File(path, "r") as f:
            for name, (dims, dtype) in expected_layout(manifest).items():
                if name not in f:
                    return f"{path}: no dataset {name!r}"
                if f[name].shape != dims or f[name].dtype != dtype:
                    return f"{path}: dataset {name!r} is {f[name].shape} {f[name].dtype}, expected {dims} {dtype}"
    except Exception as e:  # h5py raises OSError, KeyError or RuntimeError for a damaged superblock or object header
        return f"{path}: not a readable HDF5 file ({type(e).__name__}: {e})"
    return None
