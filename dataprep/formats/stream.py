"""Streaming shards (`stream/`): LitData's optimized chunks, read by the `stream` loader from a local folder or from
S3-compatible object storage (`dataprep convert --output s3://BUCKET/PREFIX` uploads the whole directory).

    stream/index.json                 LitData's index: every chunk's file, size and sample count, the item format
    stream/chunk-0-0.bin, ...         LitData's chunks of shard_samples() samples each, in manifest order

Sample k (manifest order) is the item {"x": raw bytes, "y": label, ["length": valid samples], ["txt": caption]}:
`x` is the little-endian bytes of the sample as every format stores it (uint8 HWC pixels, float32 clip, float16
latent moments), reshaped on the reader's side from manifest["sample_shape"] and manifest["dtype"]: no encoder
runs, as in the other formats. `txt` is the sample's caption where the samples have one (dataprep.sources.captions;
every format keeps it); the manifest's "schema" says whether it is there.

Why LitData and these chunks: docs/DESIGN.md ("Data in object storage")."""

from __future__ import annotations

import json
import pickle
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from common.paths import inside

from ..digest import file_sha256
from ..sources.base import Chunk
from .base import DatasetMeta, FormatWriter

DIRNAME = "stream"
INDEX = "index.json"  # LitData's list of the shards, in DIRNAME
X, Y, LENGTH, TEXT = "x", "y", "length", "txt"  # an item's keys: sample bytes, label, (audio) length, (captions) text
# at most SHARD_SAMPLES samples and SHARD_BYTES a shard: enough shards for each loader worker of each rank to read
# whole shards of its own (LitData splits a shard between workers otherwise, and each reads all of it: see
# docs/BENCHMARKS.md, finding 8), in objects large enough that a GET's latency is small beside its transfer
SHARD_SAMPLES = 1024
SHARD_BYTES = 16 << 20
# what LitData's reader raises on a shard whose bytes are not what it wrote (offsets past the end, a wrong item count)
DECODE_ERRORS = (struct.error, ValueError, KeyError, IndexError, EOFError, pickle.UnpicklingError)


def shard_samples(record_bytes: int) -> int:
    return max(1, min(SHARD_SAMPLES, SHARD_BYTES // record_bytes))


def item(chunk: Chunk, k: int) -> dict:
    out = {X: np.ascontiguousarray(chunk.x[k]).tobytes(), Y: int(chunk.y[k])}
    if chunk.length is not None:
        out[LENGTH] = int(chunk.length[k])
    if chunk.text is not None:
        out[TEXT] = chunk.text[k]
    return out


def unpack(items: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """LitData's items -> (their sample bytes as one (n, bytes) uint8 array, labels int64, lengths int64 or None)."""
    # one copy of each sample: joining the bytes first and copying the joined buffer cost 8x as much (8 ms a batch of
    # 256 latents)
    x = np.stack([np.frombuffer(it[X], np.uint8) for it in items])
    y = np.fromiter((it[Y] for it in items), np.int64, len(items))
    length = np.fromiter((it[LENGTH] for it in items), np.int64, len(items)) if LENGTH in items[0] else None
    return x, y, length


def decode(items: list[dict], manifest: dict) -> Chunk:
    """LitData's items back to one Chunk: the stored bytes reshaped to the manifest's sample shape."""
    shape, dtype = tuple(manifest["sample_shape"]), np.dtype(manifest["dtype"]).newbyteorder("<")
    raw, y, length = unpack(items)
    x = raw.view(dtype).reshape(len(items), *shape)
    text = [it[TEXT] for it in items] if TEXT in items[0] else None
    return Chunk(x.astype(dtype.newbyteorder("=")), y, length, text=text)


class StreamWriter(FormatWriter):
    def __init__(self, out_dir: Path, meta: DatasetMeta, workers: int = 1, progress: bool = False, early=None) -> None:
        try:
            from common.litdata_private import binary_writer
        except ImportError:
            raise ValueError(
                "the stream format needs the 'stream' extra (LitData): pip install -e '.[stream]'"
            ) from None
        super().__init__(out_dir, meta, workers, progress)
        self.root = self.out_dir / DIRNAME
        self.root.mkdir(parents=True)
        self.writer = binary_writer(str(self.root), shard_samples(meta.record_bytes))
        self.count = 0

    def write(self, chunk: Chunk, encoded: None = None) -> None:
        for k in range(len(chunk)):
            self.writer[self.count + k] = item(chunk, k)
        self.count += len(chunk)

    def finish(self) -> list[Path]:
        self.writer.done()
        self.writer.merge()
        return sorted(p.relative_to(self.out_dir) for p in self.root.iterdir() if not p.name.startswith("."))


def shard_folder(data_dir: Path) -> Path:
    """DIR/stream, once it is known not to lead out of DIR (a symbolic link)."""
    return inside(data_dir, DIRNAME, source=data_dir)


def check_index(data_dir: Path, count: int) -> str | None:
    """What is wrong with a local stream/index.json for `count` samples, if anything (sizes and hashes of the chunk
    files are checked against the manifest elsewhere)."""
    index = shard_folder(Path(data_dir)) / INDEX
    try:
        chunks = json.loads(index.read_text())["chunks"]
        total = sum(int(c["chunk_size"]) for c in chunks)
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"{index}: unreadable ({type(e).__name__}: {e})"
    return None if total == count else f"{index}: {total} samples in its chunks, the manifest says {count}"


def damaged_shard(data_dir: Path, manifest: dict) -> str | None:
    """The first local file of the stream format whose bytes differ from the manifest's sha256, as one line with the
    fix; None when every one matches."""
    fix = f"restore it or convert the data again (`dataprep verify {data_dir}` checks every file)"
    for f in manifest["formats"][DIRNAME]["files"]:
        path = Path(data_dir) / f["path"]
        try:
            same = file_sha256(path) == f["sha256"]
        except OSError as e:
            return f"{path}: unreadable ({e.strerror or e}); {fix}"
        if not same:
            return f"{path}: damaged shard (its sha256 differs from the manifest's); {fix}"
    return None


def read_failure(error: BaseException, data_dir: Path, manifest: dict) -> str | None:
    """What LitData's failure to read local shards means, as one line naming the damaged shard, where the error is one
    a damaged shard raises (in a DataLoader worker too, re-raised as its type) and a shard differs from the manifest;
    None otherwise. The shards are hashed only then: a failed read, not every read, pays for it."""
    text = str(error)
    decoding = isinstance(error, DECODE_ERRORS) or (isinstance(error, RuntimeError) and "chunk" in text.lower())
    if not decoding or "DataLoader timed out" in text:
        return None
    return damaged_shard(Path(data_dir), manifest)


def read_chunks(data_dir: Path, manifest: dict, chunk_size: int) -> Iterator[Chunk]:
    """Samples in manifest order through LitData's own reader (unshuffled, in this process); a damaged shard stops it
    with a ValueError naming the shard."""
    from litdata import StreamingDataset

    folder = shard_folder(Path(data_dir))
    dataset = StreamingDataset(str(folder), shuffle=False, drop_last=False)
    pending = []
    try:
        for sample in dataset:
            pending.append(sample)
            if len(pending) == chunk_size:
                yield decode(pending, manifest)
                pending = []
    except Exception as e:
        message = read_failure(e, data_dir, manifest)
        if message is None:
            raise
        raise ValueError(message) from None
    if pending:
        yield decode(pending, manifest)
