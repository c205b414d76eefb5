"""The output side of `dataprep convert`: every sample through every format writer in one pass (the CPU-heavy
encoding in worker processes, the sample digest in a thread beside it), then every writer finished and each file it
wrote described by size and sha256."""

from __future__ import annotations

import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

from .digest import SampleDigest, file_sha256
from .formats.base import DatasetMeta
from .parallel import ordered_map
from .sources import Chunk
from .timings import Timings

ENCODE_BYTES = 1 << 20  # samples per encoding task: ~1 MiB, so 4 tasks per worker in flight stay small


def write_all(
    writers: dict, chunks: Iterator[Chunk], meta: DatasetMeta, digest: SampleDigest, workers: int, times: Timings, bar
) -> None:
    """Every sample to every writer, in order; what can run in worker processes (PNG files, tar records) does, and
    the sample digest runs in a thread beside the writes (hashlib releases the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    encoders = {n: e for n, w in writers.items() if (e := w.encoder()) is not None}
    blocks = _blocks(chunks, meta)
    with ThreadPoolExecutor(1, thread_name_prefix="digest") as hashing:  # one thread: the chunks are hashed in order
        hashed = []
        for (chunk, _), (encoded, cpu) in ordered_map(partial(_encode, encoders), blocks, workers if encoders else 1):
            hashed.append(hashing.submit(_timed, times, "sample digest (a thread)", digest.update, chunk))
            for n, w in writers.items():
                with times.timed(f"{n}: write"):
                    w.write(chunk, encoded.get(n))
                if n in cpu:
                    times.add(f"{n}: encode (CPU-s over the workers)", cpu[n], "encoding processes", "cpu")
            bar.update(len(chunk))
        for done in hashed:
            done.result()  # an error in the digest is raised here


def finish_all(writers: dict, root: Path, workers: int, times: Timings) -> dict:
    """Every writer finished (FFCV's writes its .beton now), then every file it wrote described and hashed."""
    files = {}
    for n, w in writers.items():
        with times.timed(f"{n}: finish"):
            files[n] = w.finish()
        for stage, seconds in w.timings.items():
            times.add(stage, seconds, f"{n}'s helper process")
    with times.timed("sha256 of the output files (threads)"):
        return {n: {"files": describe_files(root, f, workers)} for n, f in files.items()}


def caption_cache(cfg, encoder, root: Path | None, first: Chunk | None = None, identity=None):
    """The writer of `text/` (dataprep.textcache), for samples that have captions (`first` None: listed already);
    `root` None: a rank other than 0 under torchrun, which encodes its share and writes nothing. `identity`: the
    encoder's hash, where the conversion started it."""
    from .convert_config import ConvertError
    from .textcache_write import TextCacheWriter

    if first is not None and first.text is None:
        raise ConvertError(
            f"{cfg.input or cfg.source}: no captions to encode with --text-encoder; give the samples caption files "
            "or metadata, or pass --caption-template"
        )
    return TextCacheWriter(root, encoder, cfg.text_dtype, cfg.batch_size, identity)


def finish_cache(cache, root: Path, workers: int, times: Timings) -> dict:
    """The manifest's "text" entry: the encoder and the table, and its files described."""
    with times.timed("text: finish"):
        files, entry = cache.finish()
    times.add("text: encode the distinct captions", cache.seconds)
    if (graphs := getattr(cache.encoder, "graphs", None)) is not None:  # started with the encoder, on a thread
        times.add("text: eager warm-up (a thread)", graphs.warm_s)
    return entry | {"files": describe_files(root, files, workers)}


def describe_files(root: Path, entries: list[Path | dict], workers: int) -> list[dict]:
    """{"path", "bytes", "sha256"} per file; hashed in threads (hashlib releases the GIL on large buffers)."""
    from concurrent.futures import ThreadPoolExecutor

    def describe(entry: Path) -> dict:
        return {"path": str(entry), "bytes": (root / entry).stat().st_size, "sha256": file_sha256(root / entry)}

    paths = [e for e in entries if not isinstance(e, dict)]
    with ThreadPoolExecutor(max(1, workers)) as pool:
        described = dict(zip(paths, pool.map(describe, paths)))
    return [e if isinstance(e, dict) else described[e] for e in entries]


def _timed(times: Timings, stage: str, fn, *args) -> None:
    with times.timed(stage):
        fn(*args)


def _blocks(chunks: Iterator[Chunk], meta: DatasetMeta) -> Iterator[tuple[Chunk, int]]:
    """(samples, index of the first) in pieces of about ENCODE_BYTES, the unit of work of the encoding processes."""
    per_block = max(1, min(256, ENCODE_BYTES // meta.record_bytes))
    start = 0
    for chunk in chunks:
        for i in range(0, len(chunk), per_block):
            part = _slice(chunk, i, i + per_block)
            yield part, start
            start += len(part)


def _encode(encoders: dict, block: tuple[Chunk, int]) -> tuple[dict, dict]:
    """Each encoder's result for the block, and the CPU seconds each took (in the worker process)."""
    chunk, start = block
    results, cpu = {}, {}
    for name, fn in encoders.items():
        t0 = time.process_time()
        results[name] = fn(chunk, start)
        cpu[name] = time.process_time() - t0
    return results, cpu


def _slice(chunk: Chunk, a: int, b: int) -> Chunk:
    text = None if chunk.text is None else chunk.text[a:b]
    return Chunk(chunk.x[a:b], chunk.y[a:b], None if chunk.length is None else chunk.length[a:b], text=text)
