"""Tiny real diffusers autoencoders written with save_pretrained, and readers of stored latents, shared by the latent
tests (conftest.py builds them once per session)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from dataprep.formats import module
from dataprep.manifest import load_manifest

SCALING, SHIFT = 0.5, 0.1  # not diffusers' defaults (0.18215, none), so a loader that skips either is caught
LOGVAR_BIAS = -6.0  # a trained autoencoder's posterior is narrow: std ~0.05 here instead of ~1 at random init


def build_vae(out: Path, *, in_channels: int, latent_channels: int, widths: tuple[int, ...]) -> Path:
    """An AutoencoderKL with random weights (seeded) and a narrow posterior, saved as a model directory."""
    from diffusers import AutoencoderKL

    torch.manual_seed(0)
    n = len(widths)
    vae = AutoencoderKL(
        in_channels=in_channels,
        out_channels=in_channels,
        down_block_types=("DownEncoderBlock2D",) * n,
        up_block_types=("UpDecoderBlock2D",) * n,
        block_out_channels=widths,
        latent_channels=latent_channels,
        layers_per_block=1,
        norm_num_groups=4,
        sample_size=16,
        scaling_factor=SCALING,
        shift_factor=SHIFT,
    )
    with torch.no_grad():  # quant_conv's output channels are the mean's, then the log-variance's
        vae.quant_conv.bias[latent_channels:] += LOGVAR_BIAS
    vae.save_pretrained(out)
    return out


def build_image_vae(out: Path) -> Path:
    """RGB in, 4 latent channels, downsampling 2: 32x32 images -> (4, 16, 16)."""
    return build_vae(out, in_channels=3, latent_channels=4, widths=(8, 16))


def build_audio_vae(out: Path) -> Path:
    """AudioLDM-shaped: a 1-channel log-mel in, 8 latent channels, downsampling 4 (three blocks)."""
    return build_vae(out, in_channels=1, latent_channels=8, widths=(4, 8, 8))


def read_stored(data_dir: Path, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """Every stored sample and label of one format, in manifest order."""
    chunks = list(module(fmt).read_chunks(data_dir, load_manifest(data_dir), 256))
    return np.concatenate([c.x for c in chunks]), np.concatenate([c.y for c in chunks])


def delivered(stored: np.ndarray, latent: dict, view: int = 0) -> torch.Tensor:
    """What a loader delivers unaugmented for stored moments (N, V, 2, C, h, w): the view's mean, shifted and
    scaled, computed in float64 from the float16 values (the loaders compute in float32)."""
    mean = torch.from_numpy(stored[:, view, 0].astype(np.float64))
    return ((mean - latent["shift_factor"]) * latent["scaling_factor"]).float()
