"""What the three command lines (dataprep, bench, train) share; here because each tool imports only the packages to
its left: an option that was renamed keeps its old name for a while, saying the new one; a --vae that names nothing
usable is refused at once; train's and bench's --data take a directory or an s3:// URL alike. How each ends on Ctrl-C
or SIGTERM (exit 130 or 143) is common.stopping's `run`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click


def renamed(old: str) -> Callable:
    """A hidden option `old`, kept working after a rename; the command passes its value to `take_renamed`."""
    return click.option(old, _key(old), type=click.IntRange(min=0), default=None, hidden=True)


def take_renamed(options: dict, old: str, new: str, dest: str, tool: str) -> bool:
    """Move a value given under the old name to the new option's parameter `dest` (options: the command's keyword
    arguments), saying what to use now. True when the old name was given."""
    value = options.pop(_key(old))
    if value is None:
        return False
    if click.get_current_context().get_parameter_source(dest) != click.core.ParameterSource.DEFAULT:
        raise click.BadParameter(f"{old} is the old name of {new}: give {new} alone", param_hint=old)
    click.echo(f"{tool}: {old} is now {new}; the old name still works for now", err=True)
    options[dest] = value
    return True


def _key(old: str) -> str:
    return "renamed_" + old.lstrip("-").replace("-", "_")


def data_location(ctx: click.Context, param: click.Parameter, value: str | None) -> Path | str | None:
    """--data of train and bench (a click callback): a directory that exists, or s3://BUCKET/PREFIX kept as text,
    since a Path would fold its double slash."""
    from .paths import SCHEME

    if value is None or value.startswith(SCHEME):
        return value
    return click.Path(exists=True, file_okay=False, path_type=Path).convert(value, param, ctx)


def check_vae_option(vae: str | None) -> None:
    """A --vae that is neither an AutoencoderKL directory nor a hub id, refused before torch and diffusers are
    imported (seconds): exit status 2 with the fix."""
    from .vae_name import VaeError, check_vae_name

    if vae:
        try:
            check_vae_name(vae)
        except VaeError as e:
            raise click.BadParameter(str(e).removeprefix("--vae "), param_hint="--vae") from None


# --device of every command that trains or measures training (train, bench loaders, bench fastest)
device_option = click.option("--device", default=None, help="cuda, cuda:N or cpu [default: cuda when present].")


def check_device_name(device: str | None) -> None:
    """--device of any tool, before torch is imported: cuda, cuda:N or cpu."""
    if device is not None and device.split(":")[0] not in ("cuda", "cpu"):
        raise click.BadParameter(f"{device!r}: use cuda, cuda:N or cpu", param_hint="--device")


def check_device(device: str | None) -> None:
    """--device named as check_device_name says, and CUDA only where this machine has it (imports torch)."""
    check_device_name(device)
    if device and device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise click.BadParameter("no CUDA device here; pass --device cpu", param_hint="--device")


def apply_options(options: tuple[Callable, ...]) -> Callable:
    """One decorator that gives a command every click option of `options`, listed in that order by --help."""

    def decorate(command: Callable) -> Callable:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate
