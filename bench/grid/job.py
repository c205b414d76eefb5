"""One bench configuration (`Job`), the grid's expansion into jobs, and a rough estimate of how long they take.

Knobs a backend ignores are collapsed, not run again: `gpu` has no workers and no host copies; FFCV and DALI manage
their own page-locked buffers and run at least one thread; nothing is pinned for a CPU device. A collapsed knob is
recorded as None ("n/a" in tables). Kept free of torch imports: the CLI expands and estimates before anything runs."""

from __future__ import annotations

import itertools
import json
import os
import sys
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import NamedTuple

from loaders import BACKENDS, MIN_WORKERS, USES_PIN, USES_WORKERS
from training.config import KIND_MODELS, MODEL_NAMES

BACKEND_NAMES = tuple(BACKENDS)
MODEL_CHOICES = ("none", *MODEL_NAMES)  # none: the loader alone; the *_text models need data with captions
# FFCV's threads are numba's, which refuses more than NUMBA_NUM_THREADS (by default the cores the process may use):
# above that the loader runs that many (loaders.ffcv_backend), so larger counts are one configuration
THREAD_CAPPED = ("ffcv",)


@dataclass(kw_only=True)
class Job:
    kind: str  # "loader": a backend feeding the model (or `none`); "data_free": the model on a resident batch
    data: str  # the prepared directory, or s3://BUCKET/PREFIX
    backend: str | None  # None for data_free
    workers: int | None  # None where the backend has no such knob
    pin_memory: bool | None  # None where the knob does not apply
    batch_size: int
    model: str  # a MODEL_CHOICES name
    steps: int  # measured steps
    warmup: int  # steps run first and left out of every figure
    device: str
    cpus: int | None  # pin the process tree (each rank's, under nproc > 1) to this many cores; None: every core allowed
    compile: bool
    precision: str = "bf16"  # what the findings use: bf16 autocast, as the training loop defaults to
    repeat: int = 0
    crosscheck: bool = False  # profile the measured steps too and compare (GPU only; slows those steps)
    grid_id: str = ""  # when the grid started: `fastest` reads the latest grid's results
    seed: int = 0
    # data-parallel ranks under torchrun, one per GPU, each on its own shard and its own `cpus` cores: starvation
    # measured where it appears, N processes sharing the host (bench.grid.ranks)
    nproc: int = 1
    vae: str | None = None  # pixel or clip data: the autoencoder that encodes every batch in the step (train --vae)
    grad_sync: str = "ddp"  # how the ranks average gradients (train --grad-sync): nproc > 1, or step-graph

    @property
    def name(self) -> str:
        """File stem: unique within one results directory for a given model, batch size and CPU budget (a CPU run is
        marked, so that it never overwrites a GPU run of the same configuration)."""
        cpus = f"cpus{self.cpus}" if self.cpus else "cpusall"
        tail = f"bs{self.batch_size}-{self.model}-{cpus}-{self.precision}{'-compiled' if self.compile else ''}"
        if self.nproc > 1:  # nproc 1 keeps the names results had before ranks were a knob
            tail = f"np{self.nproc}-{tail}"
        if self.vae:
            tail += "-vae"
        if self.grad_sync != "ddp" and (self.nproc > 1 or self.grad_sync == "step-graph"):  # DDP keeps the old names
            tail += f"-{self.grad_sync}"
        if not self.device.startswith("cuda"):
            tail += f"-{self.device.split(':')[0]}"
        if self.kind == "data_free":
            return f"datafree-{tail}-r{self.repeat}"
        w = "na" if self.workers is None else self.workers
        pin = {None: "na", True: "on", False: "off"}[self.pin_memory]
        return f"{self.backend}-w{w}-pin{pin}-{tail}-r{self.repeat}{'-xcheck' if self.crosscheck else ''}"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Job:
        """A job from its record; a value train no longer offers becomes what is used instead, and stderr says so."""
        from training.config import instead

        known = {f.name for f in fields(cls)}
        kept = {k: v for k, v in d.items() if k in known}
        for key in ("precision", "grad_sync"):
            kept[key], line = instead(key, kept.get(key, getattr(cls, key)))
            if line:
                print(f"bench: a job with {line}", file=sys.stderr)
        return cls(**kept)


def runs_in_words(names: list[str]) -> str:
    """'5 loader runs and 1 data-free run' for these job names: a data-free run is no loader configuration."""
    free = sum(Path(n).name.startswith("datafree-") for n in names)
    loaders = len(names) - free
    said = f"{loaders} loader run{'s' * (loaders != 1)}"
    return said + (f" and {free} data-free run{'s' * (free != 1)}" if free else "")


def manifest_of(data: Path | str) -> dict:
    """The manifest of a prepared directory, or of an s3:// prefix (through dataprep.remote, which raises RemoteError
    naming the endpoint and the fix)."""
    from dataprep.remote import is_remote, load_remote_manifest

    if is_remote(data):
        return load_remote_manifest(data)
    return json.loads((Path(data) / "manifest.json").read_text())


def preset_for(data: Path | str, device: str, vae: str | None = None, manifest: dict | None = None) -> str:
    """The model whose appetite a bench measures against, for this data on this device: the preset that trains this
    kind of data on a GPU (KIND_MODELS); on a CPU a tiny one, where ddpm_cifar10 takes seconds a step and a grid would
    take hours. Latents, cached or encoded in the step (`vae`), train a DiT. `manifest`: the data's, where read."""
    kind = (manifest or manifest_of(data)).get("kind", "image")
    latent = kind == "latent" or vae is not None
    if not str(device).startswith("cuda"):
        return "dit_tiny" if latent else "tiny"
    return KIND_MODELS["latent" if latent else kind]


def thread_limit(cpus: int | None = None) -> int:
    """The most FFCV threads a run gets: NUMBA_NUM_THREADS where set, else its cores (`cpus`, or those allowed)."""
    if os.environ.get("NUMBA_NUM_THREADS", "").isdigit():
        return max(1, int(os.environ["NUMBA_NUM_THREADS"]))
    return cpus or len(os.sched_getaffinity(0))


def collapse(
    backend: str, workers: int, pin: bool, device: str, limit: int | None = None
) -> tuple[int | None, bool | None]:
    """The knob values this backend actually uses on this device (FFCV's threads at most `limit`, where given)."""
    w = max(workers, MIN_WORKERS.get(backend, 0)) if USES_WORKERS[backend] else None
    if w is not None and limit is not None and backend in THREAD_CAPPED:
        w = min(w, max(limit, MIN_WORKERS.get(backend, 0)))
    p = pin if USES_PIN[backend] and device.startswith("cuda") else None
    return w, p


def capped(backends, workers, cpus: int | None) -> str | None:
    """What the grid says when FFCV's thread limit folds worker counts together, else None."""
    limit = thread_limit(cpus)
    over = [w for w in workers if w > limit]
    if not over or not set(backends) & set(THREAD_CAPPED):
        return None
    counts = ", ".join(map(str, over))
    return (
        f"ffcv: numba runs at most {limit} threads here (the cores each run may use, or NUMBA_NUM_THREADS): "
        f"--workers {counts} run{'s' * (len(over) == 1)} as {limit}"
    )


def expand(
    *,
    data: Path | str,
    backends,
    workers,
    pin_memory,
    batch_sizes,
    model: str,
    steps: int,
    warmup: int,
    device: str,
    cpus: int | None,
    compile: bool,
    repeats: int,
    crosscheck: bool = False,
    grid_id: str = "",
    precision="bf16",
    nprocs: tuple[int, ...] = (1,),
    global_batch: int | None = None,
    vae: str | None = None,
    grad_sync: str = "auto",
) -> list[Job]:
    """Every distinct job of the grid, repeats interleaved (repeat 0 of everything first, so a Ctrl-C leaves a
    complete grid at fewer repeats rather than some configurations without any). A loader-only grid (model none)
    measures the data-free rate of the preset for this data and device (`preset_for`) too: each loader's ceiling is
    then reported as headroom over what that model eats. Each rank count in `nprocs` is a scenario of its own; with
    `global_batch` each runs at global_batch // nproc per rank (strong scaling) instead of `batch_sizes`."""
    common = dict(
        data=str(data),
        model=model,
        steps=steps,
        warmup=warmup,
        device=device,
        cpus=cpus,
        compile=compile,
        grid_id=grid_id,
        precision=precision,
        vae=vae,
    )
    jobs: list[Job] = []
    limit = thread_limit(cpus)
    manifest = manifest_of(data) if model == "none" else None  # read once: over the network for s3:// data
    for r in range(repeats):
        seen = set()
        for n, bs in [(k, b) for k in nprocs for b in ((global_batch // k,) if global_batch else batch_sizes)]:
            eater = {} if model != "none" else {"model": preset_for(data, device, vae, manifest)}
            way = train_way(grad_sync, compile, device, n, vae, eater.get("model", model))
            # what its data-free and loader jobs share
            scenario = common | dict(batch_size=bs, repeat=r, nproc=n, grad_sync=way)
            free = Job(kind="data_free", backend=None, workers=None, pin_memory=None, **(scenario | eater))
            at = len(jobs)
            for b, w, p in itertools.product(backends, workers, pin_memory):
                key = (b, *collapse(b, w, p, device, limit), bs, n)
                if key in seen:
                    continue
                seen.add(key)
                jobs.append(Job(kind="loader", backend=b, workers=key[1], pin_memory=key[2], **scenario))
            # the model's own rate first; the preset's beside the loader alone last (its steps cost far more than a
            # loader's, so a time limit or Ctrl-C takes it rather than the loaders asked for)
            jobs.insert(len(jobs) if model == "none" else at, free)
    if crosscheck and device.startswith("cuda"):  # one profiled copy of each configuration, after the timed ones
        jobs += [Job.from_dict(j.to_dict() | {"crosscheck": True}) for j in jobs if j.repeat == 0 and j.backend]
    return jobs


def train_way(grad_sync: str, compile: bool, device: str, nproc: int, vae: str | None, model: str) -> str:
    """The way `train` averages gradients for `grad_sync` in this scenario ("auto" resolved as train resolves it), so
    that a job's name and record say what ran."""
    if grad_sync != "auto":
        return grad_sync
    from training.grad_sync import choose

    text = model.endswith("_text")
    return choose(grad_sync, compiled=compile, device=device, world_size=nproc, vae=bool(vae), text=text)[0]


# Rough costs from the H100 runs in bench/results (`process_s` in each JSON): a first estimate only, the progress
# bar's rate takes over once runs finish. With these, f1, f2 and f3 are estimated at 40, 12.7 and 11.6 minutes; they
# took ~37, 13.3 and ~13.
TORCHRUN_S = 10.0  # torchrun's own start and rendezvous, before its ranks start like any run
START_S = 22.0  # a fresh interpreter importing torch, ffcv and DALI, building the loader and model, cuDNN's tuning


class ModelCost(NamedTuple):
    compile_s: float  # torch.compile's start with the grid's compile cache warm
    cold_compile_s: float  # the same with nothing cached yet: the grid's first compiled job pays it
    gpu_img_s: float  # images a second in eager bf16 on a GPU
    cpu_img_s: float  # images a second on a CPU


MODEL_COSTS = {
    "none": ModelCost(0.0, 0.0, 1e7, 1e6),
    "tiny": ModelCost(8.0, 40.0, 15_000.0, 400.0),
    "ddpm_cifar10": ModelCost(15.0, 125.0, 2_000.0, 6.0),
    "ddpm_audio_mel": ModelCost(20.0, 150.0, 700.0, 1.5),
    "dit_b2": ModelCost(15.0, 60.0, 1_000.0, 2.0),
    "dit_tiny": ModelCost(8.0, 40.0, 15_000.0, 400.0),
}
COMPILED_SPEEDUP = 2.5  # ddpm_cifar10 compiled with CUDA graphs against eager (BENCHMARKS.md, What the model eats)
LOADER_IMG_S = {
    "torch": 1_500.0,
    "hdf5": 20_000.0,
    "ffcv": 60_000.0,
    "dali": 70_000.0,
    "gpu": 1e7,
    "stream": 15_000.0,
}  # per worker


def estimate_s(jobs: list[Job]) -> float:
    """Seconds the jobs should take, assuming the loader and the model do not overlap (pessimistic)."""
    total, compiled = 0.0, set()
    for j in jobs:
        n = (j.steps + j.warmup) * j.batch_size
        cost = MODEL_COSTS[j.model.removesuffix("_text")]  # a text form runs at about its base model's rate
        model_rate = (cost.gpu_img_s if j.device.startswith("cuda") else cost.cpu_img_s) * (
            COMPILED_SPEEDUP if j.compile else 1
        )
        loader_rate = LOADER_IMG_S[j.backend] * max(1, j.workers or 1) if j.backend else 1e9
        total += START_S + n / min(model_rate, loader_rate) + (TORCHRUN_S if j.nproc > 1 else 0.0)
        if j.compile:
            total += cost.compile_s if j.model in compiled else cost.cold_compile_s
            compiled.add(j.model)
    return total
