"""`TrainConfig`: every knob of one training run, mirrored one to one by the `train` CLI options.

Kept free of torch imports so `train --help` stays instant."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from loaders import BACKENDS
from loaders.workers import too_many_workers

# The names of training: the one registry the CLIs (train, bench) and the model presets read.
LOADER_NAMES = ("fastest", *BACKENDS)  # "fastest": `bench fastest` picks (training.data)
# each model preset, and where its function is: imported when a run builds it (training.model.preset)
MODELS = {
    "ddpm_cifar10": "training.model:ddpm_cifar10",
    "ddpm_audio_mel": "training.model:ddpm_audio_mel",
    "tiny": "training.model:tiny",
    "dit_b2": "training.dit:dit_b2",
    "dit_tiny": "training.dit:dit_tiny",
    # conditioned on captions: cross-attention to the caption's tokens
    "dit_b2_text": "training.dit_text:dit_b2_text",
    "dit_tiny_text": "training.dit_text:dit_tiny_text",
    "ddpm_cifar10_text": "training.unet_text:ddpm_cifar10_text",
    "tiny_text": "training.unet_text:tiny_text",
}
MODEL_NAMES = tuple(MODELS)
KIND_MODELS = {"image": "ddpm_cifar10", "audio": "ddpm_audio_mel", "latent": "dit_b2"}  # the model a GPU trains by kind
# each way offered has a row in docs/BENCHMARKS.md where it is the fastest measured (a test checks the names)
PRECISIONS = ("bf16", "fp32")
GRAD_SYNC_WAYS = ("ddp", "step-graph")  # training.grad_sync's ways
GRAD_SYNCS = ("auto", *GRAD_SYNC_WAYS)  # auto: the fastest measured way that applies (training.grad_sync.choose)
# values no longer offered, as old checkpoints and bench records name them: what is used instead, and why
REMOVED = {
    "precision": {"fp16": ("bf16", "bf16 autocast needs no loss scaling")},
    "grad_sync": {
        "flat": ("step-graph", "its one all-reduce is the step graph's"),
        "ddp-nosplit": ("ddp", "no measurement found it faster than the step graph"),
        "ddp-bucket100": ("ddp", "no measurement found it faster than the step graph"),
    },
    "compile_mode": {
        mode: ("reduce-overhead", "torch.compile's CUDA graphs measured fastest")
        for mode in ("default", "max-autotune", "max-autotune-no-cudagraphs")
    },
}


def instead(key: str, value: object) -> tuple[object, str | None]:
    """(the value to use, a line saying so) for a value train no longer offers; (value, None) for any other."""
    new = REMOVED.get(key, {}).get(value)
    if new is None:
        return value, None
    return new[0], f"{key}={value}, no longer offered: {new[0]} is used instead ({new[1]})"


def default_compile_cache() -> Path:
    """$GPUFEED_COMPILE_CACHE, else ~/.cache/gpufeed/compile ($XDG_CACHE_HOME respected)."""
    if os.environ.get("GPUFEED_COMPILE_CACHE"):
        return Path(os.environ["GPUFEED_COMPILE_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpufeed" / "compile"


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclass(kw_only=True)
class TrainConfig:
    data: Path | str  # a directory written by `dataprep convert` (has manifest.json), or s3://BUCKET/PREFIX
    loader: str = "fastest"  # a loaders.BACKENDS name, or "fastest" to let bench pick on this machine
    model: str | None = None  # a MODEL_PRESETS name; None: ddpm_cifar10 / ddpm_audio_mel / dit_b2 by the data's kind
    # pixel or clip data only: encode every batch with this AutoencoderKL inside the step, the baseline that
    # `dataprep convert --vae` replaces (a directory written by save_pretrained, or a hub id)
    vae: str | None = None
    # text models: a text encoder folder (dataprep make-text-encoder, save_pretrained) that encodes raw captions in the
    # step (the online baseline that cached embeddings replace), the empty caption once, and the sample prompts
    text_encoder: str | None = None
    caption_dropout: float = 0.1  # captions replaced by the empty one, for classifier-free guidance (10%, as SD)
    sample_prompts: Path | None = None  # text models: grids from these prompts (a file, one a line), guided
    guidance_scale: float = 4.5  # classifier-free guidance of the prompt grids (PixArt-alpha's default)
    batch_size: int = 128  # per rank; Ho et al. (2020) trained CIFAR-10 at 128
    steps: int = 10_000  # total optimizer steps, counted across resumes (the paper ran 800k)
    lr: float = 2e-4  # the paper's CIFAR-10 learning rate
    warmup: int = 5000  # linear learning-rate warm-up steps, as in the paper
    grad_clip: float = 1.0  # global grad-norm clip, as in the paper; 0 disables
    ema: float = 0.9999  # EMA decay of the sampling weights, as in the paper
    precision: str = "bf16"  # bf16 autocast needs no loss scaling; fp32 for reference
    # torch.compile the UNet, with CUDA graphs ("reduce-overhead": a compiled ddpm_cifar10 step is launch-bound without
    # them, docs/BENCHMARKS.md, "What the model eats"); faster on GPU after a minute of compiling, pointless on CPU
    compile: bool = False
    # torch's portable compile cache (training.compile_cache): a new machine of the same GPU and torch loads the kernels
    # an earlier run saved there instead of generating and building them again; None: neither read nor written
    compile_cache: Path | None = field(default_factory=default_compile_cache)
    # keep Dynamo's traced program in it too (training.compile_cache): 2.5 s less of an H100's start from the cache,
    # but torch weakens the program's guards and keys it by the forward's name alone in the shared local cache: opt-in
    compile_traced_program: bool = False
    # under torchrun: how the ranks average gradients (training.grad_sync); all give the same losses to rounding.
    # "auto": the step graph (the whole step as one CUDA graph) where it applies, the fastest measured; DDP elsewhere
    grad_sync: str = "auto"
    channels_last: bool = True  # NHWC convolutions use tensor cores without transposes on CUDA
    workers: int = 4  # loader worker processes/threads (a rank's share of the CPU)
    pin_memory: bool = True  # page-locked host batches copy to the GPU asynchronously
    cache_limit: int | str | None = None  # stream loader: local disk for shards (bytes, "20GB"); None: LitData's budget
    augment: bool = True  # random horizontal flip for images, as in the paper
    out: Path = Path("runs/train")  # RUN_DIR: ckpt.pt, metrics.jsonl, samples/, profile/
    resume: bool = False  # continue from RUN_DIR/ckpt.pt; without it an existing checkpoint is an error, never lost
    # resume on data (or a --vae) other than the checkpoint's: refused by default, as a run that silently changed its
    # data (a re-conversion, another autoencoder's latents) is not the run its checkpoint describes
    resume_other_data: bool = False
    profile: bool = False  # write a profiler trace and operator table for `profile_steps` steps after warm-up
    profile_steps: int = 5  # enough steps for a stable operator ranking, few enough to keep the trace small
    sample_every: int = 5000  # EMA sample grid every K steps (and at the end); 0 disables
    sample_count: int = 64  # images in the grid (8x8)
    sample_steps: int = 50  # DDIM steps for previews: close to ancestral quality at 1/20 of the cost
    ckpt_every: int = 1000  # checkpoint every K steps and at exit (minutes of a GPU's work at risk); 0: never (bench)
    log_every: int = 100  # log line + metrics.jsonl record every K steps; each one syncs the device once
    seed: int = 0  # model init, data order (seed, epoch) and noise draws; each rank adds its rank to the noise seed
    device: str = field(default_factory=_default_device)  # cuda when present; under torchrun cuda:LOCAL_RANK
    timing_warmup: int = 20  # steps left out of the timing figures: compilation, cuDNN autotune, worker start-up
    progress: bool = True  # tqdm bar on rank 0; tests turn it off
    tensorboard: bool = False  # also write the logged scalars and sample grids to RUN_DIR/tensorboard (optional extra)

    def __post_init__(self) -> None:
        remote = str(self.data).startswith("s3://")  # a URL stays a string: a Path would fold its //
        self.data, self.out = self.data if remote else Path(self.data), Path(self.out)
        self.compile_cache = Path(self.compile_cache) if self.compile_cache else None
        checks = [
            (self.loader in LOADER_NAMES, f"loader must be one of {', '.join(LOADER_NAMES)}, not {self.loader!r}"),
            (self.model is None or self.model in MODEL_NAMES, f"model must be one of {', '.join(MODEL_NAMES)}"),
            (self.precision in PRECISIONS, f"precision must be one of {', '.join(PRECISIONS)}"),
            (self.grad_sync in GRAD_SYNCS, f"grad_sync must be one of {', '.join(GRAD_SYNCS)}"),
            (self.batch_size > 0 and self.steps > 0, "batch_size and steps must be positive"),
            (self.lr > 0 and 0 <= self.ema < 1, "lr must be positive and ema in [0, 1)"),
            (
                min(self.warmup, self.grad_clip, self.workers, self.sample_every, self.timing_warmup) >= 0,
                "warmup, grad_clip, workers, sample_every and timing_warmup must be >= 0",
            ),
            (self.ckpt_every >= 0 and self.log_every > 0, "ckpt_every must be >= 0 and log_every positive"),
            (
                self.grad_sync != "step-graph" or not self.vae,
                "--grad-sync step-graph captures the step as one CUDA graph, without --vae's encoder: use latents "
                "cached by `dataprep convert --vae`",
            ),
            (self.resume or not self.resume_other_data, "--resume-other-data goes with --resume"),
            (0 <= self.caption_dropout < 1, f"caption_dropout must be in [0, 1), not {self.caption_dropout}"),
            (
                self.grad_sync != "step-graph" or not (self.text_encoder or (self.model or "").endswith("_text")),
                "--grad-sync step-graph captures the step as one CUDA graph, whose shapes are fixed: captions padded "
                "per batch are not; use another --grad-sync for text models",
            ),
            (
                not (self.vae and self.loader == "fastest"),
                "--loader fastest does not measure --vae runs; pass a "
                "backend name (`bench loaders --vae VAE` measures each)",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        problem = too_many_workers(self.workers)
        if problem:
            raise ValueError(problem)

    def to_dict(self) -> dict:
        return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}


def measuring_run(out: Path | str, steps: int, **fields) -> TrainConfig:
    """A run that only measures (bench's, the studies'): `steps` steps in the scratch folder `out`, with no checkpoints,
    sample grids or progress bar, and its one log line at the end."""
    return TrainConfig(out=out, steps=steps, ckpt_every=0, sample_every=0, log_every=steps, progress=False, **fields)
