"""What the three command lines (dataprep, bench, train) share; here because each tool imports only the packages to
its left: Ctrl-C ends a command with exit status 130, as a shell reports an interrupted program; an option that
was renamed keeps its old name for a while, saying the new one; a --vae that names nothing usable is refused at once."""

from __future__ import annotations

import sys
from collections.abc import Callable

import click


def run_command(command: click.Command) -> None:
    """Run a click command as its console script does. Click turns Ctrl-C into "Aborted!" and exit status 1, which a
    script cannot tell from a failure; here it is 130 (128 + SIGINT). A command that handles SIGINT itself (train
    checkpoints first) sets its own status."""
    try:
        code = command.main(standalone_mode=False)
    except (click.Abort, KeyboardInterrupt):
        click.echo("\ninterrupted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    sys.exit(code if isinstance(code, int) else 0)


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


def check_vae_option(vae: str | None) -> None:
    """A --vae that is neither an AutoencoderKL directory nor a hub id, refused before torch and diffusers are
    imported (seconds): exit status 2 with the fix."""
    from .vae_name import VaeError, check_vae_name

    if vae:
        try:
            check_vae_name(vae)
        except VaeError as e:
            raise click.BadParameter(str(e).removeprefix("--vae "), param_hint="--vae") from None
