"""`train`'s options, in the order --help lists them: each default is TrainConfig's (training.config), and where a
CPU takes another (training.cpu_defaults) --help shows both. The command itself is training/cli.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click

from common.cli import apply_options, data_location, device_option, renamed

from .config import GRAD_SYNCS, LOADER_NAMES, MODEL_NAMES, PRECISIONS, TrainConfig
from .cpu_defaults import CPU_MODELS, CpuDefaults

_defaults = TrainConfig.__dataclass_fields__


def _d(name: str):
    return _defaults[name].default


def _field(flag: str, key: str | None = None, *, cpu: object = None, **kwargs) -> Callable:
    """Option `flag` for TrainConfig's field `key` (the flag's own name where not given: --grad-sync: grad_sync), with
    the field's default; where a CPU takes another (`cpu`), --help shows both."""
    key = key or flag.split("/")[0].removeprefix("--").replace("-", "_")
    if cpu is not None:
        kwargs["show_default"] = f"{_d(key)}; {cpu} on a CPU"
    return click.option(flag, key, default=_d(key), **kwargs)


def cache_size(_ctx: click.Context, _param: click.Parameter, value: str | None) -> int | None:
    """--cache-limit as bytes, refused here (not as a damaged index later) unless a positive, finite size."""
    if value is None:
        return None
    from loaders.stream_cache import parse_size

    try:
        return parse_size(value)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--cache-limit") from None


OPTIONS = (
    click.option(
        "--data",
        callback=data_location,
        required=True,
        help="A directory written by `dataprep convert`, or s3://BUCKET/PREFIX (the stream loader; AWS_ENDPOINT_URL, "
        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY reach the store).",
    ),
    _field(
        "--loader",
        type=click.Choice(LOADER_NAMES),
        help="Loader backend; 'fastest' lets bench pick the best for this machine.",
    ),
    click.option(
        "--model",
        type=click.Choice(MODEL_NAMES),
        default=None,
        help="Model preset [default: ddpm_cifar10 for images, ddpm_audio_mel for audio, dit_b2 for latents or --vae; "
        f"on a CPU {CPU_MODELS['image']}, and {CPU_MODELS['latent']} for latents].",
    ),
    click.option(
        "--vae",
        help="Pixel or clip data: encode every batch in the step with this diffusers AutoencoderKL (directory or hub "
        "id), the baseline that `dataprep convert --vae` replaces.",
    ),
    click.option(
        "--text-encoder",
        type=click.Path(exists=True, file_okay=False),
        help="Text models: a text encoder folder (`dataprep make-text-encoder`, save_pretrained) that encodes raw "
        "captions in the step (the baseline cached embeddings replace), the empty caption and the --sample-prompts.",
    ),
    _field(
        "--caption-dropout",
        type=click.FloatRange(0, 1, max_open=True),
        show_default=True,
        help="Text models: share of captions trained as the empty caption (classifier-free guidance).",
    ),
    click.option(
        "--sample-prompts",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="Text models: sample grids from these prompts (one a line), guided by --guidance-scale.",
    ),
    _field("--guidance-scale", type=float, show_default=True),
    _field("--batch-size", cpu=CpuDefaults.batch_size, type=click.IntRange(min=1), help="Per rank."),
    _field("--steps", type=click.IntRange(min=1), help="Total steps, across resumes."),
    _field("--lr", type=click.FloatRange(min=0, min_open=True)),
    _field(
        "--lr-warmup",
        "warmup",
        cpu=f"{CpuDefaults.lr_warmup_share:.0%} of --steps",
        type=click.IntRange(min=0),
        help="Steps of linear learning-rate warm-up (steps left out of the timing: --timing-warmup).",
    ),
    renamed("--warmup"),
    _field("--grad-clip", type=click.FloatRange(min=0), help="0 disables."),
    _field("--ema", type=click.FloatRange(0, 1, max_open=True), help="EMA decay."),
    _field("--precision", cpu=CpuDefaults.precision, type=click.Choice(PRECISIONS)),
    _field("--compile/--no-compile", help="torch.compile the UNet, with CUDA graphs."),
    click.option(
        "--compile-cache",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Compiled kernels (and Python's bytecode, where none is kept) kept between runs and machines of the same "
        "GPU and torch. The folder holds code that runs when it is loaded: copy it only from machines you trust; only "
        "your files in folders no one else can write are read [default: $GPUFEED_COMPILE_CACHE or "
        "~/.cache/gpufeed/compile].",
    ),
    click.option("--no-compile-cache", is_flag=True, help="Neither read nor write the compile cache."),
    _field(
        "--compile-traced-program/--no-compile-traced-program",
        help="Keep Dynamo's traced program in the compile cache too (single-GPU runs without --vae): the next run does "
        "not trace the model, but torch weakens its guards (it warns of each).",
    ),
    _field(
        "--grad-sync",
        type=click.Choice(GRAD_SYNCS),
        help="Under torchrun, how ranks average gradients: DDP, or one all-reduce with the whole step as one CUDA "
        "graph (step-graph, on one GPU too); auto takes step-graph for a compiled run on several GPUs, the fastest "
        "measured.",
    ),
    _field(
        "--workers",
        type=click.IntRange(min=0),
        show_default=f"{_d('workers')}, at most the cores; half the cores on a CPU",
        help="Loader workers per rank (fastest picks its own).",
    ),
    _field("--pin-memory/--no-pin-memory"),
    click.option(
        "--cache-limit",
        default=None,
        callback=cache_size,
        help="The stream loader's local shard cache, e.g. 25GB (powers of 1000; LitData warns below 25GB); "
        "removed at exit [default: LitData's, 75% of the free disk].",
    ),
    _field("--augment/--no-augment", help="Random horizontal flips (images)."),
    _field(
        "--out",
        type=click.Path(file_okay=False, path_type=Path),
        help="RUN_DIR: ckpt.pt, metrics.jsonl, samples/, profile/; a new or empty folder, or one train wrote, "
        "apart from --data.",
    ),
    click.option("--resume", is_flag=True, help="Continue from RUN_DIR/ckpt.pt (an error if it is missing)."),
    click.option(
        "--resume-other-data",
        is_flag=True,
        help="With --resume: continue on data (or a --vae) other than the checkpoint's, which is otherwise refused; "
        "recorded in the checkpoint.",
    ),
    click.option("--profile", is_flag=True, help="Write a profiler trace and operator table after warm-up."),
    _field("--sample-every", type=click.IntRange(min=0), help="0 disables."),
    _field(
        "--sample-count",
        cpu=f"{CpuDefaults.sample_count} ({CpuDefaults.latent_sample_count} for latents)",
        type=click.IntRange(min=1),
        help="Images per grid.",
    ),
    _field("--sample-steps", cpu=CpuDefaults.sample_steps, type=click.IntRange(min=1), help="DDIM steps per grid."),
    _field("--ckpt-every", type=click.IntRange(min=0), help="0: no checkpoints."),
    _field("--log-every", type=click.IntRange(min=1)),
    _field(
        "--timing-warmup",
        cpu=CpuDefaults.timing_warmup,
        type=click.IntRange(min=0),
        help="Steps left out of the timing figures.",
    ),
    _field("--seed", type=int),
    device_option,
    click.option("--tensorboard", is_flag=True, help="Also write TensorBoard events to RUN_DIR/tensorboard/."),
    click.option("--no-progress", is_flag=True, help="No progress bar (log lines only)."),
    click.option(
        "--json", "as_json", is_flag=True, help="Print the full record (RUN_DIR/summary.json), not the summary."
    ),
)
train_options = apply_options(OPTIONS)
