"""`train`: parse the options into a TrainConfig, call training.loop.main, say how it went (training.summary).
Under torchrun every rank runs it."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import click

from common.cli import check_vae_option, data_location, renamed, take_renamed

from .bytecode import keep_bytecode
from .config import (
    GRAD_SYNCS,
    LOADER_NAMES,
    MODEL_NAMES,
    PRECISIONS,
    TrainConfig,
    default_compile_cache,
)
from .cpu_defaults import CPU_MODELS, CpuDefaults
from .summary import MIN_TIMED_STEPS

DEFAULT = click.core.ParameterSource.DEFAULT

_defaults = TrainConfig.__dataclass_fields__


def _d(name: str):
    return _defaults[name].default


def _cpu(name: str, cpu_value) -> str:
    """`--help`'s default for an option that takes another value on a CPU (training.cpu_defaults): both."""
    return f"{_d(name)}; {cpu_value} on a CPU"


def _cache_size(_ctx: click.Context, _param: click.Parameter, value: str | None) -> int | None:
    """--cache-limit as bytes, refused here (not as a damaged index later) unless a positive, finite size."""
    if value is None:
        return None
    from loaders.stream_cache import parse_size

    try:
        return parse_size(value)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--cache-limit") from None


@click.command(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.option(
    "--data",
    callback=data_location,
    required=True,
    help="A directory written by `dataprep convert`, or s3://BUCKET/PREFIX (the stream loader; AWS_ENDPOINT_URL, "
    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY reach the store).",
)
@click.option(
    "--loader",
    type=click.Choice(LOADER_NAMES),
    default=_d("loader"),
    help="Loader backend; 'fastest' lets bench pick the best for this machine.",
)
@click.option(
    "--model",
    type=click.Choice(MODEL_NAMES),
    default=None,
    help="Model preset [default: ddpm_cifar10 for images, ddpm_audio_mel for audio, dit_b2 for latents or --vae; "
    f"on a CPU {CPU_MODELS['image']}, and {CPU_MODELS['latent']} for latents].",
)
@click.option(
    "--vae",
    help="Pixel or clip data: encode every batch in the step with this diffusers AutoencoderKL (directory or hub "
    "id), the baseline that `dataprep convert --vae` replaces.",
)
@click.option(
    "--text-encoder",
    type=click.Path(exists=True, file_okay=False),
    help="Text models: a text encoder folder (`dataprep make-text-encoder`, save_pretrained) that encodes raw "
    "captions in the step (the baseline cached embeddings replace), the empty caption and the --sample-prompts.",
)
@click.option(
    "--caption-dropout",
    type=click.FloatRange(0, 1, max_open=True),
    default=_d("caption_dropout"),
    show_default=True,
    help="Text models: share of captions trained as the empty caption (classifier-free guidance).",
)
@click.option(
    "--sample-prompts",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Text models: sample grids from these prompts (one a line), guided by --guidance-scale.",
)
@click.option("--guidance-scale", type=float, default=_d("guidance_scale"), show_default=True)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    default=_d("batch_size"),
    show_default=_cpu("batch_size", CpuDefaults.batch_size),
    help="Per rank.",
)
@click.option("--steps", type=click.IntRange(min=1), default=_d("steps"), help="Total steps, across resumes.")
@click.option("--lr", type=click.FloatRange(min=0, min_open=True), default=_d("lr"))
@click.option(
    "--lr-warmup",
    "warmup",
    type=click.IntRange(min=0),
    default=_d("warmup"),
    show_default=_cpu("warmup", f"{CpuDefaults.lr_warmup_share:.0%} of --steps"),
    help="Steps of linear learning-rate warm-up (steps left out of the timing: --timing-warmup).",
)
@renamed("--warmup")
@click.option("--grad-clip", type=click.FloatRange(min=0), default=_d("grad_clip"), help="0 disables.")
@click.option("--ema", type=click.FloatRange(0, 1, max_open=True), default=_d("ema"), help="EMA decay.")
@click.option(
    "--precision",
    type=click.Choice(PRECISIONS),
    default=_d("precision"),
    show_default=_cpu("precision", CpuDefaults.precision),
)
@click.option("--compile/--no-compile", default=_d("compile"), help="torch.compile the UNet, with CUDA graphs.")
@click.option(
    "--compile-cache",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Compiled kernels (and Python's bytecode, where none is kept) kept between runs and machines of the same "
    "GPU and torch. The folder holds code that runs when it is loaded: copy it only from machines you trust; only "
    "your files in folders no one else can write are read [default: $GPUFEED_COMPILE_CACHE or "
    "~/.cache/gpufeed/compile].",
)
@click.option("--no-compile-cache", is_flag=True, help="Neither read nor write the compile cache.")
@click.option(
    "--compile-traced-program/--no-compile-traced-program",
    default=_d("compile_traced_program"),
    help="Keep Dynamo's traced program in the compile cache too (single-GPU runs without --vae): the next run does "
    "not trace the model, but torch weakens its guards (it warns of each).",
)
@click.option(
    "--grad-sync",
    type=click.Choice(GRAD_SYNCS),
    default=_d("grad_sync"),
    help="Under torchrun, how ranks average gradients: DDP, or one all-reduce with the whole step as one CUDA graph "
    "(step-graph, on one GPU too); auto takes step-graph for a compiled run on several GPUs, the fastest measured.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=_d("workers"),
    show_default=f"{_d('workers')}, at most the cores; half the cores on a CPU",
    help="Loader workers per rank (fastest picks its own).",
)
@click.option("--pin-memory/--no-pin-memory", default=_d("pin_memory"))
@click.option(
    "--cache-limit",
    default=None,
    callback=_cache_size,
    help="The stream loader's local shard cache, e.g. 25GB (powers of 1000; LitData warns below 25GB); "
    "removed at exit [default: LitData's, 75% of the free disk].",
)
@click.option("--augment/--no-augment", default=_d("augment"), help="Random horizontal flips (images).")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=_d("out"),
    help="RUN_DIR: ckpt.pt, metrics.jsonl, samples/, profile/; a new or empty folder, or one train wrote, "
    "apart from --data.",
)
@click.option("--resume", is_flag=True, help="Continue from RUN_DIR/ckpt.pt (an error if it is missing).")
@click.option(
    "--resume-other-data",
    is_flag=True,
    help="With --resume: continue on data (or a --vae) other than the checkpoint's, which is otherwise refused; "
    "recorded in the checkpoint.",
)
@click.option("--profile", is_flag=True, help="Write a profiler trace and operator table after warm-up.")
@click.option("--sample-every", type=click.IntRange(min=0), default=_d("sample_every"), help="0 disables.")
@click.option(
    "--sample-count",
    type=click.IntRange(min=1),
    default=_d("sample_count"),
    show_default=_cpu("sample_count", f"{CpuDefaults.sample_count} ({CpuDefaults.latent_sample_count} for latents)"),
    help="Images per grid.",
)
@click.option(
    "--sample-steps",
    type=click.IntRange(min=1),
    default=_d("sample_steps"),
    show_default=_cpu("sample_steps", CpuDefaults.sample_steps),
    help="DDIM steps per grid.",
)
@click.option("--ckpt-every", type=click.IntRange(min=0), default=_d("ckpt_every"), help="0: no checkpoints.")
@click.option("--log-every", type=click.IntRange(min=1), default=_d("log_every"))
@click.option(
    "--timing-warmup",
    type=click.IntRange(min=0),
    default=_d("timing_warmup"),
    show_default=_cpu("timing_warmup", CpuDefaults.timing_warmup),
    help="Steps left out of the timing figures.",
)
@click.option("--seed", type=int, default=_d("seed"))
@click.option("--device", default=None, help="cuda, cuda:N or cpu [default: cuda when present].")
@click.option("--tensorboard", is_flag=True, help="Also write TensorBoard events to RUN_DIR/tensorboard/.")
@click.option("--no-progress", is_flag=True, help="No progress bar (log lines only).")
@click.option("--json", "as_json", is_flag=True, help="Print the full record (RUN_DIR/summary.json), not the summary.")
def train(
    no_progress: bool, device: str | None, as_json: bool, compile_cache: Path | None, no_compile_cache: bool, **options
) -> None:
    """Train a DDPM (UNet, or DiT on latents) on a prepared dataset; checkpoints survive Ctrl-C and SIGTERM."""
    given = {"warmup"} if take_renamed(options, "--warmup", "--lr-warmup", "warmup", "train") else set()
    check_vae_option(options["vae"])
    if device is not None and device.split(":")[0] not in ("cuda", "cpu"):
        raise click.BadParameter(f"{device!r}: use cuda, cuda:N or cpu", param_hint="--device")
    if options["compile"] and not no_compile_cache:  # before torch is imported: its imports are what it speeds up
        _usable_cache(compile_cache)
        note = keep_bytecode(compile_cache or default_compile_cache())
        if note and os.environ.get("RANK", "0") == "0":
            click.echo(f"compile cache: {note}", err=True)
    if device and device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise click.BadParameter("no CUDA device here; pass --device cpu", param_hint="--device")
    if not str(options["data"]).startswith("s3://") and not (options["data"] / "manifest.json").is_file():
        raise click.BadParameter(
            f"{options['data']}: no manifest.json; prepare it with `dataprep convert`", param_hint="--data"
        )
    _check_out(options["out"], options["data"])
    if options["tensorboard"] and importlib.util.find_spec("tensorboard") is None:
        raise click.BadParameter(
            "TensorBoard is not installed: pip install 'gpufeed[tensorboard]'", param_hint="--tensorboard"
        )
    _say_what_is_chosen(options, device, given)
    extra = {"device": device} if device else {}
    if no_compile_cache and compile_cache:
        raise click.BadParameter("give a directory or --no-compile-cache, not both", param_hint="--compile-cache")
    if no_compile_cache or compile_cache:
        extra["compile_cache"] = None if no_compile_cache else compile_cache
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
    if os.environ.get("RANK", "0") == "0":  # under torchrun rank 0 speaks for the run
        write(cfg.out, rec)
        click.echo(json.dumps(rec, indent=1, default=str) if as_json else "\n".join(lines(rec)))


def _exit_now(code: int) -> None:
    """End the process after a stop: the run is saved, its loader and process group closed. The interpreter's own
    shutdown (torch's exit handlers, freeing every module) can outlast the 5 s a stop promises, and no watchdog thread
    can act while it runs."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _check_out(out: Path, data: Path | str) -> None:
    """--out a folder that train wrote, or a new or empty one, and apart from the data (training.run_dir)."""
    from .run_dir import RunDirError, check_out

    try:
        check_out(out, data)
    except RunDirError as e:
        raise click.ClickException(str(e)) from None


def _usable_cache(given: Path | None) -> None:
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


def _say_what_is_chosen(options: dict, device: str | None, given: set[str]) -> None:
    """On a CPU, its defaults for the options not given; and a warning when too few steps will be timed."""
    speak = os.environ.get("RANK", "0") == "0"  # under torchrun rank 0 speaks for the run
    cores = len(os.sched_getaffinity(0))
    if _source("workers") == DEFAULT and options["workers"] > cores:  # more only queue for the cores
        options["workers"] = cores
    if _on_cpu(device):
        given |= {k for k in options if _source(k) != DEFAULT}
        note = for_cpu(options, given)
        if note and speak:
            click.echo(note, err=True)
    steps, warmup = options["steps"], options["timing_warmup"]
    if steps - warmup < MIN_TIMED_STEPS and not options["resume"] and speak:
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
