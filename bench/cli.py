"""`bench`: is the GPU waiting for data, and what fixes it? `bench loaders` runs the grid in gpufeed's loop,
`bench watch` measures any training program unchanged, `bench report` draws both."""

from __future__ import annotations

from pathlib import Path

import click

from common.cli import data_location, device_option, renamed, take_renamed
from common.text import printable

from .cli_checks import answer, check_cpus, pick_device
from .cli_loaders import grid_config, loaders_options, precision_option
from .grid.job import MODEL_CHOICES
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
@loaders_options
def loaders(data: Path | str, as_json: bool, **options) -> None:
    """Run every configuration of the grid in a fresh process: one JSON each, results.csv, results.md, plots, and
    the answer: does the model starve, and which configuration feeds it."""
    from common.stopping import Stopped

    from .grid.job import capped, runs_in_words
    from .grid.runner import run_grid

    cfg = grid_config(data, **options)
    note = capped(cfg.backends, cfg.workers, cfg.cpus)
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

    from common.stopping import wait_for_the_program

    from .watcher.session import WatchConfig, describe, watch_command

    take_renamed(options, "--warmup", "--timing-warmup", "warmup", "bench watch")
    if options["data_free"] and options["compare"]:
        raise click.BadParameter(
            "--compare already includes a data-free run; pass one of them", param_hint="--data-free"
        )
    check_cpus(cpus)
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
@click.option(
    "--model",
    type=click.Choice(("auto", *MODEL_CHOICES[1:])),
    default="auto",
    help="The preset that will train; auto: the data's, as train takes it (tiny or dit_tiny on a CPU).",
)
@click.option("--batch-size", type=click.IntRange(min=1), default=None, help="Per rank [default: 128; 32 on a CPU].")
@click.option(
    "--nproc",
    type=click.IntRange(min=1),
    default=1,
    help="Ranks training will run: their results win, else one process's.",
)
@device_option
@precision_option
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

    from common import ranks
    from loaders import LoaderError
    from training.cpu_defaults import CpuDefaults

    from .fastest.choice import choose
    from .grid.job import preset_for

    device = pick_device(device)
    if model == "auto":
        model = preset_for(data, device)
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
        click.echo(printable(f"{c.backend}, {c.workers} worker{'s' * (c.workers != 1)}{pin}: {c.reason}"))


cli.add_command(soak_cmd, name="soak")


def main() -> None:
    from common.stopping import run

    run(cli)
