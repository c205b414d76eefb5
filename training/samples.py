"""Preview grids from the EMA model: images as they are, audio as mel-spectrogram images (low bins at the bottom)."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from common.atomic import written


@torch.no_grad()
def sample_grid(
    ema_model,
    diffusion,
    shape: tuple[int, ...],
    steps: int,
    device: str,
    seed: int,
    labels: torch.Tensor | None = None,
    clip: bool = True,
) -> torch.Tensor:
    """DDIM samples (in [-1, 1] when `clip`; latents are not), drawn from a fixed seed so grids from successive
    steps are comparable; `labels` for a class-conditional model."""
    state = torch.random.get_rng_state(), (torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None)
    torch.manual_seed(seed)  # the training RNG is restored below: previews must not change the run
    try:
        x = diffusion.ddim_sample(ema_model, shape, steps=steps, device=device, y=labels, clip=clip)
    finally:
        torch.random.set_rng_state(state[0])
        if state[1] is not None:
            torch.cuda.set_rng_state_all(state[1])
    return x.float().clamp(-1, 1) if clip else x.float()


def save_grid(x: torch.Tensor, path: Path, kind: str) -> Path:
    """Write a grid PNG atomically; mels are flipped so frequency grows upward like a spectrogram plot."""
    from torchvision.utils import save_image

    if kind == "audio" and x.dim() == 4:
        x = x.flip(-2)
    if kind == "audio" and x.dim() == 3:
        x = _waveform_images(x)
    path.parent.mkdir(parents=True, exist_ok=True)
    with written(path) as tmp:  # a stop mid-write leaves no partial grid
        save_image((x + 1) / 2, tmp, nrow=int(math.ceil(math.sqrt(len(x)))), padding=2, format="PNG")
    return path


def _waveform_images(wave: torch.Tensor, height: int = 64) -> torch.Tensor:
    """(N, 1, T) waveforms drawn as (N, 1, height, T') envelope plots, so wave models get a preview too."""
    n, _, t = wave.shape
    width = min(t, 256)
    env = wave[:, 0, : t - t % width].reshape(n, width, -1).abs().amax(-1)  # peak per column
    rows = torch.linspace(1, 0, height, device=wave.device).view(1, height, 1)
    img = (rows <= env.view(n, 1, width)).float() * 2 - 1
    return img.unsqueeze(1)


def write_samples(
    ema_model,
    diffusion,
    shape,
    steps: int,
    device: str,
    seed: int,
    path: Path,
    kind: str,
    labels: torch.Tensor | None = None,
    preview=None,
) -> Path:
    """`preview` (training.latent.Preview) turns latents into images first."""
    was_training = ema_model.training
    ema_model.eval()
    try:
        x = sample_grid(ema_model, diffusion, shape, steps, device, seed, labels, clip=preview is None)
        if preview is not None:
            x, kind = preview(x)
        return save_grid(x, path, kind)
    finally:
        ema_model.train(was_training)
