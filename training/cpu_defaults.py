"""`train` on a CPU: defaults sized for a CPU, where the GPU's take minutes a step.

The GPU's defaults train the paper's models (ddpm_cifar10, dit_b2: 36M and 130M parameters) at batch 128 in bf16
and end with a 64-image grid of 50 DDIM steps; on a 2-core CPU a 5-step run of dit_b2 took 9 minutes, 6 of them the
grid. On a CPU `train` takes the CPU presets and the values below instead, for every option left at its default
(an option given on the command line is kept), and says so in one line. Kept free of torch imports."""

from __future__ import annotations

from dataclasses import dataclass

CPU_MODELS = {"image": "tiny", "audio": "tiny", "latent": "dit_tiny"}  # by what the model trains on


@dataclass(frozen=True)
class CpuDefaults:
    batch_size: int = 32  # a step of tiny or dit_tiny at 32 takes well under a second on 2 cores
    precision: str = "fp32"  # bf16 autocast is emulated on CPUs without AMX: slower than fp32, not faster
    # a tenth of the run: the GPU's 5,000 warm-up steps outlast any CPU run, so the learning rate never reached --lr
    lr_warmup_share: float = 0.1
    sample_count: int = 16  # a 4x4 grid: enough to see the model works
    # latents go through the autoencoder's decoder to be seen: an SD-shaped one takes seconds per image on a CPU
    latent_sample_count: int = 8
    sample_steps: int = 10  # DDIM steps: a preview, not a quality measurement
    timing_warmup: int = 2  # no compilation or autotuning to leave out on a CPU; its steps are slow enough to count


def cpu_values(kind: str, latent: bool, steps: int, warmup: int, cores: int, d: CpuDefaults = CpuDefaults()) -> dict:
    """Option name (TrainConfig field) -> CPU value, for data of `kind` (latent: cached latents or --vae)."""
    return {
        "model": CPU_MODELS["latent" if latent else kind],
        "batch_size": d.batch_size,
        "precision": d.precision,
        "warmup": min(warmup, int(steps * d.lr_warmup_share)),
        "sample_count": d.latent_sample_count if latent else d.sample_count,
        "sample_steps": d.sample_steps,
        "timing_warmup": d.timing_warmup,
        "workers": max(1, cores // 2),  # loader workers share the cores with the model: half each
    }


LABELS = {  # how the one line names each choice
    "model": "{}",
    "batch_size": "batch {}",
    "precision": "{}",
    "warmup": "{} steps of learning-rate warm-up",
    "sample_count": "{}-image sample grids",
    "sample_steps": "of {} DDIM steps",
    "workers": "{} loader worker{}",
    "timing_warmup": "{} untimed steps",
}


def apply(options: dict, left_default: set[str], kind: str, cores: int) -> str | None:
    """Set the CPU value of every option in `left_default` (names as in TrainConfig) in `options`; returns the line
    that says what was chosen, or None when every option was given."""
    latent = kind == "latent" or bool(options.get("vae"))
    values = cpu_values(kind, latent, options["steps"], options["warmup"], cores)
    if options.get("loader") == "fastest":  # `bench fastest` picks the workers
        values.pop("workers")
    chosen = {k: v for k, v in values.items() if k in left_default}
    options.update(chosen)
    if not chosen:
        return None
    gpu = "dit_b2" if latent else {"image": "ddpm_cifar10", "audio": "ddpm_audio_mel"}.get(kind, "the GPU preset")
    said = ", ".join(LABELS[k].format(v, "s" * (v != 1)) for k, v in chosen.items()).replace(", of ", " of ")
    gpu_defaults = f"{gpu} at batch 128 in bf16, 64-image grids of 50 steps"
    return f"train on a CPU: {said} (the GPU's defaults, {gpu_defaults}, take minutes a step here); given options stay"
