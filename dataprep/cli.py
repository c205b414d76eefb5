"""`dataprep`: convert datasets into the loaders' formats, verify them, describe them."""

from __future__ import annotations

from pathlib import Path

import click

from .cli_checks import guard, location
from .cli_convert import convert


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Prepare datasets for gpufeed's loaders (FFCV, HDF5, DALI, plain files)."""


cli.add_command(convert)


@cli.command()
@click.argument("data_dir", callback=location)
def verify(data_dir: Path | str) -> None:
    """Re-hash every file and re-read every sample of every format against the manifest (s3://: downloaded first)."""
    from common.text import printable

    from .fields import unchecked_note
    from .manifest import load_manifest, resize_line
    from .remote import is_remote, load_remote_manifest, verify_remote
    from .remote_write import leftover_lines
    from .verify import verify as run

    remote = is_remote(data_dir)
    manifest = guard(load_remote_manifest, data_dir) if remote else guard(load_manifest, data_dir)
    note = unchecked_note(manifest)
    if note:
        click.echo(f"warning: {note}", err=True)
    for line in guard(leftover_lines, data_dir) if remote else []:
        click.echo(f"note: {line}")
    problems = guard(verify_remote, data_dir, True) if remote else guard(run, data_dir)
    if problems:
        raise click.ClickException("verification failed:\n  " + "\n  ".join(printable(p) for p in problems))
    click.echo(f"{printable(data_dir)}: every file and every sample of every format matches the manifest")
    if isinstance(manifest.get("resize"), dict):
        click.echo(f"images were resized {printable(resize_line(manifest))}")


@cli.command()
@click.argument("data_dir", callback=location)
def info(data_dir: Path | str) -> None:
    """Print the manifest readably (of a local directory or s3://BUCKET/PREFIX)."""
    from .manifest import describe, load_manifest
    from .remote import is_remote, load_remote_manifest
    from .remote_write import leftover_lines

    remote = is_remote(data_dir)
    click.echo(describe(guard(load_remote_manifest if remote else load_manifest, data_dir)))
    for line in guard(leftover_lines, data_dir) if remote else []:
        click.echo(f"note:    {line}")


@cli.command("make-vae")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--shape", type=click.Choice(["sd", "audioldm", "tiny"]), default="sd", help="Whose shape it takes.")
def make_vae(path: Path, shape: str) -> None:
    """Write an AutoencoderKL with random weights to PATH, for `convert --vae PATH` without the network: speed only,
    no quality (needs .[latent])."""
    from common.text import printable

    from .latents.random_vae import make_vae as make

    try:
        params = make(path, shape)
    except FileExistsError as e:
        raise click.BadParameter(str(e), param_hint="PATH") from None
    except ImportError:
        raise click.ClickException("diffusers is not installed: pip install 'gpufeed[latent]'") from None
    click.echo(
        f"wrote a {shape}-shaped AutoencoderKL with random weights ({params['encoder']:,} encoder parameters) "
        f"to {printable(path)}; use it with dataprep convert --vae {printable(path)}"
    )


@cli.command("make-text-encoder")
@click.argument("kind", type=click.Choice(["clip", "t5", "clap"]))
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "--size",
    type=click.Choice(["tiny", "clip-l", "t5-xl"]),
    default="tiny",
    show_default=True,
    help="tiny (tests), clip-l (CLIP ViT-L/14's text tower) or t5-xl (T5 v1.1 XL's encoder).",
)
def make_text_encoder(kind: str, path: Path, size: str) -> None:
    """Build a text encoder from its config with random weights (nothing downloaded) and save its model and tokenizer
    into the new folder PATH, for --text-encoder: the speed of a real one, not its meaning."""
    from common.text import printable

    from .textenc import make_text_encoder as make

    guard(make, kind, path, size)
    click.echo(f"wrote a {size} {kind} text encoder to {printable(path)}")


def main() -> None:
    from common.stopping import run

    run(cli)
