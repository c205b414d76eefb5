"""What `bench loaders` checks and parses before any run starts (lists of values, backends, ranks, devices, the
data's manifest), and the answer it prints after the grid: each refusal a click.BadParameter naming the fix."""

from __future__ import annotations

import os
from pathlib import Path

import click

from common.cli import check_device
from common.text import printable

from .grid.job import BACKEND_NAMES

PINS = {"on": True, "off": False}


def split_list(value: str, param: str, example: str) -> list[str]:
    items = [v.strip() for v in str(value).split(",")]
    if not items or any(not v for v in items):
        raise click.BadParameter(f"{value!r}: expected a comma-separated list, e.g. {example}", param_hint=param)
    return items


def parse_ints(value: str, param: str, example: str, minimum: int) -> tuple[int, ...]:
    items = split_list(value, param, example)
    try:
        out = tuple(int(v) for v in items)
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected whole numbers, e.g. {example}", param_hint=param) from None
    if min(out) < minimum:
        raise click.BadParameter(f"{value!r}: every value must be >= {minimum}, e.g. {example}", param_hint=param)
    return tuple(dict.fromkeys(out))


def parse_backends(value: str) -> tuple[str, ...]:
    if value == "none":  # the model's data-free rate alone (at each --nproc, --batch-size or --global-batch)
        return ()
    items = split_list(value, "--backends", "torch,hdf5,gpu")
    bad = [b for b in items if b not in BACKEND_NAMES]
    if bad:
        raise click.BadParameter(
            f"unknown backend {', '.join(map(repr, bad))}; valid: {', '.join(BACKEND_NAMES)}", param_hint="--backends"
        )
    return tuple(dict.fromkeys(items))


def parse_pins(value: str) -> tuple[bool, ...]:
    items = split_list(value, "--pin-memory", "on,off")
    bad = [p for p in items if p not in PINS]
    if bad:
        raise click.BadParameter(f"{', '.join(map(repr, bad))}: use on, off or on,off", param_hint="--pin-memory")
    return tuple(dict.fromkeys(PINS[p] for p in items))


# s3:// data: the loaders that read object storage (none: the model's data-free rate)
REMOTE_BACKENDS = ("stream", "none")


def check_cpus(cpus: int | None) -> int:
    """The cores this process may use; --cpus asking for more is refused."""
    allowed = len(os.sched_getaffinity(0))
    if cpus and cpus > allowed:
        raise click.BadParameter(
            f"{cpus} cores asked, {allowed} available here; use --cpus {allowed} or fewer", param_hint="--cpus"
        )
    return allowed


def check_ranks(nprocs: tuple[int, ...], cpus, allowed: int, device: str, global_batch, ctx) -> None:
    """Refuse rank counts this host cannot run as asked, before any run starts."""
    if cpus and max(nprocs) * cpus > allowed:
        raise click.BadParameter(
            f"--nproc {max(nprocs)} x --cpus {cpus} = {max(nprocs) * cpus} cores, {allowed} "
            f"available here; use fewer ranks or cores per rank",
            param_hint="--cpus",
        )
    if device.startswith("cuda") and max(nprocs) > 1:
        import torch

        if device != "cuda":
            raise click.BadParameter(
                f"{device}: with --nproc each rank takes its own GPU; use --device cuda", param_hint="--device"
            )
        if max(nprocs) > torch.cuda.device_count():
            raise click.BadParameter(
                f"{max(nprocs)} ranks need as many GPUs, {torch.cuda.device_count()} here", param_hint="--nproc"
            )
    if global_batch is not None:
        if ctx.get_parameter_source("batch_sizes") != click.core.ParameterSource.DEFAULT:
            raise click.BadParameter("give --global-batch or --batch-size, not both", param_hint="--global-batch")
        bad = [n for n in nprocs if global_batch % n]
        if bad:
            raise click.BadParameter(
                f"{global_batch} does not divide by --nproc {', '.join(map(str, bad))}", param_hint="--global-batch"
            )


def read_manifest(data: Path | str) -> dict:
    """The data's manifest, or exit 2 naming what is missing: a directory's, or an s3:// prefix's (dataprep.remote)."""
    from dataprep.remote import RemoteError, is_remote

    from .grid.job import manifest_of

    if not is_remote(data) and not (data / "manifest.json").is_file():
        raise click.BadParameter(f"{data}: no manifest.json; prepare it with `dataprep convert`", param_hint="--data")
    try:
        return manifest_of(data)
    except RemoteError as e:
        raise click.BadParameter(printable(str(e)), param_hint="--data") from None
    except ValueError as e:  # a damaged manifest.json
        raise click.BadParameter(
            f"{data / 'manifest.json'}: not JSON ({e}); prepare it again with `dataprep convert`", param_hint="--data"
        ) from None


def remote_backends(value: str, ctx) -> tuple[str, ...]:
    """s3:// data: the stream backend alone reads object storage, so it is the default, and any other is refused."""
    if ctx.get_parameter_source("backends") == click.core.ParameterSource.DEFAULT:
        return ("stream",)
    if value != "none" and any(b.strip() not in REMOTE_BACKENDS for b in value.split(",")):
        raise click.BadParameter(
            f"{value!r}: s3:// data is read by the stream backend alone; valid: {', '.join(REMOTE_BACKENDS)}",
            param_hint="--backends",
        )
    return parse_backends(value)


def remote_results_dir(location: str) -> Path:
    """Where results for s3://BUCKET/PREFIX go without --out (a bucket holds no results): ./.gpufeed-bench/BUCKET/
    PREFIX, a name that cannot climb out of it."""
    from dataprep.remote import S3Url

    url = S3Url.parse(location)
    parts = [p if p not in (".", "..") else "_" for p in url.prefix.split("/") if p]
    return Path(".gpufeed-bench", url.bucket, *parts)


def present_backends(manifest: dict, backends: tuple[str, ...], ctx) -> tuple[str, ...]:
    """Left at its default, --backends is every backend whose format the data has (the stream shards, say, are
    converted on request only); named backends are kept, and one whose format is missing fails with the fix."""
    if ctx.get_parameter_source("backends") != click.core.ParameterSource.DEFAULT:
        return backends
    from loaders import NEEDS_FORMAT

    formats = manifest.get("formats", {})
    present = tuple(b for b in backends if NEEDS_FORMAT[b] in formats or (b == "gpu" and "files" in formats))
    return present or backends


def check_fits(manifest: dict, batch_sizes: tuple[int, ...], nprocs: tuple[int, ...], global_batch) -> None:
    """Refuse a batch larger than the data gives each rank, before any run starts, with a size that fits."""
    from loaders.errors import too_small

    count = manifest.get("count")
    if not isinstance(count, int):  # a damaged manifest: the runs' loaders name what is wrong with it
        return
    for n, bs in [(k, b) for k in nprocs for b in ((global_batch // k,) if global_batch else batch_sizes)]:
        problem = too_small(count, bs, n)
        if problem:
            raise click.BadParameter(problem, param_hint="--global-batch" if global_batch else "--batch-size")


def answer(results_dir: Path, failed: list[str], as_json: bool) -> None:
    """Report, then the answer in a few lines (or, with --json, the full summary) of a finished grid."""
    import json

    from .records.results import finalize
    from .report.answer import summarize, write_summary
    from .report.tables import write_report

    try:
        write_report(results_dir)
    except ValueError:  # only data-free runs so far (a time limit stopped the grid early): nothing to compare yet
        click.echo("no loader run finished yet, so no report", err=as_json)
        return
    lines, record = summarize(results_dir, finalize(results_dir), failed)
    write_summary(results_dir, record)
    click.echo(json.dumps(record, indent=1, default=str) if as_json else "\n".join(printable(x) for x in lines))


def pick_device(device: str | None) -> str:
    import torch

    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    check_device(device)
    return device
