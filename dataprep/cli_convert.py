"""`dataprep convert`: its options, checked, into a ConvertConfig for dataprep.convert, and the line that says what
was written. The group and the other commands are dataprep/cli.py."""

from __future__ import annotations

import click

from common.cli import check_device

from .cli_checks import guard, location
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


@click.command()
@click.option(
    "--input",
    "input_",
    callback=location,
    help="Source folder or archive, or WebDataset tar shards: local or s3://, brace patterns "
    "(shards/{00000..00099}.tar).",
)
@click.option("--out", "output", callback=location, help="Directory to create, or s3://BUCKET/PREFIX.  [required]")
@click.option("--output", "output_old", callback=location, hidden=True)  # the old name of --out, still accepted
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
    manifest = guard(run, cfg)
    if not manifest:  # a rank other than 0 under torchrun: it encoded its share, rank 0 wrote the output
        return
    from common.text import printable

    click.echo(f"wrote {manifest['count']:,} samples to {printable(output)} ({', '.join(manifest['formats'])})")
    if manifest["skipped"]:
        click.echo(
            f"skipped {len(manifest['skipped'])} bad file(s); listed in {printable(output)}/manifest.json", err=True
        )


def _device(device: str | None, encoder: str | None) -> str | None:
    if device is None:
        return None
    if encoder is None:
        message = "only --vae and --text-encoder run on a device; drop --device or add one of them"
        raise click.BadParameter(message, param_hint="--device")
    check_device(device)
    return device
