"""WebDataset tar shards, as img2dataset writes them: per sample the members `KEY.jpg|jpeg|png|webp` (the image) and
optionally `KEY.cls` (an integer label), `KEY.txt` (a caption) and `KEY.json` (metadata: its "caption", as
img2dataset writes it, or "text" is the caption of a sample without `txt`; the rest is not kept).

`--input` is a folder of .tar files, one .tar, a brace pattern (`shards/{00000..00099}.tar`, `{a,b}.tar`), or the
same under `s3://BUCKET/PREFIX` (a prefix alone: every .tar below it). Shards in object storage are downloaded to a
temporary folder first (beside the conversion's own staging, removed at the end): the labels must be known before
the first sample is written, and a local tar can be scanned for them without reading its images. Samples keep the
order of the shards as listed (a pattern's order, else sorted) and of the members within each.

Labels: with `cls` members, the distinct values sorted (numerically when they are integers) are the classes and each
sample's label is its value's index; without, one class named after the input. Captions are stored in every format
and the manifest's schema; a sample without one gets "". A caption that is not UTF-8 stops the conversion, naming
`SHARD.tar:MEMBER`. A sample without an image member, or with an
image PIL cannot decode, is a bad sample named `SHARD.tar:MEMBER` (`--on-bad-file skip` lists it)."""

from __future__ import annotations

import io
import re
import tarfile
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import numpy as np

from ..parallel import ordered_map
from .base import BadSample, Chunk, InputError, Source

IMAGE_MEMBERS = ("jpg", "jpeg", "png", "webp")
BLOCK = 64  # images per decoding task, as the file sources do


def expand_braces(pattern: str) -> list[str]:
    """Bash-style braces: `{00000..00099}` (zero-padded as written), `{a,b,c}`, several of them; in order."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if m is None:
        return [pattern]
    body, head, tail = m.group(1), pattern[: m.start()], pattern[m.end() :]
    r = re.fullmatch(r"(\d+)\.\.(\d+)", body)
    if r:
        a, b = r.group(1), r.group(2)
        width = len(a) if a.startswith("0") else 0
        step = 1 if int(b) >= int(a) else -1
        options = [str(i).zfill(width) for i in range(int(a), int(b) + step, step)]
    else:
        options = body.split(",")
    return [s for o in options for s in expand_braces(f"{head}{o}{tail}")]


def is_webdataset(location) -> bool:
    """Whether --input names tar shards: a pattern, an s3:// location, a folder of .tar files, or a .tar of samples."""
    text = str(location)
    if "{" in text or text.startswith("s3://"):
        return True
    path = Path(text)
    if path.is_dir():
        return any(path.glob("*.tar")) and not any(p.suffix != ".tar" for p in path.iterdir() if p.is_file())
    if path.suffix == ".tar" and tarfile.is_tarfile(path):
        with tarfile.open(path) as tar:
            first = next(iter(tar), None)
        return first is not None and first.name.rsplit(".", 1)[-1].lower() in (*IMAGE_MEMBERS, "cls", "txt", "json")
    return False


def local_shards(location: str) -> list[Path]:
    if "{" in location:
        shards = [Path(p) for p in expand_braces(location)]
    elif Path(location).is_dir():
        shards = sorted(Path(location).glob("*.tar"))
    else:
        shards = [Path(location)]
    missing = [str(p) for p in shards if not p.is_file()]
    if missing:
        raise InputError(f"{missing[0]}: no such shard ({len(missing)} of {len(shards)} missing)")
    if not shards:
        raise InputError(f"{location}: no .tar shards")
    return shards


def fetch_shards(location: str, into: Path) -> list[Path]:
    """s3:// shards downloaded into `into`, in the pattern's order (or sorted)."""
    from ..remote import S3Url, client, fetch, list_names

    url = S3Url.parse(location.split("{")[0].rsplit("/", 1)[0] if "{" in location else location)
    if "{" in location:
        names = [p[len(str(url)) + 1 :] for p in expand_braces(location)]
    else:
        names = sorted(n for n in list_names(client(), url) if n.endswith(".tar"))
        if not names:
            raise InputError(f"{url}: no .tar shards below this prefix")
    out = []
    for name in names:
        out.append(fetch(str(url), name, into / f"{len(out):06d}-{Path(name).name}"))
    return out


def split_key(name: str) -> tuple[str, str]:
    """WebDataset's rule: the key is the path up to the first dot of the file name; the rest is the extension."""
    folder, _, base = name.rpartition("/")
    stem, _, ext = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), ext.lower()


def scan(shard: Path) -> list[dict]:
    """Per sample of one shard, in order: its image member's name, its cls value and its caption (read now: tiny)."""
    samples: dict[str, dict] = {}
    with tarfile.open(shard) as tar:
        for m in tar:
            if not m.isfile():
                continue
            key, ext = split_key(m.name)
            s = samples.setdefault(key, {"key": key})
            if ext in IMAGE_MEMBERS:
                s["image"] = m.name
            elif ext in ("cls", "txt"):
                s[ext] = _member_text(shard, m.name, tar.extractfile(m).read())
            elif ext == "json":
                s["json_caption"] = _json_caption(shard, m.name, tar.extractfile(m).read())
    for s in samples.values():
        if "txt" not in s and s.get("json_caption") is not None:
            s["txt"] = s["json_caption"]
        s.pop("json_caption", None)
    return list(samples.values())


def _member_text(shard: Path, name: str, data: bytes) -> str:
    try:
        return data.decode("utf-8").strip()
    except UnicodeDecodeError as e:
        raise InputError(f"{shard}:{name}: not UTF-8 text ({e.reason} at byte {e.start}); write it as UTF-8") from None


def _json_caption(shard: Path, name: str, data: bytes) -> str | None:
    """img2dataset's "caption" (or "text") in KEY.json, None when it holds neither."""
    import json

    try:
        meta = json.loads(_member_text(shard, name, data) or "{}")
    except ValueError as e:
        raise InputError(f"{shard}:{name}: not JSON ({e})") from None
    text = next((meta[k] for k in ("caption", "text") if isinstance(meta, dict) and isinstance(meta.get(k), str)), None)
    return None if text is None else text.strip()


def decode_member(size: int | None, item: tuple[str, bytes]) -> tuple[bool, object]:
    from PIL import Image, UnidentifiedImageError

    from .images import _to_rgb, resize_center_crop

    name, data = item
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            rgb = _to_rgb(im)
            return True, np.asarray(resize_center_crop(rgb, size) if size else rgb, dtype=np.uint8)
    except UnidentifiedImageError:
        return False, "not an image (PIL cannot identify it)"
    except (SyntaxError, ValueError, OSError, Image.DecompressionBombError) as e:
        return False, f"corrupt or truncated image ({e})"


def decode_block(size: int | None, items: list[tuple[str, bytes]]) -> tuple[list, float]:
    t0 = time.process_time()
    return [decode_member(size, it) for it in items], time.process_time() - t0


class WebDatasetSource(Source):
    kind = "image"
    decode_cpu_s = 0.0

    def __init__(self, location, split: str = "train", size: int | None = None) -> None:
        import tempfile

        location = str(location)
        self.path, self.size = location, size
        if location.startswith("s3://"):  # removed with this object (or at exit)
            self._staging = tempfile.TemporaryDirectory(prefix="gpufeed-shards-")
            self.shards = fetch_shards(location, Path(self._staging.name))
        else:
            self.shards = local_shards(location)
        self.by_shard = [scan(shard) for shard in self.shards]
        self.samples = [(shard, s) for shard, samples in zip(self.shards, self.by_shard) for s in samples]
        labels = sorted({s["cls"] for _, s in self.samples if "cls" in s}, key=_label_order)
        self.classes = labels or [Path(location.split("{")[0].rstrip("/")).name or "images"]
        self.index = {c: i for i, c in enumerate(labels)}
        self.captions = any("txt" in s for _, s in self.samples)

    def __len__(self) -> int:
        return len(self.samples)

    def _members(self) -> Iterator[tuple[str, bytes]]:
        """(SHARD:MEMBER, image bytes) of every sample in order; b"" where a sample has no image member."""
        for shard, samples in zip(self.shards, self.by_shard):
            wanted = {s["image"] for s in samples if "image" in s}
            found: dict[str, bytes] = {}
            with tarfile.open(shard) as tar:
                for m in tar:
                    if m.name in wanted:
                        found[m.name] = tar.extractfile(m).read()
            for s in samples:
                yield f"{shard.name}:{s.get('image', s['key'] + '.(no image)')}", found.get(s.get("image"), b"")

    def chunks(self, chunk_size: int, on_bad_file: str, workers: int) -> Iterator[Chunk]:
        members = self._members()
        blocks = iter(lambda: [m for _, m in zip(range(BLOCK), members)], [])
        results = ordered_map(partial(decode_block, self.size), blocks, workers)
        xs, ys, texts, skipped, shape, samples = [], [], [], [], None, iter(self.samples)
        for block, (decoded, cpu_s) in results:
            self.decode_cpu_s += cpu_s
            for (name, data), (ok, value), (_, s) in zip(block, decoded, samples):
                if ok and shape is not None and value.shape != shape:
                    ok, value = False, f"inconsistent size {value.shape}, the first image is {shape}; pass --size N"
                if not data:
                    ok, value = False, "no image member (jpg, jpeg, png or webp) for this key"
                if not ok:
                    if on_bad_file == "error":
                        raise BadSample(name, value)
                    skipped.append({"path": name, "error": value})
                    continue
                shape = value.shape
                xs.append(value)
                ys.append(self.index.get(s.get("cls"), 0))
                texts.append(s.get("txt", ""))
                if len(ys) == chunk_size:
                    yield self._chunk(xs, ys, texts, skipped)
                    xs, ys, texts, skipped = [], [], [], []
        if ys or skipped:
            yield self._chunk(xs, ys, texts, skipped)

    def _chunk(self, xs, ys, texts, skipped) -> Chunk:
        x = np.stack(xs) if xs else np.zeros((0, 1, 1, 3), np.uint8)
        return Chunk(x, np.asarray(ys, np.int64), None, list(skipped), text=list(texts) if self.captions else None)


def _label_order(value: str):
    return (0, int(value), "") if re.fullmatch(r"-?\d+", value) else (1, 0, value)
