"""The autoencoder: a diffusers `AutoencoderKL` from a local directory (written by `save_pretrained`) or, where the
network allows, a hub id; checked against the data it will encode, and identified for the manifest by a hash of
its configuration and weights, so latents are never mixed with another autoencoder's."""

from __future__ import annotations

import hashlib
import json
import socket
from dataclasses import dataclass
from pathlib import Path

import torch

from ..vae_name import FIX, VaeError, check_vae_name


@dataclass
class Vae:
    model: torch.nn.Module  # diffusers.AutoencoderKL, in eval mode, on its device
    identity: dict  # what the manifest records: name, sha256, scaling_factor, shift_factor, channels, downsample

    @property
    def scaling_factor(self) -> float:
        return self.identity["scaling_factor"]

    @property
    def shift_factor(self) -> float:
        return self.identity["shift_factor"]

    @property
    def downsample(self) -> int:
        return self.identity["downsample"]

    def latent_shape(self, channels: int, height: int, width: int, what: str) -> tuple[int, int, int]:
        """(latent channels, h, w) for inputs of that shape, or a VaeError naming the mismatch."""
        i, f = self.identity, self.downsample
        if channels != i["in_channels"]:
            raise VaeError(f"{i['name']} takes {i['in_channels']}-channel input, but {what} has {channels} channel(s); "
                           "use an autoencoder made for this data (RGB images: 3, mel spectrograms: 1)")  # fmt: skip
        if height % f or width % f:
            raise VaeError(f"{i['name']} downsamples by {f}, so height and width must be multiples of {f}; {what} is "
                           f"{height}x{width}: convert with a --size (or --clip-seconds) that gives multiples of "
                           f"{f}")  # fmt: skip
        return i["latent_channels"], height // f, width // f

    @torch.no_grad()
    def moments(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The latent distribution's mean and standard deviation for inputs x (N, C, H, W) in the model's range."""
        dist = self.model.encode(x).latent_dist
        return dist.mean, dist.std

    @torch.no_grad()
    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Scaled latents (as the loaders deliver them) back to the autoencoder's input space."""
        return self.model.decode(z / self.scaling_factor + self.shift_factor).sample


def load_vae(name: str | Path, device: str | torch.device = "cpu") -> Vae:
    """Load `name` (a directory, else a hub id) onto `device`; VaeError with the fix when it cannot be used."""
    check_vae_name(name)  # before diffusers' import: seconds
    try:
        from diffusers import AutoencoderKL
    except ImportError:
        raise VaeError("--vae needs diffusers: pip install 'gpufeed[latent]'") from None
    path = Path(name)
    if path.exists():
        model = _from_dir(AutoencoderKL, path)
        label = str(path.resolve())
    else:
        model, label = _from_hub(AutoencoderKL, str(name)), str(name)
    model = model.to(device).eval().requires_grad_(False)
    return Vae(model, _identity(model, label))


def _from_dir(cls, path: Path):
    try:
        return cls.from_pretrained(path)
    except Exception as e:  # missing or damaged weights: diffusers raises OSError, ValueError or safetensors' errors
        raise VaeError(f"{path}: cannot load the AutoencoderKL ({type(e).__name__}: {e}); {FIX}") from None


def _from_hub(cls, name: str):
    try:
        return cls.from_pretrained(name, local_files_only=True)  # downloaded before: no network needed
    except Exception:
        pass
    from huggingface_hub import constants

    host = constants.ENDPOINT.split("://")[-1].split("/")[0]
    if constants.HF_HUB_OFFLINE or not _reachable(host):  # else the hub client retries for half a minute
        raise VaeError(f"--vae {name}: not a directory here, not in the hub's cache, and {host} cannot be reached "
                       f"from this machine; {FIX}")  # fmt: skip
    try:
        return cls.from_pretrained(name)
    except Exception as e:
        raise VaeError(f"--vae {name}: cannot load it from the hub ({type(e).__name__}: {e}); {FIX}") from None


def _reachable(host: str, timeout: float = 3.0) -> bool:
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _identity(model, label: str) -> dict:
    c = model.config
    return {
        "name": label,
        "class": "AutoencoderKL",
        "sha256": weights_sha256(model),
        "scaling_factor": float(c.scaling_factor),
        "shift_factor": float(c.get("shift_factor") or 0.0),  # SD's VAEs have none; SD3's and Flux's shift
        "in_channels": int(c.in_channels),
        "latent_channels": int(c.latent_channels),
        "downsample": 2 ** (len(c.block_out_channels) - 1),  # one halving per encoder block but the last
    }


def weights_sha256(model) -> str:
    """sha256 of the configuration (public keys, sorted) and every tensor of the state dict in name order: the same
    for the same autoencoder whether it came from safetensors, a .bin or the hub."""
    h = hashlib.sha256()
    config = {k: v for k, v in dict(model.config).items() if not k.startswith("_")}
    h.update(json.dumps(config, sort_keys=True, default=str).encode())
    for key, tensor in sorted(model.state_dict().items()):
        h.update(key.encode())
        h.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()
