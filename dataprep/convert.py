"""`dataprep convert`: one pass over a source feeding every requested format writer, then a manifest.

Everything is written under `.<name>.tmp-<pid>` beside the output and renamed at the end (dataprep.workdir), so an
interrupted or failed conversion never leaves a directory that looks complete, and a rerun starts clean."""

from __future__ import annotations

import errno
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from functools import partial
from itertools import chain
from pathlib import Path

from . import __version__, ranks
from .digest import SampleDigest, file_sha256
from .fields import field_digests
from .formats import expand, writer_class
from .formats.base import DatasetMeta, FormatWriter
from .manifest import NAME, write_json_atomic
from .parallel import cores_per_rank, ordered_map
from .remote import is_remote
from .sources import AudioSpec, Chunk, build_source
from .sources.images import RESIZE_METHOD
from .timings import Timings
from .workdir import Workdir

ENCODE_BYTES = 1 << 20  # samples per encoding task: ~1 MiB, so 4 tasks per worker in flight stay small
CHUNK = 1024  # samples per chunk at most: cheap per-chunk overhead (3 MiB of CIFAR, 64 MiB of 1 s audio)
CHUNK_BYTES = 64 << 20  # and at most this much decoded data: 10.24 s clips are 640 KiB, 256 px images 192 KiB each


FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)  # the disk, a file-size limit (ulimit -f) or a quota is full


class ConvertError(Exception):
    pass


@dataclass
class ConvertConfig:
    output: Path | str  # a directory, or s3://BUCKET/PREFIX (converted locally, then uploaded)
    input: Path | None = None
    formats: tuple[str, ...] = ("all",)
    source: str = "auto"  # detected from the layout; see dataprep.sources.SOURCES
    split: str = "train"
    limit: int | None = None  # first N usable samples; the size of the synthetic sets
    workers: int = field(default_factory=cores_per_rank)  # decoding, encoding, FFCV writer processes: our cores
    on_bad_file: str = "error"  # or "skip": leave bad samples out and list them in the manifest
    sample_rate: int = 16000
    clip_seconds: float = 1.024  # 16384 samples at 16 kHz: 64 STFT hops of 256
    channels: int = 1
    size: int | None = None  # images: shorter side to size, centre crop size x size (see dataprep.sources.images)
    progress: bool = True
    overwrite: bool = False
    timings: bool = False  # print where the time went (the manifest keeps it either way)
    command: str | None = None  # recorded in the manifest; defaults to sys.argv
    # latents (dataprep.latents): encode every sample once with this AutoencoderKL (a directory or a hub id)
    vae: str | None = None
    batch_size: int = 64  # samples per autoencoder batch: an SD-sized encoder at 256 px fits in a few GiB at 64
    device: str | None = None  # where the autoencoder runs; None: cuda when there is one
    vae_precision: str = "bf16"  # bf16 autocast on a GPU (the encoder's fast path); always fp32 on the CPU
    compile: bool = False  # torch.compile the encoder: faster after half a minute of compiling (finding 6)


def convert(cfg: ConvertConfig) -> dict:
    """Convert `cfg.input` into every format in `cfg.formats`; return the manifest (its "timings" say where the
    time went)."""
    with _ranks_group(cfg):
        if is_remote(cfg.output):
            return _convert_to_remote(cfg)
        return _convert(cfg)


def _convert_to_remote(cfg: ConvertConfig) -> dict:
    """--output s3://BUCKET/PREFIX: convert into a local staging folder (the system's temporary folder, or
    $GPUFEED_STAGE), upload it with the manifest last, then remove it. The bucket and an existing dataset are checked
    first, so a wrong target fails before minutes of conversion."""
    import shutil
    import tempfile
    from dataclasses import replace

    from .remote import S3Url, check_target, upload_dir

    url = S3Url.parse(cfg.output)
    if _rank() == 0:
        check_target(url, cfg.overwrite)
    stage = Path(tempfile.mkdtemp(prefix="gpufeed-upload-", dir=os.environ.get("GPUFEED_STAGE")))
    try:
        command = cfg.command or " ".join([Path(sys.argv[0]).name] + sys.argv[1:])
        local = replace(cfg, output=stage / "dataset", command=command)
        manifest = _convert(local)
        if manifest:  # a rank other than 0 under torchrun encoded its share and wrote nothing
            upload_dir(stage / "dataset", url, cfg.overwrite, cfg.progress)
        return manifest
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _convert(cfg: ConvertConfig) -> dict:
    from tqdm import tqdm

    t0, cpu0 = time.perf_counter(), time.process_time()  # process_time: user and kernel
    if cfg.on_bad_file not in ("error", "skip"):
        raise ConvertError(f"on_bad_file must be 'error' or 'skip', not {cfg.on_bad_file!r}")
    if cfg.size is not None and cfg.size < 1:
        raise ConvertError(f"size must be a positive number of pixels, not {cfg.size}")
    names = expand(cfg.formats)
    spec = AudioSpec(cfg.sample_rate, cfg.clip_seconds, cfg.channels)
    times = Timings()
    vae = _load_vae(cfg, times) if cfg.vae else None  # first: a wrong --vae fails in seconds, not after the decoding
    if vae is not None and _rank() > 0:
        return _encode_share(cfg, spec, vae)
    early = {n: writer_class(n).start_early() for n in names}  # FFCV's import runs while the input is listed and read
    writers, digest, skipped, work = {}, SampleDigest(), [], None
    streams: list = []  # the generators feeding the writers, closed on a failure (which stops their workers now)
    try:
        with times.timed("list the input"):
            source = build_source(cfg.source, _input(cfg), split=cfg.split, limit=cfg.limit, audio=spec, size=cfg.size)
        work = Workdir(Path(cfg.output), cfg.overwrite, _read_from(cfg, source))
        for line in work.removed:
            print(line, file=sys.stderr)
        tmp = work.tmp
        total = len(source) if cfg.limit is None else min(cfg.limit, len(source))
        with tqdm(total=total, unit="sample", desc="convert", disable=not cfg.progress, file=sys.stderr) as bar:
            decoded = source.chunks(_chunk_size(cfg, source, spec), cfg.on_bad_file, cfg.workers)
            stream = _usable(decoded, cfg.limit, skipped)
            streams += [decoded, stream]
            with times.timed("first samples (workers start)"):
                first = next(stream, None)
            if first is None:
                raise ConvertError(f"{cfg.input or cfg.source}: no usable samples ({len(skipped)} skipped)")
            encoder = None
            if vae is not None:
                encoder = _encoder(cfg, vae, source.kind, first, spec)
                stream = encoder.stream(chain([first], stream))
                streams.append(stream)
                with times.timed("first samples encoded"):
                    first = next(stream)
            meta = _meta(source, first, spec, encoder)
            writers = {n: writer_class(n)(tmp, meta, cfg.workers, cfg.progress, early.pop(n)) for n in names}
            with times.timed("every sample through the writers"):  # the part not in the stages below waited on workers
                _write_all(writers, chain([first], stream), meta, digest, cfg.workers, times, bar)
        if encoder is not None:  # the first chunk apart: it holds the compiling, the rest is the encoder's pace
            (_, first_s, _), *rest = encoder.chunks
            times.add("encode: the first chunk's result (a thread)", first_s)
            times.add("encode: the first result to the last (a thread)", sum(s for _, s, _ in rest))
            # near the line above: the GPU was the limit; far below: the host was late queuing work or taking results
            times.add("encode: waiting for the GPU (a thread)", sum(w for *_, w in rest))
        if hasattr(source, "decode_cpu_s"):
            times.add("decode (CPU-s over the workers)", source.decode_cpu_s, "decoding processes", "cpu")
        formats = _finish_all(writers, tmp, cfg.workers, times)
        manifest = _manifest(cfg, source, meta, spec, digest, formats, skipped)
        if encoder is not None:
            manifest |= {"audio": None, "latent": encoder.describe()}
        wall, cpu = round(time.perf_counter() - t0, 2), round(time.process_time() - cpu0, 2)
        manifest["timings"] = {"wall_s": wall, "cpu_s": cpu, "workers": cfg.workers, "stages": times.as_dict()}
        if encoder is not None:
            manifest["timings"]["encoded_per_s"] = encoder.pace()
        manifest["digest"]["fields"] = field_digests(manifest)  # last: of the values as written
        write_json_atomic(tmp / NAME, manifest)
        work.publish()
        if cfg.timings:
            print(times.table(wall, cpu), file=sys.stderr)
            if encoder is not None and encoder.pace():
                print(f"encoded {encoder.pace():,.0f} samples/s after the first chunk", file=sys.stderr)
        return manifest
    except BaseException as e:
        for stream in reversed(streams):  # the encoder's thread first, then the decoding processes
            _close(stream)
        if work is not None:
            work.empty()  # first: a library that flushes on close (HDF5) needs room even after the disk filled up
        for w in [*writers.values(), *(h for h in early.values() if h is not None)]:
            try:
                w.abort() if isinstance(w, FormatWriter) else w.close()
            except Exception:  # the first error is the one to report; nothing written here is kept anyway
                pass
        if work is not None:
            work.discard()
        if isinstance(e, OSError) and e.errno in FULL and work is not None:
            raise ConvertError(
                f"{work.out}: {os.strerror(e.errno)} while writing the output; free space or choose another --output "
                "(nothing was published, the temporary output is removed)"
            ) from None
        raise


def _close(stream) -> None:
    try:
        stream.close()
    except Exception:  # the error being handled is the one to report
        pass


def _write_all(
    writers: dict, chunks: Iterator[Chunk], meta: DatasetMeta, digest: SampleDigest, workers: int, times: Timings, bar
) -> None:
    """Every sample to every writer, in order; what can run in worker processes (PNG files, tar records) does, and
    the sample digest runs in a thread beside the writes (hashlib releases the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    encoders = {n: w.encoder() for n, w in writers.items() if w.encoder() is not None}
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


def _finish_all(writers: dict, root: Path, workers: int, times: Timings) -> dict:
    """Every writer finished (FFCV's writes its .beton now), then every file it wrote described and hashed."""
    files = {}
    for n, w in writers.items():
        with times.timed(f"{n}: finish"):
            files[n] = w.finish()
        for stage, seconds in w.timings.items():
            times.add(stage, seconds, f"{n}'s helper process")
    with times.timed("sha256 of the output files (threads)"):
        return {n: {"files": _describe_files(root, f, workers)} for n, f in files.items()}


def _timed(times: Timings, stage: str, fn, *args) -> None:
    with times.timed(stage):
        fn(*args)


def _read_from(cfg: ConvertConfig, source) -> list[str]:
    """The resolved paths the conversion reads, which the output must stay apart from: the input, and each folder
    its files are in (a folder reached through a symbolic link lies elsewhere). Shards named by a pattern or in
    object storage are read into a temporary folder: nothing of the input lies beside the output."""
    if cfg.input is None or isinstance(_input(cfg), str):
        return []
    folders = {os.path.dirname(p) for p, _ in getattr(source, "items", ())}
    return sorted({os.path.realpath(cfg.input)} | {os.path.realpath(f) for f in folders})


def _chunk_size(cfg: ConvertConfig, source, spec: AudioSpec) -> int:
    """Samples per chunk: CHUNK, fewer where samples are large (the size of images without --size is not known before
    decoding), and with --vae a whole number of autoencoder batches, so that only the last batch can be short."""
    sample_bytes = 4 * spec.channels * spec.num_samples if source.kind == "audio" else 3 * (cfg.size or 0) ** 2
    n = min(CHUNK, CHUNK_BYTES // max(1, sample_bytes))
    return max(cfg.batch_size, n // cfg.batch_size * cfg.batch_size) if cfg.vae else max(1, n)


def _input(cfg: ConvertConfig):
    """--input as a Path, or as given where a Path would change it: s3:// shards, brace patterns."""
    if cfg.input is None:
        return None
    text = str(cfg.input)
    return text if text.startswith("s3://") or "{" in text else Path(cfg.input)


def _usable(chunks: Iterator[Chunk], limit: int | None, skipped: list) -> Iterator[Chunk]:
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


def _head(chunk: Chunk, n: int) -> Chunk:
    names = None if chunk.names is None else chunk.names[:n]
    text = None if chunk.text is None else chunk.text[:n]
    length = None if chunk.length is None else chunk.length[:n]
    return Chunk(chunk.x[:n], chunk.y[:n], length, chunk.skipped, names, text)


def _meta(source, chunk, spec: AudioSpec, encoder=None) -> DatasetMeta:
    kind = "latent" if encoder is not None else source.kind
    rate = spec.sample_rate if kind == "audio" else None
    return DatasetMeta(kind, tuple(chunk.x.shape[1:]), str(chunk.x.dtype), list(source.classes), rate)


def _device(cfg: ConvertConfig) -> str:
    import torch

    return cfg.device or ("cuda" if torch.cuda.is_available() else "cpu")


def _rank() -> int:
    return ranks.world()[0]


def _rank_device(cfg: ConvertConfig) -> str:
    return ranks.rank_device(_device(cfg))


@contextmanager
def _ranks_group(cfg: ConvertConfig) -> Iterator[None]:
    """Under torchrun the ranks encode in turns (--vae): they join one process group for the conversion, each rank on
    its own GPU, and leave it at its end, as a group left to the interpreter's shutdown can abort the rank there (gloo:
    "terminate called without an active exception"). A rank that fails ends every rank promptly (dataprep.ranks)."""
    if cfg.vae is None or ranks.world()[1] == 1:
        yield
        return
    import torch

    if torch.distributed.is_initialized():  # a group the caller made is the caller's to leave
        device = _rank_device(cfg)
        if device.startswith("cuda"):
            torch.cuda.set_device(device)
        yield
        return
    watch = ranks.join(_rank_device(cfg))
    try:
        yield
    except BaseException as e:
        ranks.leave(watch, e)
        raise
    ranks.leave(watch)


def _load_vae(cfg: ConvertConfig, times: Timings):
    """The autoencoder on this process's device (under torchrun, the rank's GPU)."""
    from .latents import load_vae

    with times.timed("load the autoencoder"):
        return load_vae(cfg.vae, _rank_device(cfg))


def _encoder(cfg: ConvertConfig, vae, kind: str, first: Chunk, spec: AudioSpec):
    from .latents.encode import LatentEncoder

    return LatentEncoder(
        vae,
        kind,
        tuple(first.x.shape[1:]),
        spec,
        batch_size=cfg.batch_size,
        precision=cfg.vae_precision,
        compile=cfg.compile,
    )


def _encode_share(cfg: ConvertConfig, spec: AudioSpec, vae) -> dict:
    """A rank other than 0 under torchrun: read the same input, encode this rank's batches, write nothing (rank 0
    gathers every batch and writes the one output)."""
    source = build_source(cfg.source, _input(cfg), split=cfg.split, limit=cfg.limit, audio=spec, size=cfg.size)
    stream = _usable(source.chunks(_chunk_size(cfg, source, spec), cfg.on_bad_file, cfg.workers), cfg.limit, [])
    first = next(stream, None)
    if first is None:
        return {}
    encoder = _encoder(cfg, vae, source.kind, first, spec)
    encoded = encoder.stream(chain([first], stream))
    try:
        for _ in encoded:
            pass
    finally:  # on an error too: the decoding processes stop now, not at the interpreter's shutdown
        encoded.close()
        stream.close()
    return {}


def _describe_files(root: Path, entries: list[Path | dict], workers: int) -> list[dict]:
    """{"path", "bytes", "sha256"} per file; hashed in threads (hashlib releases the GIL on large buffers)."""
    from concurrent.futures import ThreadPoolExecutor

    def describe(entry: Path) -> dict:
        return {"path": str(entry), "bytes": (root / entry).stat().st_size, "sha256": file_sha256(root / entry)}

    paths = [e for e in entries if not isinstance(e, dict)]
    with ThreadPoolExecutor(max(1, workers)) as pool:
        described = dict(zip(paths, pool.map(describe, paths)))
    return [e if isinstance(e, dict) else described[e] for e in entries]


def _schema(meta: DatasetMeta, source) -> dict:
    """What one sample holds; `txt` (a caption) only where the source had captions, kept by the stream format alone."""
    schema = {"x": f"{meta.dtype} {list(meta.sample_shape)}", "y": "int64 index into classes"}
    if meta.kind == "audio":
        schema["length"] = "int64 valid samples before the zero padding"
    if getattr(source, "captions", False):
        schema["txt"] = "utf-8 caption (stored in the stream format's shards only)"
    return schema


def _manifest(cfg, source, meta, spec, digest, formats, skipped) -> dict:
    return {
        "gpufeed_version": __version__,
        "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": cfg.command or " ".join([Path(sys.argv[0]).name] + sys.argv[1:]),
        "source": {"kind": source.name, "path": source.path, "split": cfg.split},
        "kind": meta.kind,
        "sample_shape": list(meta.sample_shape),
        "dtype": meta.dtype,
        "count": digest.count,
        "classes": meta.classes,
        "audio": asdict(spec) | {"num_samples": spec.num_samples} if meta.kind == "audio" else None,
        "resize": None if cfg.size is None else {"size": cfg.size, "method": RESIZE_METHOD},
        "digest": digest.result(),
        "schema": _schema(meta, source),
        "formats": formats,
        "skipped": skipped,
    }
