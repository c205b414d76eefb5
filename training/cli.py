"""`train`: parse the options (training/cli_options.py) into a TrainConfig, checked (training/cli_checks.py), call
training.loop.main, say how it went (training.summary). Under torchrun every rank runs it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from common.cli import check_device, check_device_name, check_vae_option, take_renamed

from . import cli_checks as checks
from .cli_options import train_options
from .config import TrainConfig


@click.command(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@train_options
def train(
    no_progress: bool, device: str | None, as_json: bool, compile_cache: Path | None, no_compile_cache: bool, **options
) -> None:
    """Train a DDPM (UNet, or DiT on latents) on a prepared dataset; checkpoints survive Ctrl-C and SIGTERM."""
    given = {"warmup"} if take_renamed(options, "--warmup", "--lr-warmup", "warmup", "train") else set()
    check_vae_option(options["vae"])
    check_device_name(device)
    if options["compile"] and not no_compile_cache:  # before torch is imported: its imports are what it speeds up
        checks.start_compile_cache(compile_cache)
    check_device(device)
    checks.check_data(options["data"])
    checks.check_out(options["out"], options["data"])
    checks.check_tensorboard(options["tensorboard"])
    checks.say_what_is_chosen(options, device, given)
    extra = {"device": device} if device else {}
    extra |= checks.compile_cache_choice(compile_cache, no_compile_cache)
    try:
        cfg = TrainConfig(**options, progress=not no_progress, **extra)
    except ValueError as e:  # a combination no single option's type can refuse: --vae with --loader fastest
        raise click.UsageError(str(e)) from None
    from common.stopping import stop_within_deadline

    stop_within_deadline()  # this process is the run: a stop signal ends it within seconds, whatever it is doing
    summary = _run(cfg)
    if summary.stopped_by:
        saved = f"checkpoint in {cfg.out}; continue with --resume" if cfg.ckpt_every else "not saved (--ckpt-every 0)"
        click.echo(f"stopped by {summary.stopped_by} at step {summary.start_step + summary.steps}; {saved}", err=True)
        _exit_now(130 if summary.stopped_by == "SIGINT" else 143)  # 128 + signal number, as the shell reports it
    from .summary import lines, record, write

    rec = record(summary.to_dict(), cfg.out)
    if checks.speaks():
        write(cfg.out, rec)
        click.echo(json.dumps(rec, indent=1, default=str) if as_json else "\n".join(lines(rec)))


def _exit_now(code: int) -> None:
    """End the process after a stop: the run is saved, its loader and process group closed. The interpreter's own
    shutdown (torch's exit handlers, freeing every module) can outlast the 5 s a stop promises, and no watchdog thread
    can act while it runs."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _run(cfg: TrainConfig):
    from loaders import LoaderError

    from .checkpoint import CheckpointError
    from .data import DataError
    from .guard import NonFiniteError
    from .loop import main as run

    try:
        return run(cfg)
    except (CheckpointError, LoaderError, DataError, NonFiniteError) as e:
        raise click.ClickException(str(e)) from None


def main() -> None:
    from common.stopping import run

    run(train)
