"""`bench loaders`' options and their parse into the grid's typed config (bench.grid.runner.GridConfig): the values
that default differently on a CPU (what `train` takes there), each checked (bench/cli_checks.py) before any run
starts. The command itself, with --data and --json, is in bench/cli.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from common.cli import apply_options, check_vae_option, device_option, renamed, take_renamed
from dataprep.remote import is_remote
from loaders.workers import too_many_workers
from training.config import GRAD_SYNCS, PRECISIONS

from .cli_checks import (
    check_cpus,
    check_fits,
    check_ranks,
    parse_backends,
    parse_ints,
    parse_pins,
    pick_device,
    present_backends,
    read_manifest,
    remote_backends,
    remote_results_dir,
)
from .grid.job import BACKEND_NAMES, MODEL_CHOICES

if TYPE_CHECKING:
    from .grid.runner import GridConfig


# --precision of bench loaders and bench fastest: unset, what train takes on the device
precision_option = click.option(
    "--precision",
    type=click.Choice(PRECISIONS),
    default=None,
    help="[default: bf16; fp32 on a CPU, as train takes there].",
)


def _count(flag: str, *names: str, help: str, least: int = 1) -> Callable:
    """A whole-number option of at least `least`; None where not given (grid_config then takes the host's value)."""
    return click.option(flag, *names, type=click.IntRange(min=least), default=None, help=help)


OPTIONS = (
    click.option(
        "--backends",
        default=",".join(BACKEND_NAMES),
        help="Comma list of loader backends; none: only the model's data-free rate.",
    ),
    click.option(
        "--workers",
        default=None,
        help="Comma list of worker counts (ignored by gpu; >= 1 for ffcv/dali) "
        "[default: 0,4,8; on a CPU 0, half and all of its cores].",
    ),
    click.option("--pin-memory", "pins", default="on,off", help="on, off or on,off (CUDA only; torch and hdf5)."),
    click.option(
        "--batch-size",
        "batch_sizes",
        default=None,
        help="Comma list of batch sizes [default: 128; 32 on a CPU, as train takes there].",
    ),
    click.option(
        "--model",
        type=click.Choice(("auto", *MODEL_CHOICES)),
        default="auto",
        help="The preset in the real training loop; auto: the data's preset on a GPU (ddpm_cifar10 for images, "
        "ddpm_audio_mel for audio), tiny on CPU; none: the loader alone, its ceiling against that preset's appetite.",
    ),
    _count("--steps", help="Measured steps [default: 200; 10 on CPU].", least=2),
    _count(
        "--timing-warmup",
        "warmup",
        help="Steps run first and left out of every figure (start-up, compilation) [default: 20; 2 on CPU].",
        least=0,
    ),
    renamed("--warmup"),
    device_option,
    _count("--cpus", help="Pin each run (each rank) to N cores of its own [default: all, shared]."),
    click.option(
        "--nproc",
        "nprocs",
        default="1",
        help="Comma list of rank counts: each run under torchrun with N "
        "data-parallel ranks, one GPU each; several give a scaling table and plot.",
    ),
    _count("--global-batch", help="Strong scaling: GLOBAL // N per rank at each --nproc N, instead of --batch-size."),
    click.option(
        "--compile/--no-compile",
        default=False,
        help="torch.compile the model (the first configuration saves its kernels to the compile cache, the rest load "
        "them).",
    ),
    precision_option,
    click.option(
        "--vae",
        default=None,
        help="Pixel or clip data: encode every batch in the step with this AutoencoderKL "
        "(train --vae), the baseline that cached latents replace; the model defaults to dit_b2.",
    ),
    click.option(
        "--grad-sync",
        type=click.Choice(GRAD_SYNCS),
        default="auto",
        help="With --nproc: how the ranks average gradients, as train --grad-sync (auto: the way train takes there, "
        "recorded in each result; step-graph applies on one GPU too).",
    ),
    click.option("--repeats", type=click.IntRange(min=1), default=1, help="Runs per configuration (>= 2 on a GPU)."),
    click.option("--crosscheck", is_flag=True, help="Also one profiled run per configuration: trace vs CUDA events."),
    click.option("--resume", is_flag=True, help="Skip configurations whose JSON is already in --out."),
    click.option(
        "--time-limit",
        "time_limit_min",
        type=click.FloatRange(min=0, min_open=True),
        default=None,
        help="Minutes: start no configuration expected to end later (the first always runs); finish with --resume.",
    ),
    click.option(
        "--timeout",
        "timeout_s",
        type=click.FloatRange(min=0, min_open=True),
        default=None,
        help="Seconds a configuration may run before it is stopped and recorded as failed [default: 10x its estimate, "
        "at least 600].",
    ),
    click.option(
        "--out",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Results directory [default: DATA/.gpufeed-bench, where `train --loader fastest` looks; for "
        "s3://BUCKET/PREFIX ./.gpufeed-bench/BUCKET/PREFIX].",
    ),
    click.option("--no-progress", is_flag=True, help="No progress bar."),
    click.option("--json", "as_json", is_flag=True, help="Print the full summary (OUT/summary.json), not the answer."),
)


loaders_options = apply_options(OPTIONS)  # the options above, listed in this order by --help


def grid_config(
    data: Path | str,
    *,
    backends: str,
    workers: str | None,
    pins: str,
    batch_sizes: str | None,
    device: str | None,
    cpus: int | None,
    out: Path | None,
    no_progress: bool,
    time_limit_min: float | None,
    nprocs: str,
    **options,
) -> GridConfig:
    """The grid asked for, from the options above as click parsed them (the command's keyword arguments); a value
    this host or the data cannot run is a click.BadParameter naming the fix."""
    from training.cpu_defaults import CpuDefaults

    from .fastest.choice import default_results_dir
    from .grid.job import preset_for
    from .grid.runner import GridConfig

    take_renamed(options, "--warmup", "--timing-warmup", "warmup", "bench loaders")
    remote = is_remote(data)
    backends = remote_backends(backends, click.get_current_context()) if remote else parse_backends(backends)
    manifest = read_manifest(data)
    check_vae_option(options["vae"])
    device = pick_device(device)
    allowed = check_cpus(cpus)
    nprocs = parse_ints(nprocs, "--nproc", "1,2,4,8", 1)
    check_ranks(nprocs, cpus, allowed, device, options["global_batch"], click.get_current_context())
    if options["crosscheck"] and max(nprocs) > 1:
        raise click.BadParameter("the profiler cross-check runs one process; use --nproc 1", param_hint="--crosscheck")
    if options["crosscheck"] and not device.startswith("cuda"):
        raise click.BadParameter(
            "the profiler cross-check needs GPU kernels; use --device cuda", param_hint="--crosscheck"
        )
    cpu = not device.startswith("cuda")  # tiny takes ~1-4 s a step at batch 128 on 2 cores
    options["steps"] = options["steps"] or (10 if cpu else 200)
    options["warmup"] = options["warmup"] if options["warmup"] is not None else (2 if cpu else 20)
    if options["model"] == "auto":
        options["model"] = preset_for(data, device, options["vae"], manifest)
    # on a CPU what `train` takes there (training.cpu_defaults), so that `train --loader fastest` finds these runs
    cpu_batch, cpu_precision = CpuDefaults.batch_size, CpuDefaults.precision
    options["precision"] = options["precision"] or (cpu_precision if cpu else "bf16")
    batch_sizes = parse_ints(batch_sizes or (str(cpu_batch) if cpu else "128"), "--batch-size", "128,512", 1)
    cores = cpus or allowed
    workers = workers or (",".join(map(str, dict.fromkeys((0, max(1, cores // 2), cores)))) if cpu else "0,4,8")
    worker_counts = parse_ints(workers, "--workers", "0,4,8", 0)
    if problem := too_many_workers(max(worker_counts)):  # as train refuses them
        raise click.BadParameter(problem, param_hint="--workers")
    cfg = GridConfig(
        data=data,
        out=out or (remote_results_dir(data) if remote else default_results_dir(data)),
        backends=backends if remote else present_backends(manifest, backends, click.get_current_context()),
        workers=worker_counts,
        pin_memory=parse_pins(pins),
        batch_sizes=batch_sizes,
        device=device,
        cpus=cpus,
        nproc=nprocs,
        progress=not no_progress,
        time_limit_s=None if time_limit_min is None else 60 * time_limit_min,
        **options,
    )
    check_fits(manifest, cfg.batch_sizes, nprocs, options["global_batch"])
    return cfg
