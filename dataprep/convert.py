"""`dataprep convert`: one pass over a source feeding every requested format writer, then a manifest.

Everything is written under `.<name>.tmp-<pid>` beside the output and renamed at the end, so an interrupted or
failed conversion never leaves a directory that looks complete, and a rerun starts clean."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from . import __version__
from .digest import SampleDigest, file_sha256
from .formats import expand, writer_class
from .formats.base import DatasetMeta
from .manifest import NAME, write_json_atomic
from .sources import AudioSpec, build_source
from .sources.images import RESIZE_METHOD

CHUNK = 1024  # samples per chunk: bounded memory (3 MiB of CIFAR, 64 MiB of 1 s audio) and cheap per-chunk overhead


class ConvertError(Exception):
    pass


@dataclass
class ConvertConfig:
    output: Path
    input: Path | None = None
    formats: tuple[str, ...] = ("all",)
    source: str = "auto"  # detected from the layout; see dataprep.sources.SOURCES
    split: str = "train"
    limit: int | None = None  # first N usable samples; the size of the synthetic sets
    workers: int = len(os.sched_getaffinity(0))  # processes decoding, encoding and writing FFCV: the cores we may use
    on_bad_file: str = "error"  # or "skip": leave bad samples out and list them in the manifest
    sample_rate: int = 16000
    clip_seconds: float = 1.024  # 16384 samples at 16 kHz: 64 STFT hops of 256
    channels: int = 1
    size: int | None = None  # images: shorter side to size, centre crop size x size (see dataprep.sources.images)
    progress: bool = True
    overwrite: bool = False
    command: str | None = None  # recorded in the manifest; defaults to sys.argv


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def _remove_stale(out: Path) -> None:
    """Delete what a killed conversion into `out` left behind (SIGKILL skips our cleanup); live ones are kept."""
    for leftover in out.parent.glob(f".{out.name}.*-*"):
        kind, _, pid = leftover.name.rpartition("-")
        if kind in (f".{out.name}.tmp", f".{out.name}.old") and pid.isdigit() and not _pid_alive(int(pid)):
            shutil.rmtree(leftover, ignore_errors=True)


def _prepare_output(out: Path, overwrite: bool) -> Path:
    if out.exists() and not overwrite and (out.is_file() or any(out.iterdir())):
        raise ConvertError(f"{out}: already exists and is not empty; pass --overwrite to replace it")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale(out)
        tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    except OSError as e:
        raise ConvertError(f"{out}: cannot write the output ({e.strerror or e})") from None
    return tmp


def _publish(tmp: Path, out: Path) -> None:
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    if out.exists():
        os.replace(out, old)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)


def convert(cfg: ConvertConfig) -> dict:
    """Convert `cfg.input` into every format in `cfg.formats`; return the manifest."""
    from tqdm import tqdm

    if cfg.on_bad_file not in ("error", "skip"):
        raise ConvertError(f"on_bad_file must be 'error' or 'skip', not {cfg.on_bad_file!r}")
    if cfg.size is not None and cfg.size < 1:
        raise ConvertError(f"size must be a positive number of pixels, not {cfg.size}")
    names = expand(cfg.formats)
    spec = AudioSpec(cfg.sample_rate, cfg.clip_seconds, cfg.channels)
    source = build_source(
        cfg.source, cfg.input and Path(cfg.input), split=cfg.split, limit=cfg.limit, audio=spec, size=cfg.size
    )
    out = Path(cfg.output)
    tmp = _prepare_output(out, cfg.overwrite)
    writers, digest, skipped, meta = {}, SampleDigest(), [], None
    total = len(source) if cfg.limit is None else min(cfg.limit, len(source))
    try:
        with tqdm(total=total, unit="sample", desc="convert", disable=not cfg.progress, file=sys.stderr) as bar:
            for chunk in source.chunks(CHUNK, cfg.on_bad_file, cfg.workers):
                skipped += chunk.skipped
                if cfg.limit is not None and digest.count + len(chunk) > cfg.limit:
                    chunk = _head(chunk, cfg.limit - digest.count)
                if len(chunk) == 0:
                    continue
                if meta is None:
                    meta = _meta(source, chunk, spec)
                    writers = {n: writer_class(n)(tmp, meta, cfg.workers, cfg.progress) for n in names}
                for w in writers.values():
                    w.write(chunk)
                digest.update(chunk)
                bar.update(len(chunk))
                if digest.count == cfg.limit:
                    break
        if meta is None:
            raise ConvertError(f"{cfg.input or cfg.source}: no usable samples ({len(skipped)} skipped)")
        formats = {n: {"files": _describe_files(tmp, w.finish())} for n, w in writers.items()}
        manifest = _manifest(cfg, source, meta, spec, digest, formats, skipped)
        write_json_atomic(tmp / NAME, manifest)
        _publish(tmp, out)
        return manifest
    except BaseException:
        for w in writers.values():
            w.abort()
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _head(chunk, n: int):
    from .sources.base import Chunk

    return Chunk(chunk.x[:n], chunk.y[:n], None if chunk.length is None else chunk.length[:n], chunk.skipped)


def _meta(source, chunk, spec: AudioSpec) -> DatasetMeta:
    rate = spec.sample_rate if source.kind == "audio" else None
    return DatasetMeta(source.kind, tuple(chunk.x.shape[1:]), str(chunk.x.dtype), list(source.classes), rate)


def _describe_files(root: Path, rel_paths: list[Path]) -> list[dict]:
    return [{"path": str(p), "bytes": (root / p).stat().st_size, "sha256": file_sha256(root / p)} for p in rel_paths]


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
        "formats": formats,
        "skipped": skipped,
    }
