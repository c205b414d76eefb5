"""`train`'s checks of its options before the run starts, each refusing in one line with the fix (click's exit 2),
and what the command says of its choices: the CPU's defaults taken, too few steps timed. Lazy imports: the checks
run before torch is imported (its import is what the compile cache's bytecode speeds up)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import click

from .bytecode import keep_bytecode
from .config import default_compile_cache
from .summary import MIN_TIMED_STEPS

DEFAULT = click.core.ParameterSource.DEFAULT


def speaks() -> bool:
    """Whether this process speaks for the run: under torchrun, rank 0."""
    return os.environ.get("RANK", "0") == "0"


def start_compile_cache(given: Path | None) -> None:
    """A compile cache that can be a folder, and Python's bytecode kept there from now on (training.bytecode)."""
    usable_cache(given)
    note = keep_bytecode(given or default_compile_cache())
    if note and speaks():
        click.echo(f"compile cache: {note}", err=True)


def compile_cache_choice(given: Path | None, no_cache: bool) -> dict:
    """TrainConfig's compile_cache where the options name one: {} for the default, None for --no-compile-cache."""
    if no_cache and given:
        raise click.BadParameter("give a directory or --no-compile-cache, not both", param_hint="--compile-cache")
    return {"compile_cache": None if no_cache else given} if no_cache or given else {}


def check_data(data: Path | str) -> None:
    if not str(data).startswith("s3://") and not (data / "manifest.json").is_file():
        raise click.BadParameter(f"{data}: no manifest.json; prepare it with `dataprep convert`", param_hint="--data")


def check_out(out: Path, data: Path | str) -> None:
    """--out a folder that train wrote, or a new or empty one, and apart from the data (training.run_dir)."""
    from .run_dir import RunDirError
    from .run_dir import check_out as check

    try:
        check(out, data)
    except RunDirError as e:
        raise click.ClickException(str(e)) from None


def check_tensorboard(wanted: bool) -> None:
    if wanted and importlib.util.find_spec("tensorboard") is None:
        raise click.BadParameter(
            "TensorBoard is not installed: pip install 'gpufeed[tensorboard]'", param_hint="--tensorboard"
        )


def usable_cache(given: Path | None) -> None:
    """A compile cache path that can never be a folder (a file stands where it or a parent should be) is refused
    now, in one line, rather than found out after minutes of compiling."""
    path = given or default_compile_cache()
    hint = "--compile-cache" if given else "$GPUFEED_COMPILE_CACHE (or --compile-cache)"
    for level in (path, *path.parents):
        if level.is_dir():
            return
        if os.path.lexists(level):
            where = "is" if level == path else f"cannot be a folder: {level} is"
            kind = "a file" if level.is_file() else "not a folder"
            fix = "give a folder for the compiled kernels, or pass --no-compile-cache"
            raise click.BadParameter(f"{path} {where} {kind}; {fix}", param_hint=hint)


def say_what_is_chosen(options: dict, device: str | None, given: set[str]) -> None:
    """On a CPU, its defaults for the options not given; and a warning when too few steps will be timed."""
    cores = len(os.sched_getaffinity(0))
    if _source("workers") == DEFAULT and options["workers"] > cores:  # more only queue for the cores
        options["workers"] = cores
    if _on_cpu(device):
        given |= {k for k in options if _source(k) != DEFAULT}
        note = for_cpu(options, given)
        if note and speaks():
            click.echo(note, err=True)
    steps, warmup = options["steps"], options["timing_warmup"]
    if steps - warmup < MIN_TIMED_STEPS and not options["resume"] and speaks():
        click.echo(
            f"train: {steps} steps with --timing-warmup {warmup} leave {max(steps - warmup, 0)} timed: the rate "
            f"will be a rough figure (run {warmup + MIN_TIMED_STEPS} or more --steps to time it)",
            err=True,
        )


def _source(name: str):
    return click.get_current_context().get_parameter_source(name)


def _on_cpu(device: str | None) -> bool:
    if device is not None:
        return device.startswith("cpu")
    import torch

    return not torch.cuda.is_available()


def for_cpu(options: dict, given: set[str]) -> str | None:
    """The CPU's defaults for the options not given (training.cpu_defaults); the line that says what they are."""
    from .cpu_defaults import apply
    from .data import DataError, read_manifest

    try:
        kind = read_manifest(options["data"]).get("kind", "image")
    except DataError as e:
        raise click.ClickException(str(e)) from None
    return apply(options, set(options) - given, kind, len(os.sched_getaffinity(0)))
