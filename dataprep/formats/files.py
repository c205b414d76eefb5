"""Plain files, what the common tutorials read: one PNG per image (lossless, so the pixels survive exactly), one
float32 WAV per clip or one `.npy` per latent sample (as latent-diffusion training scripts cache their features), plus
`files/index.csv` (path,label[,length][,caption]) in manifest order: `caption` where the samples have captions."""

from __future__ import annotations

import csv
import io
from collections.abc import Container, Iterator
from functools import partial
from pathlib import Path

import numpy as np

from common.paths import OutsideError, all_inside, inside, open_regular

from ..sources.base import Chunk
from .base import DatasetMeta, FormatWriter

DIRNAME = "files"
INDEX = (
    "index.csv"  # in DIRNAME: path (relative to DIRNAME), label, (audio) length, (captioned) caption; a row a sample
)
# One folder per encoding task of CIFAR-sized samples: processes creating files in one directory contend for it (its
# lock), so on many cores the workers must each write a folder of their own; small folders also list fast.
PER_FOLDER = 256


EXTENSIONS = {"image": "png", "audio": "wav", "latent": "npy"}


def sample_path(index: int, kind: str) -> str:
    return f"{index // PER_FOLDER:05d}/{index:08d}.{EXTENSIONS[kind]}"


def encode_files(root: str, kind: str, sample_rate: int | None, chunk: Chunk, start: int) -> tuple[list[dict], str]:
    """Write samples start.. of `chunk` as files under `root` (in a worker process); describe each for the manifest
    and return their rows of index.csv.

    compress_level 1: PNG stays lossless; higher levels cost 5x the time for ~10% smaller files."""
    import hashlib
    import io

    described, rows, folder = [], io.StringIO(), None
    index = csv.writer(rows)
    for k in range(len(chunk)):
        rel = sample_path(start + k, kind)
        buf = io.BytesIO()
        if kind == "image":
            from PIL import Image

            Image.fromarray(chunk.x[k]).save(buf, format="PNG", compress_level=1)
        elif kind == "latent":
            np.save(buf, chunk.x[k], allow_pickle=False)
        else:
            import soundfile as sf

            x = chunk.x[k]
            sf.write(buf, x.T if x.ndim == 2 else x, sample_rate, subtype="FLOAT", format="WAV")
        data = buf.getvalue()
        path = Path(root) / rel
        if k == 0 or path.parent != folder:
            folder = path.parent
            folder.mkdir(exist_ok=True)
        path.write_bytes(data)
        described.append({"path": f"{DIRNAME}/{rel}", "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
        row = [rel, int(chunk.y[k])] + ([int(chunk.length[k])] if kind == "audio" else [])
        index.writerow(row + ([] if chunk.text is None else [chunk.text[k]]))
    return described, rows.getvalue()


class FilesWriter(FormatWriter):
    def __init__(self, out_dir: Path, meta: DatasetMeta, workers: int = 1, progress: bool = False, early=None) -> None:
        super().__init__(out_dir, meta, workers, progress)
        self.root = self.out_dir / DIRNAME
        self.root.mkdir(parents=True)
        self._index = open(self.root / INDEX, "w", newline="")
        header = (
            ["path", "label"] + (["length"] if meta.kind == "audio" else []) + (["caption"] if meta.captions else [])
        )
        csv.writer(self._index).writerow(header)
        self.count = 0
        self.described: list[dict] = []

    def encoder(self):
        return partial(encode_files, str(self.root), self.meta.kind, self.meta.sample_rate)

    def write(self, chunk: Chunk, encoded: tuple[list[dict], str] | None = None) -> None:
        described, rows = encoded or self.encoder()(chunk, self.count)
        self._index.write(rows)
        self.described += described
        self.count += len(chunk)

    def finish(self) -> list[Path | dict]:
        self._index.close()
        return [*self.described, Path(DIRNAME) / INDEX]  # sorted by path, as before

    def abort(self) -> None:
        self._index.close()


def read_index(data_dir: Path, checked: Container[str] = ()) -> list[list[str]]:
    """The rows after the header, every path in them known to stay inside `data_dir`. `checked`: manifest paths
    (`files/...`) the caller has already found inside (the loaders' open check, which has just checked the
    manifest's list): rows naming one of them need no second look, which spares the open a pass over 50,000 names."""
    index = inside(data_dir, f"{DIRNAME}/{INDEX}", source=data_dir)
    with open_regular(index) as f:  # a FIFO in its place is refused, not waited on
        rows = list(csv.reader(io.TextIOWrapper(f, newline="")))[1:]
    unchecked = [r[0] for r in rows if r and f"{DIRNAME}/{r[0]}" not in checked]
    all_inside(data_dir, unchecked, source=index, under=DIRNAME)
    return rows


def read_sample(path: Path, kind: str) -> np.ndarray:
    """One sample file, opened as a regular file only (a FIFO in its place is refused, not waited on)."""
    with open_regular(path) as f:
        if kind == "image":
            from PIL import Image

            with Image.open(f) as im:
                return np.asarray(im.convert("RGB"), dtype=np.uint8)
        if kind == "latent":
            try:
                return np.load(f, allow_pickle=False)  # never pickles: a doctored file cannot run code
            except (ValueError, EOFError, OSError) as e:  # a header that does not fit the data: name the file
                raise ValueError(f"{path}: not a readable .npy sample ({type(e).__name__}: {e})") from None
        import soundfile as sf

        x, _ = sf.read(f, dtype="float32", always_2d=True)
    return x[:, 0] if x.shape[1] == 1 else np.ascontiguousarray(x.T)


def check_sample(x: np.ndarray, path: Path, shape: tuple, dtype: np.dtype) -> np.ndarray:
    """x, if it has the manifest's shape, dtype and C order; else ValueError naming the file. A `.npy` whose header
    was edited loads as another shape (which fails later, naming no file) or another dtype or order (wrong values,
    silently); a replaced image or clip decodes to another size."""
    if x.shape != shape or x.dtype != dtype or not x.flags.c_contiguous:
        held = f"{x.shape} {x.dtype}" + ("" if x.flags.c_contiguous else " in Fortran order")
        why = "its header edited or the file replaced after conversion"
        raise ValueError(f"{path}: holds {held}, the manifest says {shape} {dtype} ({why})")
    return x


def read_chunks(data_dir: Path, manifest: dict, chunk_size: int) -> Iterator[Chunk]:
    meta = DatasetMeta.from_manifest(manifest)
    rows = read_index(data_dir)
    shape, dtype = tuple(meta.sample_shape), np.dtype(meta.dtype)
    for start in range(0, len(rows), chunk_size):
        part = rows[start : start + chunk_size]
        paths = [Path(data_dir) / DIRNAME / r[0] for r in part]
        x = np.stack([check_sample(read_sample(p, meta.kind), p, shape, dtype) for p in paths])
        y = np.array([int(r[1]) for r in part], np.int64)
        length = np.array([int(r[2]) for r in part], np.int64) if meta.kind == "audio" else None
        text = [r[caption_column(meta)] for r in part] if meta.captions else None
        yield Chunk(x, y, length, text=text)


def caption_column(meta: DatasetMeta) -> int:
    """Where index.csv holds the caption: after path, label and (audio) length."""
    return 3 if meta.kind == "audio" else 2


def check_index(data_dir: Path, manifest: dict, sizes: Container[str]) -> str | None:
    """What is wrong with the index against the manifest (its path first), or None: as many rows as samples, each
    naming a file the manifest lists (`sizes`, whose files the caller has checked), labels among the classes."""
    index = Path(data_dir) / DIRNAME / INDEX
    try:
        rows = read_index(data_dir, checked=sizes)  # a row naming a listed file is as inside as the file
        labels = [int(r[1]) for r in rows]
    except OutsideError:
        raise
    except (OSError, ValueError, IndexError, csv.Error) as e:  # UnicodeDecodeError is a ValueError
        return f"{index}: unreadable ({type(e).__name__}: {e})"
    count = int(manifest["count"])
    if len(rows) != count:
        return f"{index}: {len(rows)} rows, the manifest says {count}"
    bad = next((r[0] for r in rows if f"{DIRNAME}/{r[0]}" not in sizes), None)
    if bad is not None:
        return f"{index}: row {bad!r} is not a file the manifest lists"
    if labels and not 0 <= min(labels) <= max(labels) < len(manifest["classes"]):
        return f"{index}: labels outside 0..{len(manifest['classes']) - 1}"
    return None
