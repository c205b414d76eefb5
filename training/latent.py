"""Latent diffusion in the loop: `train --vae` encodes every batch inside the step (what users do today, and what
`dataprep convert --vae` replaces), and previews turn sampled latents back into images through the decoder.

The online encoding draws z = mean + std * noise from the latent distribution and scales it as the cached latents
are scaled (common.vae.scale_latents), so both paths train the same model on the same kind of input."""

from __future__ import annotations

import sys

import torch

from common.vae import VaeError, check_vae_identity, load_vae, scale_latents

from .data import DataError, DataSpec


class OnlineEncoder:
    """Pixels (N, 3, H, W) in [-1, 1], or waves (N, 1, T) at 16 kHz, -> scaled latents (N, C, h, w), on the device."""

    def __init__(self, name: str, spec: DataSpec, data, device: str, compile: bool) -> None:
        try:
            self.vae = load_vae(name, device)
            self.audio = spec.kind == "audio"
            channels, height, width = self._input(spec) if self.audio else spec.shape
            self.shape = self.vae.latent_shape(channels, height, width, f"{data} ({channels}x{height}x{width})")
        except VaeError as e:
            raise DataError(str(e)) from None
        self._moments = torch.compile(self.vae.moments, dynamic=False) if compile else self.vae.moments

    def _input(self, spec: DataSpec) -> tuple[int, int, int]:
        from dataprep.features import audioldm_input

        audio = spec.manifest["audio"]
        return audioldm_input(audio["sample_rate"], audio.get("channels", 1), spec.manifest["sample_shape"][-1])[0]

    @torch.no_grad()
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.audio:
            from dataprep.features import audioldm_mel

            x = audioldm_mel(x[:, 0].float())[:, None]
        mean, std = self._moments(x)
        z = mean.float() + std.float() * torch.randn(mean.shape, device=mean.device)
        z = scale_latents(z, self.vae.shift_factor, self.vae.scaling_factor)
        return z.contiguous(memory_format=torch.channels_last) if z.is_cuda else z


class Preview:
    """Sampled model inputs -> (what a sample grid shows, its kind). Latents go through the autoencoder's decoder:
    the one `--vae` names, or the one the manifest names (loaded at the first grid); where it cannot be loaded, or
    is not the one that encoded the data (its sha256 differs from the manifest's: another autoencoder saved under the
    same name), the grid shows the latent channels, and says why once. Not an error: a grid is a view of the
    training, which goes on as well without it, and images decoded through another autoencoder would look like a
    model that learned nothing."""

    def __init__(self, spec: DataSpec, encoder: OnlineEncoder | None, device: str) -> None:
        self.spec, self.device = spec, device
        self.vae = encoder.vae if encoder else None
        self.origin = "audio" if encoder and encoder.audio else (spec.manifest or {}).get("latent", {}).get("of")
        self.latent = encoder is not None or spec.kind == "latent"
        self.failed = False

    def _decoder(self):
        if self.vae is None and not self.failed:
            latent = self.spec.manifest["latent"]
            try:
                vae = load_vae(latent["vae"]["name"], self.device)
                check_vae_identity(vae, latent, "these latents")
                self.vae = vae
            except VaeError as e:
                print(f"samples: showing latent channels, not images: {e}", file=sys.stderr)
                self.failed = True
                return None
        return self.vae

    @torch.no_grad()
    def __call__(self, z: torch.Tensor) -> tuple[torch.Tensor, str]:
        if not self.latent:
            return z.clamp(-1, 1), self.spec.kind
        vae = self._decoder()
        if vae is None:
            return _spread(z[:, :3] if z.shape[1] >= 3 else z[:, :1]), "image"
        x = vae.decode(z.float())
        if self.origin == "audio":  # (N, 1, frames, mels) log-mel -> (N, 1, mels, frames), as the audio grids draw
            return _spread(x.transpose(-1, -2)), "audio"
        return x.clamp(-1, 1), "image"


def _spread(x: torch.Tensor) -> torch.Tensor:
    """Each sample's values stretched over [-1, 1], so channels or log-mels of any range are visible."""
    lo = x.amin(dim=(1, 2, 3), keepdim=True)
    hi = x.amax(dim=(1, 2, 3), keepdim=True)
    return (x - lo) / (hi - lo).clamp_min(1e-6) * 2 - 1
