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

from .cli_checks import (
    answer,
    check_fits,
    check_ranks,
    parse_backends,
    parse_ints,
    parse_pins,
    pick_device,
    present_backends,
    read_manifest,
    remote_backends,
    remote_results_dir,
)
from .grid.job import BACKEND_NAMES, MODEL_CHOICES
from .soak.command import soak_cmd  # light: click and psutil; matplotlib only when plotting

DATA = click.option(
    "--data",
    required=True,
    callback=data_location,
    help="A directory written by `dataprep convert`, or s3://BUCKET/PREFIX (the stream backend alone reads it; "
    "AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY reach the store).",
)


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
    backends = remote_backends(backends, click.get_current_context()) if remote else parse_backends(backends)
    manifest = read_manifest(data)
    check_vae_option(options["vae"])
    device = pick_device(device)
    allowed = len(os.sched_getaffinity(0))
    if cpus and cpus > allowed:
        raise click.BadParameter(
            f"{cpus} cores asked, {allowed} available here; use --cpus {allowed} or fewer", param_hint="--cpus"
        )
    nprocs = parse_ints(nprocs, "--nproc", "1,2,4,8", 1)
    check_ranks(nprocs, cpus, allowed, device, options["global_batch"], click.get_current_context())
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
    batch_sizes = parse_ints(batch_sizes or (str(cpu_batch) if cpu else "128"), "--batch-size", "128,512", 1)
    cores = cpus or allowed
    workers = workers or (",".join(map(str, dict.fromkeys((0, max(1, cores // 2), cores)))) if cpu else "0,4,8")
    cfg = GridConfig(
        data=data,
        out=out or (remote_results_dir(data) if remote else default_results_dir(data)),
        backends=backends if remote else present_backends(manifest, backends, click.get_current_context()),
        workers=parse_ints(workers, "--workers", "0,4,8", 0),
        pin_memory=parse_pins(pins),
        batch_sizes=batch_sizes,
        device=device,
        cpus=cpus,
        nproc=nprocs,
        progress=not no_progress,
        time_limit_s=None if time_limit_min is None else 60 * time_limit_min,
        **options,
    )
    check_fits(manifest, cfg.batch_sizes, nprocs, options["global_batch"])
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
    answer(cfg.out, outcome.failed, as_json)
    if outcome.failed:
        raise click.ClickException(
            f"failed: {', '.join(outcome.failed)} (errors in their JSON and grid.log); the "
            "answer above is from the runs that finished"
        )


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

    device = pick_device(device)
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
