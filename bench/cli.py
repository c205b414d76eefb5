"""`bench`: is the GPU waiting for data, and what fixes it? `bench loaders` runs the grid in gpufeed's loop,
`bench watch` measures any training program unchanged, `bench report` draws both."""

from __future__ import annotations

import os
from pathlib import Path

import click

from dataprep.cli_common import check_vae_option, data_location, renamed, take_renamed
from dataprep.remote import is_remote
from dataprep.text import printable
from training.config import GRAD_SYNCS

from .grid.job import BACKEND_NAMES, MODEL_CHOICES
from .soak.command import soak_cmd  # light: click and psutil; matplotlib only when plotting

PINS = {"on": True, "off": False}


def _split(value: str, param: str, example: str) -> list[str]:
    items = [v.strip() for v in str(value).split(",")]
    if not items or any(not v for v in items):
        raise click.BadParameter(f"{value!r}: expected a comma-separated list, e.g. {example}", param_hint=param)
    return items


def _ints(value: str, param: str, example: str, minimum: int) -> tuple[int, ...]:
    items = _split(value, param, example)
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
    items = _split(value, "--backends", "torch,hdf5,gpu")
    bad = [b for b in items if b not in BACKEND_NAMES]
    if bad:
        raise click.BadParameter(
            f"unknown backend {', '.join(map(repr, bad))}; valid: {', '.join(BACKEND_NAMES)}", param_hint="--backends"
        )
    return tuple(dict.fromkeys(items))


def parse_pins(value: str) -> tuple[bool, ...]:
    items = _split(value, "--pin-memory", "on,off")
    bad = [p for p in items if p not in PINS]
    if bad:
        raise click.BadParameter(f"{', '.join(map(repr, bad))}: use on, off or on,off", param_hint="--pin-memory")
    return tuple(dict.fromkeys(PINS[p] for p in items))


DATA = click.option(
    "--data",
    required=True,
    callback=data_location,
    help="A directory written by `dataprep convert`, or s3://BUCKET/PREFIX (the stream backend alone reads it; "
    "AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY reach the store).",
)
# s3:// data: the loaders that read object storage (none: the model's data-free rate)
REMOTE_BACKENDS = ("stream", "none")


@click.group(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
def cli() -> None:
    """Measure GPU starvation: per loader configuration in the real training loop, or in any program, unchanged."""


@cli.command()
@DATA
@click.option(
    "--backends",
    default=",".join(BACKEND_NAMES),
    help="Comma list of loader backends; none: only the model's data-free rate.",
)
@click.option(
    "--workers",
    default=None,
    help="Comma list of worker counts (ignored by gpu; >= 1 for ffcv/dali) "
    "[default: 0,4,8; on a CPU 0, half and all of its cores].",
)
@click.option("--pin-memory", "pins", default="on,off", help="on, off or on,off (CUDA only; torch and hdf5).")
@click.option(
    "--batch-size",
    "batch_sizes",
    default=None,
    help="Comma list of batch sizes [default: 128; 32 on a CPU, as train takes there].",
)
@click.option(
    "--model",
    type=click.Choice(("auto", *MODEL_CHOICES)),
    default="auto",
    help="The preset in the real training loop; auto: the data's preset on a GPU (ddpm_cifar10 for images, "
    "ddpm_audio_mel for audio), tiny on CPU; none: the loader alone, its ceiling against that preset's appetite.",
)
@click.option("--steps", type=click.IntRange(min=2), default=None, help="Measured steps [default: 200; 10 on CPU].")
@click.option(
    "--timing-warmup",
    "warmup",
    type=click.IntRange(min=0),
    default=None,
    help="Steps run first and left out of every figure (start-up, compilation) [default: 20; 2 on CPU].",
)
@renamed("--warmup")
@click.option("--device", default=None, help="cuda, cuda:N or cpu [default: cuda when present].")
@click.option(
    "--cpus",
    type=click.IntRange(min=1),
    default=None,
    help="Pin each run (each rank) to N cores of its own [default: all, shared].",
)
@click.option(
    "--nproc",
    "nprocs",
    default="1",
    help="Comma list of rank counts: each run under torchrun with N "
    "data-parallel ranks, one GPU each; several give a scaling table and plot.",
)
@click.option(
    "--global-batch",
    type=click.IntRange(min=1),
    default=None,
    help="Strong scaling: GLOBAL // N per rank at each --nproc N, instead of --batch-size.",
)
@click.option(
    "--compile/--no-compile",
    default=False,
    help="torch.compile the model (the first configuration saves its kernels to the compile cache, the rest load "
    "them).",
)
@click.option(
    "--precision",
    type=click.Choice(["bf16", "fp16", "fp32"]),
    default=None,
    help="[default: bf16; fp32 on a CPU, as train takes there].",
)
@click.option(
    "--vae",
    default=None,
    help="Pixel or clip data: encode every batch in the step with this AutoencoderKL "
    "(train --vae), the baseline that cached latents replace; the model defaults to dit_b2.",
)
@click.option(
    "--grad-sync",
    type=click.Choice(GRAD_SYNCS),
    default="ddp",
    help="With --nproc: how the ranks average gradients (train --grad-sync).",
)
@click.option("--repeats", type=click.IntRange(min=1), default=1, help="Runs per configuration (>= 2 on a GPU).")
@click.option("--crosscheck", is_flag=True, help="Also one profiled run per configuration: trace vs CUDA events.")
@click.option("--resume", is_flag=True, help="Skip configurations whose JSON is already in --out.")
@click.option(
    "--time-limit",
    "time_limit_min",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Minutes: start no configuration expected to end later (the first always runs); finish with --resume.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds a configuration may run before it is stopped and recorded as failed [default: 10x its estimate, "
    "at least 600].",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Results directory [default: DATA/.gpufeed-bench, where `train --loader fastest` looks; for "
    "s3://BUCKET/PREFIX ./.gpufeed-bench/BUCKET/PREFIX].",
)
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@click.option("--json", "as_json", is_flag=True, help="Print the full summary (OUT/summary.json), not the answer.")
def loaders(
    data: Path | str,
    backends,
    workers,
    pins,
    batch_sizes,
    device,
    cpus,
    out,
    no_progress,
    time_limit_min,
    as_json,
    nprocs,
    **options,
) -> None:
    """Run every configuration of the grid in a fresh process: one JSON each, results.csv, results.md, plots, and
    the answer: does the model starve, and which configuration feeds it."""
    from dataprep.stopping import Stopped
    from training.cpu_defaults import CpuDefaults

    from .fastest.choice import default_results_dir
    from .grid.job import capped, preset_for, runs_in_words
    from .grid.runner import GridConfig, run_grid

    take_renamed(options, "--warmup", "--timing-warmup", "warmup", "bench loaders")
    remote = is_remote(data)
    backends = _remote_backends(backends, click.get_current_context()) if remote else parse_backends(backends)
    manifest = _manifest(data)
    check_vae_option(options["vae"])
    device = _device(device)
    allowed = len(os.sched_getaffinity(0))
    if cpus and cpus > allowed:
        raise click.BadParameter(
            f"{cpus} cores asked, {allowed} available here; use --cpus {allowed} or fewer", param_hint="--cpus"
        )
    nprocs = _ints(nprocs, "--nproc", "1,2,4,8", 1)
    _check_ranks(nprocs, cpus, allowed, device, options["global_batch"], click.get_current_context())
    if options["crosscheck"] and max(nprocs) > 1:
        raise click.BadParameter("the profiler cross-check runs one process; use --nproc 1", param_hint="--crosscheck")
    if options["crosscheck"] and not device.startswith("cuda"):
        raise click.BadParameter(
            "the profiler cross-check needs GPU kernels; use --device cuda", param_hint="--crosscheck"
        )
    cpu = not device.startswith("cuda")  # tiny takes ~1-4 s a step at batch 128 on 2 cores
    options["steps"] = options["steps"] or (10 if cpu else 200)
    options["warmup"] = options["warmup"] if options["warmup"] is not None else (2 if cpu else 20)
    if options["model"] == "auto":
        options["model"] = preset_for(data, device, options["vae"], manifest)
    # on a CPU what `train` takes there (training.cpu_defaults), so that `train --loader fastest` finds these runs
    cpu_batch, cpu_precision = CpuDefaults.batch_size, CpuDefaults.precision
    options["precision"] = options["precision"] or (cpu_precision if cpu else "bf16")
    batch_sizes = _ints(batch_sizes or (str(cpu_batch) if cpu else "128"), "--batch-size", "128,512", 1)
    cores = cpus or allowed
    workers = workers or (",".join(map(str, dict.fromkeys((0, max(1, cores // 2), cores)))) if cpu else "0,4,8")
    cfg = GridConfig(
        data=data,
        out=out or (remote_results_dir(data) if remote else default_results_dir(data)),
        backends=backends if remote else _present(manifest, backends, click.get_current_context()),
        workers=_ints(workers, "--workers", "0,4,8", 0),
        pin_memory=parse_pins(pins),
        batch_sizes=batch_sizes,
        device=device,
        cpus=cpus,
        nproc=nprocs,
        progress=not no_progress,
        time_limit_s=None if time_limit_min is None else 60 * time_limit_min,
        **options,
    )
    _check_fits(manifest, cfg.batch_sizes, nprocs, options["global_batch"])
    note = capped(cfg.backends, cfg.workers, cpus)
    if note:
        click.echo(note, err=True)
    try:
        outcome = run_grid(cfg, echo=lambda line: click.echo(printable(line), err=as_json))  # stdout: the JSON alone
    except (KeyboardInterrupt, Stopped) as e:
        click.echo(printable(f"interrupted: {e.args[0] if e.args else ''}; rerun with --resume to continue"), err=True)
        raise SystemExit(e.exit_code if isinstance(e, Stopped) else 130) from None
    finished = runs_in_words([p.stem for p in outcome.done])
    click.echo(f"{finished} finished, {len(outcome.failed)} failed", err=as_json)
    _answer(cfg.out, outcome.failed, as_json)
    if outcome.failed:
        raise click.ClickException(
            f"failed: {', '.join(outcome.failed)} (errors in their JSON and grid.log); the "
            "answer above is from the runs that finished"
        )


def _check_ranks(nprocs: tuple[int, ...], cpus, allowed: int, device: str, global_batch, ctx) -> None:
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


def _manifest(data: Path | str) -> dict:
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


def _remote_backends(value: str, ctx) -> tuple[str, ...]:
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


def _present(manifest: dict, backends: tuple[str, ...], ctx) -> tuple[str, ...]:
    """Left at its default, --backends is every backend whose format the data has (the stream shards, say, are
    converted on request only); named backends are kept, and one whose format is missing fails with the fix."""
    if ctx.get_parameter_source("backends") != click.core.ParameterSource.DEFAULT:
        return backends
    from loaders import NEEDS_FORMAT

    formats = manifest.get("formats", {})
    present = tuple(b for b in backends if NEEDS_FORMAT[b] in formats or (b == "gpu" and "files" in formats))
    return present or backends


def _check_fits(manifest: dict, batch_sizes: tuple[int, ...], nprocs: tuple[int, ...], global_batch) -> None:
    """Refuse a batch larger than the data gives each rank, before any run starts, with a size that fits."""
    from loaders.errors import too_small

    count = manifest.get("count")
    if not isinstance(count, int):  # a damaged manifest: the runs' loaders name what is wrong with it
        return
    for n, bs in [(k, b) for k in nprocs for b in ((global_batch // k,) if global_batch else batch_sizes)]:
        problem = too_small(count, bs, n)
        if problem:
            raise click.BadParameter(problem, param_hint="--global-batch" if global_batch else "--batch-size")


def _answer(results_dir: Path, failed: list[str], as_json: bool) -> None:
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


def _device(device: str | None) -> str:
    import torch

    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.split(":")[0] not in ("cuda", "cpu"):
        raise click.BadParameter(f"{device!r}: use cuda, cuda:N or cpu", param_hint="--device")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise click.BadParameter("no CUDA device here; pass --device cpu", param_hint="--device")
    return device


@cli.command()
@click.argument("results_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
def report(results_dir: Path) -> None:
    """Write results.md, results.csv and plot-*.png in RESULTS_DIR from its bench JSONs."""
    from .report.tables import write_report

    try:
        click.echo(f"wrote {printable(write_report(results_dir))}")
    except ValueError as e:
        raise click.ClickException(printable(str(e))) from None


@cli.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("gpufeed-watch"),
    help="Where watch.json and the per-rank figures go.",
)
@click.option(
    "--timing-warmup",
    "warmup",
    type=click.IntRange(min=0),
    default=20,
    help="Steps left out of every figure first (compilation, start-up).",
)
@renamed("--warmup")
@click.option("--every", type=click.IntRange(min=0), default=100, help="A progress line every N steps (0: none).")
@click.option(
    "--loader-name",
    default=None,
    help="Measure the loader whose label contains this [default: the one "
    "consumed most]; labels are listed at the end of a run.",
)
@click.option(
    "--data-free", is_flag=True, help="Replay the loader's first batches from memory: the program's own data-free rate."
)
@click.option("--compare", is_flag=True, help="A data-free run, then the real one: the rate as a share of it.")
@click.option("--repeats", type=click.IntRange(min=1), default=1, help="Runs of each mode (their spread is reported).")
@click.option("--replay-batches", type=click.IntRange(min=1), default=8, help="Distinct batches the replay cycles.")
@click.option("--cpus", type=click.IntRange(min=1), default=None, help="Pin the program to N cores [default: all].")
@click.option(
    "--tensorboard",
    is_flag=True,
    help="The progress line's figures as TensorBoard scalars in OUT/tensorboard/ (every --every steps).",
)
@click.option("--json", "as_json", is_flag=True, help="Print watch.json instead of the summary.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def watch(command, out, cpus, as_json, **options) -> None:
    """Run a training program unchanged and measure how long its GPU waits for each batch.

    \b
    bench watch -- python train.py --batch-size 128
    bench watch --compare --repeats 2 -- accelerate launch train.py
    bench watch -- torchrun --nproc_per_node 2 train.py

    The program's exit code is this command's."""
    import json
    import shutil

    from dataprep.stopping import wait_for_the_program

    from .watcher.session import WatchConfig, describe, watch_command

    take_renamed(options, "--warmup", "--timing-warmup", "warmup", "bench watch")
    if options["data_free"] and options["compare"]:
        raise click.BadParameter(
            "--compare already includes a data-free run; pass one of them", param_hint="--data-free"
        )
    allowed = len(os.sched_getaffinity(0))
    if cpus and cpus > allowed:
        raise click.BadParameter(
            f"{cpus} cores asked, {allowed} available here; use --cpus {allowed} or fewer", param_hint="--cpus"
        )
    if options["tensorboard"] and not options["every"]:
        raise click.BadParameter("scalars are written with the progress line: give --every N > 0", param_hint="--every")
    if shutil.which(command[0]) is None:  # also refuses a path to a file that is not executable
        hint = f" (a script? bench watch -- python {command[0]})" if command[0].endswith(".py") else ""
        raise click.BadParameter(f"{command[0]!r} is not a program on PATH{hint}", param_hint="COMMAND")
    cfg = WatchConfig(command=list(command), out=out, cpus=cpus, **options)
    wait_for_the_program()  # a stop signal goes to the program, which decides how long stopping takes
    code, summary = watch_command(cfg, echo=lambda m: click.echo(printable(m, lines=True), err=True))
    described = "\n".join(printable(line) for line in describe(summary, out))
    click.echo(json.dumps(summary, indent=1, default=str) if as_json else described)
    raise SystemExit(128 - code if code < 0 else code)  # killed by signal N: 128 + N, as a shell says


@cli.command()
@DATA
@click.option("--model", type=click.Choice(MODEL_CHOICES[1:]), required=True, help="The preset that will train.")
@click.option("--batch-size", type=click.IntRange(min=1), default=None, help="Per rank [default: 128; 32 on a CPU].")
@click.option(
    "--nproc",
    type=click.IntRange(min=1),
    default=1,
    help="Ranks training will run: their results win, else one process's.",
)
@click.option("--device", default=None, help="cuda, cuda:N or cpu [default: cuda when present].")
@click.option(
    "--precision", type=click.Choice(["bf16", "fp16", "fp32"]), default=None, help="[default: bf16; fp32 on a CPU]."
)
@click.option("--compile/--no-compile", default=False)
@click.option(
    "--results",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where bench results are [default: DATA/.gpufeed-bench].",
)
@click.option("--json", "as_json", is_flag=True, help="Print the choice as JSON (what `train --loader fastest` reads).")
def fastest(
    data: Path, model: str, batch_size: int, nproc: int, device, precision: str, compile: bool, results, as_json
) -> None:
    """The loader configuration `train --loader fastest` takes, and why; a short bench first when there are no
    results for this data, device, model, batch size, precision and compile setting."""
    import contextlib
    import dataclasses
    import json
    import sys

    from dataprep import ranks
    from loaders import LoaderError
    from training.cpu_defaults import CpuDefaults

    from .fastest.choice import choose

    device = _device(device)
    cpu = not device.startswith("cuda")  # what `train` takes on a CPU (training.cpu_defaults)
    batch_size = batch_size or (CpuDefaults.batch_size if cpu else 128)
    precision = precision or (CpuDefaults.precision if cpu else "bf16")
    rank, world, _ = ranks.world()
    watch = None
    if world > 1:  # one of `train --loader fastest`'s children: every rank of the training started one (together.py)
        if world != nproc:
            raise click.BadParameter(f"{world} ranks started this, not {nproc}", param_hint="--nproc")
        watch = ranks.join(ranks.rank_device(device))
    try:
        with contextlib.redirect_stdout(sys.stderr):  # a short bench's progress must not mix with the answer
            c = choose(
                data,
                device=device,
                model=model,
                batch_size=batch_size,
                precision=precision,
                compile=compile,
                results_dir=results,
                nproc=nproc,
            )
    except BaseException as e:
        if watch is not None:
            ranks.leave(watch, e)
        if isinstance(e, (LoaderError, OSError, ValueError)):
            raise click.ClickException(printable(str(e))) from None
        raise
    if watch is not None:
        ranks.leave(watch)
    if as_json:
        click.echo(json.dumps(dataclasses.asdict(c)))
    else:
        pin = ", pin_memory on" if c.pin_memory else ""
        click.echo(printable(f"{c.backend}, {c.workers} workers{pin}: {c.reason}"))


cli.add_command(soak_cmd, name="soak")


def main() -> None:
    from dataprep.stopping import run

    run(cli)
