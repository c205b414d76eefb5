"""Latents cached once: a diffusers `AutoencoderKL` encodes every sample at conversion, so a latent diffusion model
trains on what the autoencoder would have computed in every step, for the price of reading it.

`vae.py` loads and identifies the autoencoder (the same code serves `train --vae`, which encodes in the loop),
`encode.py` turns decoded chunks into stored latents (one or several GPUs); the log-mel spectrogram an
AudioLDM-shaped autoencoder takes is dataprep.features.audioldm_mel. What is stored and why is in docs/DESIGN.md
("Latents")."""

from __future__ import annotations

from common.vae import VaeError, check_vae_identity, load_vae

__all__ = ["VaeError", "check_vae_identity", "load_vae"]
