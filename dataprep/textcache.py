"""Caption embeddings cached once: what `dataprep convert --text-encoder PATH` writes beside the samples (pixels or
latents), and what the loaders read back (the writer: dataprep.textcache_write).

    text/captions.json  the distinct captions in order of first appearance (caption id -> caption)
    text/tokens.bin     each distinct caption's valid token embeddings, one caption after another: (T, D)
    text/offsets.bin    (U + 1,) <i8: caption i's tokens are rows offsets[i]..offsets[i+1] of tokens.bin
    text/pooled.bin     (U, P) one pooled vector per distinct caption

The empty caption is always one of them (`manifest["text"]["empty_caption"]` its id): caption dropout for
classifier-free guidance trains on it, and a run on the cache needs no text encoder to have it.

Embeddings are stored as fp16 or bf16 (`manifest["text"]["dtype"]`), both as their 16-bit patterns, little-endian
(numpy has no bfloat16). One table serves every format: each format stores the captions themselves
(dataprep.formats), and a loader maps a batch's captions to their rows here and pads them to the batch's longest
(textenc.pad), so the five backends and `stream` deliver the same embeddings. Identical captions are stored once
(templates give CIFAR-10 ten captions per template for 50,000 images) and only valid tokens are stored: the mask is
each caption's row count, padding costs no bytes on disk or on the link."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from common.paths import inside, open_regular

DIRNAME = "text"
CAPTIONS, TOKENS, OFFSETS, POOLED = "captions.json", "tokens.bin", "offsets.bin", "pooled.bin"
DTYPES = ("bf16", "fp16")


def _torch_dtype(name: str):
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}[name]


class TextTable:
    """The cached embeddings of a converted dataset (memory-mapped), looked up by caption."""

    def __init__(self, data_dir: Path, manifest: dict) -> None:
        text = self.manifest_text = manifest["text"]
        self.dtype = text["dtype"]
        dim, pooled_dim, count, total = (
            int(v) for v in (text["encoder"]["dim"], text["encoder"]["pooled_dim"], text["captions"], text["tokens"])
        )
        root = inside(data_dir, DIRNAME, source=data_dir)
        with open_regular(root / CAPTIONS) as f:
            self.captions = json.loads(f.read().decode("utf-8"))
        self.ids = {c: i for i, c in enumerate(self.captions)}
        self.offsets = np.fromfile(root / OFFSETS, "<i8")
        self.tokens = _mapped(root / TOKENS, (total, dim))
        self.pooled = _mapped(root / POOLED, (count, pooled_dim))

    def empty(self):
        """The empty caption's embedding (one row, textenc.TextEmbeddings on the CPU); None in a table without it."""
        row = self.manifest_text.get("empty_caption")
        return None if row is None else self.lookup([self.captions[row]])

    def lookup(self, captions: list[str], pin_memory: bool = False):
        """The captions' embeddings as textenc.TextEmbeddings on the CPU (pinned: `pin_memory`), padded to the
        longest of them."""
        import torch

        from .textenc.base import pad_flat

        try:
            ids = np.asarray([self.ids[c] for c in captions], np.int64)
        except KeyError as e:
            raise ValueError(f"caption {str(e)[:60]} has no cached embedding; convert the data again") from None
        starts = self.offsets[ids]
        lengths = self.offsets[ids + 1] - starts
        # every caption's rows of tokens.bin in one index: its start, then the rows within it
        within = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        view = _torch_dtype(self.dtype)
        flat = torch.from_numpy(np.asarray(self.tokens[np.repeat(starts, lengths) + within])).view(view)
        return pad_flat(flat, lengths, torch.from_numpy(np.asarray(self.pooled[ids])).view(view), pin_memory)


def _mapped(path: Path, shape: tuple[int, int]) -> np.ndarray:
    if shape[0] * shape[1] == 0:
        return np.zeros(shape, "<i2")
    return np.memmap(path, "<i2", "r", shape=shape)


def check_table(data_dir: Path, manifest: dict) -> str | None:
    """What is wrong with `text/` against the manifest (the file first), or None: sizes, offsets and captions."""
    text, root = manifest["text"], Path(data_dir) / DIRNAME
    dim, pooled_dim = int(text["encoder"]["dim"]), int(text["encoder"]["pooled_dim"])
    count, total, longest = int(text["captions"]), int(text["tokens"]), int(text["max_tokens"])
    sizes = {TOKENS: 2 * total * dim, POOLED: 2 * count * pooled_dim, OFFSETS: 8 * (count + 1)}
    for name, size in sizes.items():
        if (root / name).stat().st_size != size:
            return f"{root / name}: {(root / name).stat().st_size} bytes, the manifest's sizes make {size}"
    steps = np.diff(np.fromfile(root / OFFSETS, "<i8"), prepend=0)
    if steps[0] != 0 or (steps[1:] < 1).any() or (steps[1:] > longest).any() or steps.sum() != total:
        return f"{root / OFFSETS}: offsets do not run from 0 to {total} in steps of 1 to {longest} tokens"
    try:
        captions = json.loads((root / CAPTIONS).read_text(encoding="utf-8"))
    except ValueError as e:
        return f"{root / CAPTIONS}: unreadable ({e})"
    if not isinstance(captions, list) or len(captions) != count or len(set(map(str, captions))) != count:
        return f"{root / CAPTIONS}: not a list of {count} distinct captions"
    empty = text.get("empty_caption")
    if empty is not None and captions[empty] != "":
        return f"{root / CAPTIONS}: caption {empty} is not the empty caption the manifest says it is"
    return None
