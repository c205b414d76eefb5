"""DALI-ready layout (`dali/`): webdataset tar shards read natively by `fn.readers.webdataset`, with DALI index
files so the reader does not scan the tars at start-up.

    dali/shard-00000.tar, shard-00000.idx, shard-00001.tar, ...   (SHARD_SAMPLES samples per shard)

Sample k (global, manifest order) is the tar members `{k:08d}.<ext>`, each the raw little-endian bytes of:
    images: `rgb`  uint8 (H, W, 3) pixels        -> readers.webdataset(ext=["rgb", "cls"], dtypes=[UINT8, INT64])
    audio:  `pcm`  float32 (T,) or (C, T) samples -> ext=["pcm", "cls", "len"], dtypes=[FLOAT, INT64, INT64]
    latent: `lat`  float16 (V, 2, C, h, w) moments -> ext=["lat", "cls"], dtypes=[FLOAT16, INT64]
    both:   `cls`  int64 label;  audio: `len` int64 valid samples;  captioned: `txt` the caption's UTF-8 bytes and
            a NUL (no member is empty; the loader pads a batch's captions and cuts each at its NUL)
The reader returns flat 1-D tensors of the declared dtype: reshape to manifest["sample_shape"]. No decoder runs:
the pixels are already decoded, so DALI's work is reading, flipping and normalizing. Index files are in DALI's
wds2idx "v1.2" format (one line per sample: `ext offset size name` per component).

Why this layout, measured by `python -m bench.studies.format_choices` (bench/results/format_choices.json; CPU pipeline,
2 threads, batch 128, 10,000 CIFAR-10 images, page cache warm): webdataset shards of raw pixels 169k samples/s,
one `.npy` per sample through fn.readers.numpy 57k/s (a file open per sample), one PNG per sample through
fn.readers.file + fn.decoders.image 18k/s (a decode per sample). Raw shards are 3x the next best.
"""

from __future__ import annotations

import os
import tarfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import numpy as np

from common.paths import all_inside, inside, open_regular, require_regular

from ..sources.base import Chunk
from .base import DatasetMeta, FormatWriter, has_captions

DIRNAME = "dali"
INDEX_VERSION = "v1.2"  # wds2idx's format, the one DALI's reader takes
LABEL_EXT, LENGTH_EXT, TEXT_EXT = "cls", "len", "txt"  # members: label, (audio) valid length, (captioned) caption
SHARD_SAMPLES = 8192  # ~25 MB of CIFAR per shard: few files to open, enough shards to spread over ranks


def data_ext(kind: str) -> str:
    return {"image": "rgb", "audio": "pcm", "latent": "lat"}[kind]


def encode_tar_records(kind: str, chunk: Chunk, start: int) -> tuple[bytes, list, list[int] | None]:
    """The chunk's tar members (header, data, padding per member) as one blob, per sample its index line, and the
    records' sizes where they differ. Runs in worker processes; the headers are tarfile's own, so a shard is what
    tarfile would write. Without captions every sample's record has the same size (fixed-shape samples, 512-byte
    headers), so sample j starts at (j % SHARD_SAMPLES) records into its shard and the worker writes the final
    offsets: the converting process only copies bytes and lines (sizes None). Captions differ in length: then each
    line is the sample's members with offsets from its record's start, placed by the writer (`_placed`)."""
    ext = data_ext(kind)
    blob, lines, sizes = bytearray(), [], None if chunk.text is None else []
    for k in range(len(chunk)):
        key = f"{start + k:08d}"
        parts = [
            (f"{key}.{ext}", np.ascontiguousarray(chunk.x[k]).tobytes()),
            (f"{key}.{LABEL_EXT}", np.int64(chunk.y[k]).tobytes()),
        ]
        if chunk.length is not None:
            parts.append((f"{key}.{LENGTH_EXT}", np.int64(chunk.length[k]).tobytes()))
        if chunk.text is not None:
            parts.append((f"{key}.{TEXT_EXT}", chunk.text[k].encode("utf-8", "surrogateescape") + b"\0"))
        record, entries = bytearray(), []
        for name, data in parts:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            record += info.tobuf(tarfile.USTAR_FORMAT, tarfile.ENCODING, "surrogateescape")
            entries.append((name.rsplit(".", 1)[1], len(record), len(data), name))
            record += data + bytes(-len(data) % tarfile.BLOCKSIZE)
        if sizes is None:
            lines.append(_placed(entries, (start + k) % SHARD_SAMPLES * len(record)))
        else:
            lines.append(entries)
            sizes.append(len(record))
        blob += record
    return bytes(blob), lines, sizes


def _placed(entries: list[tuple[str, int, int, str]], at: int) -> str:
    """A sample's index line, its record starting `at` bytes into the shard."""
    return " ".join(f"{e} {at + offset} {size} {name}" for e, offset, size, name in entries)


class DaliWriter(FormatWriter):
    def __init__(self, out_dir: Path, meta: DatasetMeta, workers: int = 1, progress: bool = False, early=None) -> None:
        super().__init__(out_dir, meta, workers, progress)
        self.root = self.out_dir / DIRNAME
        self.root.mkdir(parents=True)
        self.count, self.shards, self.tar, self.offset = 0, [], None, 0
        self.index: list[str] = []  # per sample of the open shard: "ext offset size name" per component

    def _open_shard(self) -> None:
        self._close_shard()
        path = self.root / f"shard-{len(self.shards):05d}.tar"
        self.shards.append(path)
        self.tar, self.offset = open(path, "wb"), 0

    def _close_shard(self) -> None:
        if self.tar is not None:
            # as tarfile closes an archive: two zero blocks, then zeros up to a whole record
            end = self.offset + 2 * tarfile.BLOCKSIZE
            self.tar.write(bytes(2 * tarfile.BLOCKSIZE + (-end % tarfile.RECORDSIZE)))
            self.tar.close()
            text = f"{INDEX_VERSION} {len(self.index)}\n" + "".join(line + "\n" for line in self.index)
            self.shards[-1].with_suffix(".idx").write_text(text)
            self.tar, self.index = None, []

    def encoder(self):
        return partial(encode_tar_records, self.meta.kind)

    def write(self, chunk: Chunk, encoded: tuple | None = None) -> None:
        blob, lines, sizes = encoded or encode_tar_records(self.meta.kind, chunk, self.count)
        ends = None if sizes is None else np.cumsum([0, *sizes]).tolist()  # records of different sizes (captions)
        size = len(blob) // max(1, len(chunk))  # without captions, one sample's record: the same for every sample
        i, view = 0, memoryview(blob)
        while i < len(chunk):  # up to the next shard boundary at a time
            if self.count % SHARD_SAMPLES == 0:
                self._open_shard()
            n = min(len(chunk) - i, SHARD_SAMPLES - self.count % SHARD_SAMPLES)
            a, b = (i * size, (i + n) * size) if ends is None else (ends[i], ends[i + n])
            self.tar.write(view[a:b])
            if ends is None:
                self.index += lines[i : i + n]
            else:
                self.index += [_placed(lines[j], self.offset + ends[j] - a) for j in range(i, i + n)]
            self.offset += b - a
            self.count += n
            i += n

    def finish(self) -> list[Path]:
        self._close_shard()
        return sorted(p.relative_to(self.out_dir) for p in self.root.iterdir())

    def abort(self) -> None:
        if self.tar is not None:
            self.tar.close()


def shard_paths(data_dir: Path) -> tuple[list[str], list[str]]:
    """The shards and their index files, each checked to stay inside `data_dir` before any is opened."""
    folder = inside(data_dir, DIRNAME, source=data_dir)  # listed only once it is known not to lead out
    tars = sorted(folder.glob("shard-*.tar"))
    idx = [p.with_suffix(".idx") for p in tars]
    all_inside(data_dir, [p.name for p in tars + idx], source=folder, under=DIRNAME)
    return [str(p) for p in tars], [str(p) for p in idx]


def read_chunks(data_dir: Path, manifest: dict, chunk_size: int) -> Iterator[Chunk]:
    """Reads the tars with Python's tarfile (verify must not depend on DALI being installed)."""
    meta = DatasetMeta.from_manifest(manifest)
    ext = data_ext(meta.kind)
    xs, ys, lens, texts = [], [], [], []
    for tar_path in shard_paths(data_dir)[0]:
        with open_regular(tar_path) as f, tarfile.open(fileobj=f) as tar:  # a FIFO is refused, not waited on
            for m in tar:
                data = tar.extractfile(m).read()
                kind = m.name.rsplit(".", 1)[1]
                if kind == ext:
                    xs.append(np.frombuffer(data, meta.dtype).reshape(meta.sample_shape))
                elif kind == LABEL_EXT:
                    ys.append(np.frombuffer(data, "<i8")[0])
                elif kind == LENGTH_EXT:
                    lens.append(np.frombuffer(data, "<i8")[0])
                elif kind == TEXT_EXT:
                    texts.append(data[:-1].decode("utf-8", "surrogateescape"))
                if (
                    len(ys) == chunk_size
                    and len(xs) == chunk_size
                    and (meta.kind != "audio" or len(lens) == chunk_size)
                    and (not meta.captions or len(texts) == chunk_size)
                ):
                    yield _chunk(xs, ys, lens, texts)
                    xs, ys, lens, texts = [], [], [], []
    if ys:
        yield _chunk(xs, ys, lens, texts)


def _chunk(xs, ys, lens, texts) -> Chunk:
    length = np.asarray(lens, np.int64) if lens else None
    return Chunk(np.stack(xs), np.asarray(ys, np.int64), length, text=texts if texts else None)


def check_shards(data_dir: Path, manifest: dict) -> str | None:
    """What is wrong with the shards' index files against the manifest and the tars' sizes (the file's path first),
    or None: every component of every line an expected extension of the expected size, inside its tar."""
    count, shape = int(manifest["count"]), tuple(int(s) for s in manifest["sample_shape"])
    record = int(np.prod(shape)) * np.dtype(manifest["dtype"]).itemsize
    expected = {data_ext(manifest["kind"]): record, LABEL_EXT: 8}
    if manifest["kind"] == "audio":
        expected[LENGTH_EXT] = 8
    if has_captions(manifest):
        expected[TEXT_EXT] = None  # any length
    tars, indexes = shard_paths(data_dir)
    total = 0
    for tar, index in zip(tars, indexes):
        require_regular(tar)
        require_regular(index)
        problem, n = _check_index(Path(index), os.stat(tar).st_size, expected)
        if problem:
            return f"{index}: {problem}"
        total += n
    if total != count:
        return f"{Path(data_dir) / DIRNAME}: the index files list {total} samples, the manifest says {count}"
    return None


def _check_index(index: Path, tar_size: int, expected: dict) -> tuple[str | None, int]:
    """(problem, samples): every component of every line must be an expected extension of the expected size,
    inside the tar; DALI follows these offsets without checking them against the tar's own headers."""
    try:
        lines = index.read_text(encoding="ascii").splitlines()
        version, n = lines[0].split()
        if version != INDEX_VERSION or int(n) != len(lines) - 1:
            return f"header {lines[0]!r} does not match its {len(lines) - 1} sample lines", 0
        end = 0  # tar members follow each other, each after its 512-byte header, on 512-byte boundaries
        for number, line in enumerate(lines[1:], start=2):
            parts = line.split()
            if len(parts) != 4 * len(expected):
                return f"line {number}: {len(parts) // 4} components, expected {len(expected)}", 0
            for ext, offset, size in zip(parts[0::4], parts[1::4], parts[2::4]):
                start, length = int(offset), int(size)
                if (
                    ext not in expected
                    or expected[ext] not in (None, length)
                    or start % 512
                    or start < end + 512
                    or start + length > tar_size
                ):
                    return f"line {number}: component {ext} {offset} {size} does not fit the shard", 0
                end = start + length
        return None, int(n)
    except (ValueError, IndexError, UnicodeDecodeError) as e:
        return f"not a DALI index ({type(e).__name__}: {e})", 0
