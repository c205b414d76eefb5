"""The input side of `dataprep convert`: the source opened from --input, the paths it reads (which the output must
stay apart from), and its samples in chunks of a bounded size, cut at --limit."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from common import ranks

from .convert_config import ConvertConfig, ConvertError
from .sources import AudioSpec, Chunk, build_source
from .sources.captions import Templates

CHUNK = 1024  # samples per chunk at most: cheap per-chunk overhead (3 MiB of CIFAR, 64 MiB of 1 s audio)
CHUNK_BYTES = 64 << 20  # and at most this much decoded data: 10.24 s clips are 640 KiB, 256 px images 192 KiB each


def open_source(cfg: ConvertConfig, spec: AudioSpec):
    """The source --source and --input name, listed (nothing decoded yet)."""
    return build_source(cfg.source, given_input(cfg), split=cfg.split, limit=cfg.limit, audio=spec, size=cfg.size)


def with_templates(cfg: ConvertConfig, source, chunks: Iterator[Chunk]) -> Iterator[Chunk]:
    """The chunks captioned from --caption-template, when given; a source with captions of its own takes none."""
    if not cfg.caption_templates:
        return chunks
    if getattr(source, "captions", False):
        raise ConvertError(f"{source.path}: the input has captions of its own; drop --caption-template")
    try:
        templates = Templates(cfg.caption_templates)
    except ValueError as e:
        raise ConvertError(str(e)) from None
    return (_captioned(chunk, templates, source.classes) for chunk in chunks)


def listed_captions(cfg: ConvertConfig, source) -> list[str] | None:
    """Every sample's caption in output order, where the listing already holds them (caption files, metadata) and
    none can be skipped (a skipped file drops its caption); None where they come only with the decoded samples."""
    caption_of = getattr(source, "caption_of", None)
    if caption_of is None or cfg.on_bad_file != "error" or cfg.caption_templates:
        return None
    return [caption_of[path] for path, _ in source.items[: cfg.limit]]


def _captioned(chunk: Chunk, templates: Templates, classes: list[str]) -> Chunk:
    chunk.text = templates.captions(chunk.y, classes)
    return chunk


def given_input(cfg: ConvertConfig) -> Path | str | None:
    """--input as a Path, or as given where a Path would change it: s3:// shards, brace patterns."""
    if cfg.input is None:
        return None
    text = str(cfg.input)
    return text if text.startswith("s3://") or "{" in text else Path(cfg.input)


def read_from(cfg: ConvertConfig, source) -> list[str]:
    """The resolved paths the conversion reads, which the output must stay apart from: the input, and each folder
    its files are in (a folder reached through a symbolic link lies elsewhere). Shards named by a pattern or in
    object storage are read into a temporary folder: nothing of the input lies beside the output."""
    if cfg.input is None or isinstance(given_input(cfg), str):
        return []
    folders = {os.path.dirname(p) for p, _ in getattr(source, "items", ())}
    return sorted({os.path.realpath(cfg.input)} | {os.path.realpath(f) for f in folders})


def chunk_size(cfg: ConvertConfig, source, spec: AudioSpec) -> int:
    """Samples per chunk: CHUNK, fewer where samples are large (the size of images without --size is not known before
    decoding), and with --vae a whole number of autoencoder batches, so that only the last batch can be short: under
    torchrun a whole number for every rank, as the ranks share each chunk's batches out in turns (320 images of 256
    px, 5 batches of 64, kept one of 4 ranks at 2 batches a chunk while the others waited with 1: 2.7x one GPU)."""
    sample_bytes = 4 * spec.channels * spec.num_samples if source.kind == "audio" else 3 * (cfg.size or 0) ** 2
    n = min(CHUNK, CHUNK_BYTES // max(1, sample_bytes))
    if not cfg.vae:
        return max(1, n)
    turn = cfg.batch_size * ranks.world()[1]
    return max(turn, n // turn * turn)


def usable(chunks: Iterator[Chunk], limit: int | None, skipped: list) -> Iterator[Chunk]:
    """The non-empty chunks, cut at `limit` samples; the skipped files of every chunk read go to `skipped`."""
    count = 0
    for chunk in chunks:
        skipped += chunk.skipped
        if limit is not None and count + len(chunk) > limit:
            chunk = _head(chunk, limit - count)
        if len(chunk):
            count += len(chunk)
            yield chunk
        if count == limit:
            return


def _head(chunk: Chunk, n: int) -> Chunk:
    names = None if chunk.names is None else chunk.names[:n]
    text = None if chunk.text is None else chunk.text[:n]
    length = None if chunk.length is None else chunk.length[:n]
    return Chunk(chunk.x[:n], chunk.y[:n], length, chunk.skipped, names, text)
