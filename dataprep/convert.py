"""`dataprep convert`: one pass over a source feeding every requested format writer, then a manifest.

Everything is written under `.<name>.tmp-<pid>` beside the output and renamed at the end (dataprep.workdir), so an
interrupted or failed conversion never leaves a directory that looks complete, and a rerun starts clean. This module
runs one conversion from end to end; its parts read the input (convert_input), encode latents (convert_latents),
feed and finish the writers (convert_write) and describe the output (convert_manifest)."""

from __future__ import annotations

import errno
import os
import sys
import time
from itertools import chain
from pathlib import Path

from common import ranks
from common.atomic import write_json

from .convert_config import ConvertConfig, ConvertError
from .convert_input import chunk_size, listed_captions, open_source, read_from, usable, with_templates
from .convert_latents import (
    add_encoder_times,
    decoded_line,
    encode_share,
    latent_encoder,
    load_autoencoder,
    load_caption_encoder,
    ranks_group,
    share_decoding,
    start_device,
)
from .convert_manifest import build_manifest, dataset_meta, recorded_command
from .convert_write import caption_cache, finish_all, finish_cache, write_all
from .digest import SampleDigest
from .fields import field_digests
from .formats import expand, require_installed, writer_class
from .formats.base import FormatWriter
from .manifest import NAME
from .remote import is_remote
from .sources import AudioSpec
from .timings import Timings, since_process_start
from .workdir import Workdir

FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)  # the disk, a file-size limit (ulimit -f) or a quota is full


def convert(cfg: ConvertConfig) -> dict:
    """Convert `cfg.input` into every format in `cfg.formats`; return the manifest (its "timings" say where the
    time went)."""
    times = Timings()
    times.add("start: the interpreter, imports", since_process_start())
    if cfg.vae or cfg.text_encoder:  # seconds in a fresh process, which no later stage would show
        with times.timed("import torch"):
            import torch  # noqa: F401
    with ranks_group(cfg, times):
        if is_remote(cfg.output):
            return _convert_to_remote(cfg, times)
        return _convert(cfg, times)


def _convert_to_remote(cfg: ConvertConfig, times: Timings) -> dict:
    """--output s3://BUCKET/PREFIX: convert into a local staging folder (the system's temporary folder, or
    $GPUFEED_STAGE), upload it with the manifest last, then remove it. The bucket and what the prefix holds are checked
    first (dataprep.remote_write), so a wrong target fails before minutes of conversion."""
    import shutil
    import tempfile
    from dataclasses import replace

    from .remote import S3Url
    from .remote_write import check_target, upload_dir

    url = S3Url.parse(cfg.output)
    if _rank() == 0:
        check_target(url, cfg.overwrite)
    stage = Path(tempfile.mkdtemp(prefix="gpufeed-upload-", dir=os.environ.get("GPUFEED_STAGE")))
    try:
        local = replace(cfg, output=stage / "dataset", command=recorded_command(cfg))
        manifest = _convert(local, times)
        if manifest:  # a rank other than 0 under torchrun encoded its share and wrote nothing
            for line in upload_dir(stage / "dataset", url, cfg.overwrite, cfg.progress):
                print(line, file=sys.stderr)
        return manifest
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _convert(cfg: ConvertConfig, times: Timings) -> dict:
    from tqdm import tqdm

    t0, cpu0 = time.perf_counter(), time.process_time()  # process_time: user and kernel
    if cfg.on_bad_file not in ("error", "skip"):
        raise ConvertError(f"on_bad_file must be 'error' or 'skip', not {cfg.on_bad_file!r}")
    if cfg.size is not None and cfg.size < 1:
        raise ConvertError(f"size must be a positive number of pixels, not {cfg.size}")
    names = expand(cfg.formats)
    require_installed(names)
    spec = AudioSpec(cfg.sample_rate, cfg.clip_seconds, cfg.channels)
    identity = _start_identity(cfg)
    if cfg.vae or cfg.text_encoder:
        start_device(cfg, times)
    vae = load_autoencoder(cfg, times) if cfg.vae else None  # first: a wrong --vae fails in seconds, not after decoding
    text_encoder = load_caption_encoder(cfg, times) if cfg.text_encoder else None
    if (vae is not None or text_encoder is not None) and _rank() > 0:
        return encode_share(cfg, spec, vae, text_encoder)
    early = {n: writer_class(n).start_early() for n in names}  # FFCV's import runs while the input is listed and read
    writers, digest, skipped, work, text_cache = {}, SampleDigest(), [], None, None
    streams: list = []  # the generators feeding the writers, closed on a failure (which stops their workers now)
    try:
        with times.timed("list the input"):
            source = open_source(cfg, spec)
        work = Workdir(Path(cfg.output), cfg.overwrite, read_from(cfg, source))
        for line in work.removed:
            print(line, file=sys.stderr)
        tmp = work.tmp
        total = len(source) if cfg.limit is None else min(cfg.limit, len(source))
        with tqdm(total=total, unit="sample", desc="convert", disable=not cfg.progress, file=sys.stderr) as bar:
            size = chunk_size(cfg, source, spec)
            share_decoding(cfg, source, size)
            decoded = source.chunks(size, cfg.on_bad_file, cfg.workers)
            stream = with_templates(cfg, source, usable(decoded, cfg.limit, skipped))
            streams += [decoded, stream]
            with times.timed("first samples (workers start)"):
                first = next(stream, None)
            if first is None:
                raise ConvertError(f"{cfg.input or cfg.source}: no usable samples ({len(skipped)} skipped)")
            encoder = None
            if vae is not None:
                encoder = latent_encoder(cfg, vae, source.kind, first, spec)
                encoder.total = total
                stream = encoder.stream(chain([first], stream))
                streams.append(stream)
                with times.timed("first samples encoded"):
                    first = next(stream)
            if text_encoder is not None:
                text_cache = caption_cache(cfg, text_encoder, tmp, first, identity)
                if vae is None and (captions := listed_captions(cfg, source)) is not None:
                    text_cache.encode_ahead(captions)  # apart from the samples: see encode_share
                stream = text_cache.stream(chain([first], stream))
                streams.append(stream)
                first = next(stream)
            meta = dataset_meta(source, first, spec, encoder)
            writers = {n: writer_class(n)(tmp, meta, cfg.workers, cfg.progress, early.pop(n)) for n in names}
            with times.timed("every sample through the writers"):  # the part not in the stages below waited on workers
                write_all(writers, chain([first], stream), meta, digest, cfg.workers, times, bar)
        if encoder is not None:
            add_encoder_times(times, encoder)
        if hasattr(source, "decode_cpu_s"):
            times.add("decode (CPU-s over the workers)", source.decode_cpu_s, "decoding processes", "cpu")
        formats = finish_all(writers, tmp, cfg.workers, times)
        manifest = build_manifest(cfg, source, meta, spec, digest, formats, skipped, encoder)
        if text_cache is not None:
            manifest["text"] = finish_cache(text_cache, tmp, cfg.workers, times)
        wall, cpu = round(time.perf_counter() - t0, 2), round(time.process_time() - cpu0, 2)
        manifest["timings"] = {"wall_s": wall, "cpu_s": cpu, "workers": cfg.workers, "stages": times.as_dict()}
        if encoder is not None:
            manifest["timings"]["encoded_per_s"] = encoder.pace()
        manifest["digest"]["fields"] = field_digests(manifest)  # last: of the values as written
        write_json(tmp / NAME, manifest)
        work.publish()
        if cfg.timings:
            print(times.table(wall, cpu), file=sys.stderr)
            if encoder is not None and encoder.pace():
                print(f"encoded {encoder.pace():,.0f} samples/s after the first chunk", file=sys.stderr)
            if encoder is not None and encoder.world > 1 and (line := decoded_line(source)):
                print(line, file=sys.stderr)
        return manifest
    except BaseException as e:
        helpers = [h for h in (*early.values(), text_cache) if h is not None]
        _abandon(streams, work, [*writers.values(), *helpers])
        if isinstance(e, OSError) and e.errno in FULL and work is not None:
            raise ConvertError(
                f"{work.out}: {os.strerror(e.errno)} while writing the output; free space or choose another --output "
                "(nothing was published, the temporary output is removed)"
            ) from None
        raise


def _abandon(streams: list, work: Workdir | None, writers: list) -> None:
    """After a failure: the workers stopped, the writers (and early-started helpers) aborted, the output removed."""
    for stream in reversed(streams):  # the encoder's thread first, then the decoding processes
        _close(stream)
    if work is not None:
        work.empty()  # first: a library that flushes on close (HDF5) needs room even after the disk filled up
    for w in writers:
        try:
            w.abort() if isinstance(w, FormatWriter) else w.close()
        except Exception:  # the first error is the one to report; nothing written here is kept anyway
            pass
    if work is not None:
        work.discard()


def _close(stream) -> None:
    try:
        stream.close()
    except Exception:  # the error being handled is the one to report
        pass


def _start_identity(cfg: ConvertConfig):
    """The text encoder's sha256 for the manifest (rank 0's), from now on beside the imports and the loads: a read of
    its whole folder, seconds for a large one."""
    if not cfg.text_encoder or _rank() > 0:
        return None
    from .textenc.identity import sha256_soon

    return sha256_soon(Path(cfg.text_encoder))


def _rank() -> int:
    return ranks.world()[0]
