"""`dataprep`: convert datasets into the loaders' formats, verify them, describe them."""

from __future__ import annotations

from pathlib import Path

import click

from .parallel import cores_per_rank

FORMAT_NAMES = ("files", "hdf5", "ffcv", "dali", "stream", "all")
SOURCE_NAMES = (
    "auto",
    "cifar10",
    "imagefolder",
    "kaggle",
    "audio",
    "webdataset",
    "synthetic-images",
    "synthetic-audio",
)


def _formats(ctx, param, value: str) -> tuple[str, ...]:
    names = tuple(v.strip() for v in value.split(",") if v.strip())
    bad = [n for n in names if n not in FORMAT_NAMES]
    if bad or not names:
        raise click.BadParameter(f"{', '.join(bad) or 'nothing'}: choose from {', '.join(FORMAT_NAMES)} (comma list)")
    return names


def _location(ctx, param, value: str | None):
    """A local path as a Path; s3:// URLs and brace patterns as given (pathlib would fold the // of s3://)."""
    if value is None:
        return None
    return value if value.startswith("s3://") or "{" in value else Path(value)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Prepare datasets for gpufeed's loaders (FFCV, HDF5, DALI, plain files)."""


@cli.command()
@click.option(
    "--input",
    "input_",
    callback=_location,
    help="Source folder or archive, or WebDataset tar shards: local or s3://, brace patterns "
    "(shards/{00000..00099}.tar).",
)
@click.option("--out", "output", callback=_location, help="Directory to create, or s3://BUCKET/PREFIX.  [required]")
@click.option("--output", "output_old", callback=_location, hidden=True)  # the old name of --out, still accepted
@click.option(
    "--format",
    "formats",
    default="all",
    callback=_formats,
    help="files,hdf5,ffcv,dali,stream or all (all: the first four).",
)
@click.option("--source", type=click.Choice(SOURCE_NAMES), default="auto", show_default=True)
@click.option("--split", type=click.Choice(["train", "test"]), default="train", show_default=True)
@click.option("--limit", type=click.IntRange(min=1), help="Convert the first N usable samples (synthetic: N samples).")
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=cores_per_rank,
    show_default="the cores this process may use, shared out between the ranks of a host under torchrun",
    help="Decoding, encoding and FFCV writer processes.",
)
@click.option("--on-bad-file", type=click.Choice(["error", "skip"]), default="error", show_default=True)
@click.option("--sample-rate", type=click.IntRange(min=1000), default=16000, show_default=True)
@click.option("--clip-seconds", type=click.FloatRange(min=0.01), default=1.024, show_default=True)
@click.option("--channels", type=click.IntRange(1, 8), default=1, show_default=True, help="1 downmixes.")
@click.option(
    "--size",
    type=click.IntRange(min=1),
    help="Images: resize the shorter side to N and centre-crop N x N "
    "(as torchvision's Resize(N) + CenterCrop(N)); needed when the images differ in size.",
)
@click.option(
    "--caption-template",
    "caption_templates",
    multiple=True,
    help='Caption each sample from its class name, e.g. "a photo of a {label}"; repeat it for several templates, '
    "one drawn per sample (seeded). For inputs without captions of their own.",
)
@click.option(
    "--vae",
    help="Store latents, not samples: a diffusers AutoencoderKL directory (save_pretrained) or hub id encodes every "
    "image (and its mirror) or clip (its AudioLDM log-mel) once.",
)
@click.option(
    "--text-encoder",
    type=click.Path(exists=True, file_okay=False),
    help="Cache caption embeddings: a save_pretrained text encoder folder (CLIP, T5 or CLAP text model) encodes every "
    "distinct caption once; tokens, mask and pooled vector are stored beside the samples.",
)
@click.option(
    "--text-max-tokens", type=click.IntRange(min=2), help="Cut captions at N tokens [default: the encoder's limit]."
)
@click.option("--text-dtype", type=click.Choice(["bf16", "fp16"]), default="bf16", show_default=True)
@click.option(
    "--batch-size", type=click.IntRange(min=1), default=64, show_default=True, help="Per --vae or --text-encoder batch."
)
@click.option(
    "--device", help="Where --vae and --text-encoder encode: cuda, cuda:N or cpu [default: cuda when present]."
)
@click.option(
    "--vae-precision",
    type=click.Choice(["bf16", "fp32"]),
    default="bf16",
    show_default=True,
    help="Autocast of the encoder on a GPU (fp32 on the CPU).",
)
@click.option(
    "--compile",
    is_flag=True,
    help="torch.compile the --vae encoder: faster once compiled, which pays on large datasets",
)
@click.option(
    "--overwrite", is_flag=True, help="Replace an output (a directory or an s3:// prefix) that dataprep convert wrote."
)
@click.option("--no-progress", "quiet", is_flag=True, help="No progress bar.")
@click.option("--quiet", "quiet_old", is_flag=True, hidden=True)  # the old name of --no-progress, still accepted
@click.option("--timings", is_flag=True, help="Print where the time went, stage by stage (kept in the manifest).")
def convert(
    input_,
    output,
    output_old,
    formats,
    source,
    split,
    limit,
    workers,
    on_bad_file,
    sample_rate,
    clip_seconds,
    channels,
    size,
    caption_templates,
    vae,
    text_encoder,
    text_max_tokens,
    text_dtype,
    batch_size,
    device,
    vae_precision,
    compile,
    overwrite,
    quiet,
    quiet_old,
    timings,
) -> None:
    """Convert a dataset into the chosen formats, with a manifest and checksums."""
    from common.cli import check_vae_option

    from .convert import ConvertConfig
    from .convert import convert as run

    check_vae_option(vae)
    if text_encoder is None and (text_max_tokens is not None or text_dtype != "bf16"):
        hint = "--text-max-tokens" if text_max_tokens is not None else "--text-dtype"
        raise click.BadParameter("sets how captions are encoded; add --text-encoder PATH", param_hint=hint)
    if output and output_old:
        raise click.BadParameter("--output is the old name of --out: give --out alone", param_hint="--output")
    output = output or output_old
    if output is None:
        raise click.UsageError("Missing option '--out': the directory to create, or s3://BUCKET/PREFIX.")
    quiet = quiet or quiet_old

    cfg = ConvertConfig(
        output=output,
        input=input_,
        formats=formats,
        source=source,
        split=split,
        limit=limit,
        workers=workers,
        on_bad_file=on_bad_file,
        sample_rate=sample_rate,
        clip_seconds=clip_seconds,
        channels=channels,
        size=size,
        caption_templates=tuple(caption_templates),
        progress=not quiet,
        overwrite=overwrite,
        timings=timings,
        vae=vae,
        batch_size=batch_size,
        device=_device(device, vae or text_encoder),
        vae_precision=vae_precision,
        compile=compile,
        text_encoder=text_encoder,
        text_max_tokens=text_max_tokens,
        text_dtype=text_dtype,
    )
    manifest = _guard(run, cfg)
    if not manifest:  # a rank other than 0 under torchrun: it encoded its share, rank 0 wrote the output
        return
    from common.text import printable

    click.echo(f"wrote {manifest['count']:,} samples to {printable(output)} ({', '.join(manifest['formats'])})")
    if manifest["skipped"]:
        click.echo(
            f"skipped {len(manifest['skipped'])} bad file(s); listed in {printable(output)}/manifest.json", err=True
        )


@cli.command()
@click.argument("data_dir", callback=_location)
def verify(data_dir: Path | str) -> None:
    """Re-hash every file and re-read every sample of every format against the manifest (s3://: downloaded first)."""
    from common.text import printable

    from .fields import unchecked_note
    from .manifest import load_manifest, resize_line
    from .remote import is_remote, load_remote_manifest, verify_remote
    from .remote_write import leftover_lines
    from .verify import verify as run

    remote = is_remote(data_dir)
    manifest = _guard(load_remote_manifest, data_dir) if remote else _guard(load_manifest, data_dir)
    note = unchecked_note(manifest)
    if note:
        click.echo(f"warning: {note}", err=True)
    for line in _guard(leftover_lines, data_dir) if remote else []:
        click.echo(f"note: {line}")
    problems = _guard(verify_remote, data_dir, True) if remote else _guard(run, data_dir)
    if problems:
        raise click.ClickException("verification failed:\n  " + "\n  ".join(printable(p) for p in problems))
    click.echo(f"{printable(data_dir)}: every file and every sample of every format matches the manifest")
    if isinstance(manifest.get("resize"), dict):
        click.echo(f"images were resized {printable(resize_line(manifest))}")


@cli.command()
@click.argument("data_dir", callback=_location)
def info(data_dir: Path | str) -> None:
    """Print the manifest readably (of a local directory or s3://BUCKET/PREFIX)."""
    from .manifest import describe, load_manifest
    from .remote import is_remote, load_remote_manifest
    from .remote_write import leftover_lines

    remote = is_remote(data_dir)
    click.echo(describe(_guard(load_remote_manifest if remote else load_manifest, data_dir)))
    for line in _guard(leftover_lines, data_dir) if remote else []:
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

    _guard(make, kind, path, size)
    click.echo(f"wrote a {size} {kind} text encoder to {printable(path)}")


def _device(device: str | None, encoder: str | None) -> str | None:
    if device is None:
        return None
    if encoder is None:
        message = "only --vae and --text-encoder run on a device; drop --device or add one of them"
        raise click.BadParameter(message, param_hint="--device")
    if device.split(":")[0] not in ("cuda", "cpu"):
        raise click.BadParameter(f"{device!r}: use cuda, cuda:N or cpu", param_hint="--device")
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise click.BadParameter("no CUDA device here; pass --device cpu", param_hint="--device")
    return device


def _guard(fn, *args):
    """Known failures become one-line errors with a non-zero exit, never a traceback; whatever they quote from the
    data (file names, classes) is shown with control characters escaped."""
    from common.text import printable

    from .convert import ConvertError
    from .manifest import ManifestError
    from .parallel import WorkerDied
    from .sources import BadSample, InputError
    from .workdir import OutputError

    try:
        return fn(*args)
    except BadSample as e:
        message = f"bad input file {e}; fix or remove it, or pass --on-bad-file skip"
        raise click.ClickException(printable(message)) from None
    except (InputError, ConvertError, ManifestError, OutputError, ValueError) as e:
        raise click.ClickException(printable(str(e))) from None
    except WorkerDied as e:
        message = f"a worker process died: {e}; its work is lost, so nothing was published (dmesg names the killer)"
        raise click.ClickException(printable(message)) from None
    except OSError as e:
        raise click.ClickException(printable(f"{e.filename or ''}: {e.strerror or e}")) from None


def main() -> None:
    from common.stopping import run

    run(cli)
