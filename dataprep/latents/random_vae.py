"""An autoencoder without the network: diffusers' AutoencoderKL built from a published shape with random weights and
written with `save_pretrained`, so `dataprep convert --vae PATH` and `train` load it by path, the code path a real
checkpoint takes. Speed does not depend on the weights; quality would, so such latents support no quality claim.

    dataprep make-vae PATH [--shape sd|audioldm|tiny]

- sd: Stable Diffusion's AutoencoderKL (block_out_channels 128-256-512-512, 2 layers per block, 4 latent channels,
  downsampling 8, scaling_factor 0.18215): its encoder has 34.2M parameters.
- audioldm: 1 input channel (a log-mel), 128-256-512 (downsampling 4), 8 latent channels, as AudioLDM's 16 kHz VAE;
  scaling_factor 1.0 (AudioLDM estimates its own from data).
- tiny: RGB, 8-16 channels, downsampling 2, 4 latent channels: seconds on a CPU, for trying the commands."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from common.noreplace import rename_new

SHAPES = {
    "sd": dict(in_channels=3, block_out_channels=(128, 256, 512, 512), latent_channels=4, scaling_factor=0.18215),
    "audioldm": dict(in_channels=1, block_out_channels=(128, 256, 512), latent_channels=8, scaling_factor=1.0),
    "tiny": dict(in_channels=3, block_out_channels=(8, 16), latent_channels=4, scaling_factor=0.18215),
}
NARROW = {"tiny": dict(layers_per_block=1, norm_num_groups=4)}  # the published shapes: 2 layers, 32 groups


def make_vae(out: Path, shape: str = "sd") -> dict:
    """Write an AutoencoderKL of `shape` (SHAPES) with random weights (seed 0) to `out`, which must not exist; its
    parameter counts. Written under a temporary name and renamed, so a stopped write leaves no model behind."""
    import torch
    from diffusers import AutoencoderKL

    out = Path(out)
    if os.path.lexists(out):
        raise FileExistsError(f"{out}: already exists; give a new path for the autoencoder")
    kw = SHAPES[shape]
    n = len(kw["block_out_channels"])
    torch.manual_seed(0)
    vae = AutoencoderKL(
        out_channels=kw["in_channels"],
        down_block_types=("DownEncoderBlock2D",) * n,
        up_block_types=("UpDecoderBlock2D",) * n,
        sample_size=256,
        **(dict(layers_per_block=2, norm_num_groups=32) | NARROW.get(shape, {}) | kw),
    )
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        vae.save_pretrained(tmp)
        rename_new(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "encoder": sum(p.numel() for p in vae.encoder.parameters()),
        "all": sum(p.numel() for p in vae.parameters()),
    }
