"""The autoencoder: a diffusers `AutoencoderKL` from a local directory (written by `save_pretrained`) or, where the
network allows, a hub id; checked against the data it will encode, and identified for the manifest by a hash of
its configuration and weights, so latents are never mixed with another autoencoder's."""

from __future__ import annotations

import hashlib
import json
import math
import socket
from dataclasses import dataclass
from pathlib import Path

import torch

from .paths import require_regular
from .vae_name import FIX, VaeError, check_vae_name


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
            raise VaeError(
                f"{i['name']} takes {i['in_channels']}-channel input, but {what} has {channels} channel(s); "
                "use an autoencoder made for this data (RGB images: 3, mel spectrograms: 1)"
            )
        if height % f or width % f:
            raise VaeError(
                f"{i['name']} downsamples by {f}, so height and width must be multiples of {f}; {what} is "
                f"{height}x{width}: convert with a --size (or --clip-seconds) that gives multiples of "
                f"{f}"
            )
        return i["latent_channels"], height // f, width // f

    @torch.no_grad()
    def moments(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The latent distribution's mean and standard deviation for inputs x (N, C, H, W) in the model's range."""
        dist = self.model.encode(x).latent_dist
        return dist.mean, dist.std

    @torch.no_grad()
    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Scaled latents (as the loaders deliver them) back to the autoencoder's input space."""
        return self.model.decode(unscale_latents(z, self.shift_factor, self.scaling_factor)).sample


def scale_latents(z: torch.Tensor, shift_factor: float, scaling_factor: float) -> torch.Tensor:
    """The autoencoder's latents -> model input: (z - shift_factor) * scaling_factor, as diffusers' latent diffusion
    scripts scale them (about unit variance). The cached latents (loaders) and the ones encoded in the training loop
    (`train --vae`) both go through here, so both train on the same input."""
    return (z - shift_factor) * scaling_factor


def unscale_latents(z: torch.Tensor, shift_factor: float, scaling_factor: float) -> torch.Tensor:
    """scale_latents undone: model output -> what the autoencoder's decoder takes."""
    return z / scaling_factor + shift_factor


def load_vae(name: str | Path, device: str | torch.device = "cpu") -> Vae:
    """Load `name` (a directory, else a hub id) onto `device`; VaeError with the fix when it cannot be used."""
    values = check_vae_name(name)  # before diffusers' import: seconds
    try:
        from diffusers import AutoencoderKL
    except ImportError:
        raise VaeError("--vae needs diffusers: pip install 'gpufeed[latent]'") from None
    path = Path(name)
    if path.exists():
        model = _from_dir(AutoencoderKL, path, values)
        label, where = str(path.resolve()), str(path / "config.json")
    else:  # a hub id (check_vae_name refused anything else)
        model, label = _from_hub(AutoencoderKL, str(name)), str(name)
        where = f"{name} (its config.json in the hub's cache)"
    check_config(model.config, where, loaded=True)  # the defaults diffusers filled in, and a hub model's values
    identity = _identity(model, label)  # on the host, before the move: the hash reads every tensor there
    model = model.to(device).eval().requires_grad_(False)
    return Vae(model, identity)


def check_vae_identity(vae: Vae, latent: dict, data: str = "the data") -> None:
    """Raise VaeError unless `vae` is the autoencoder that encoded the latents a manifest's `latent` entry describes:
    the same sha256 of configuration and weights (its name may differ: a copy in another place is the same one).
    Decoding through another autoencoder, or training on latents of one with another, gives wrong images without
    any error, so every place that loads an autoencoder for latent data asks this first."""
    recorded = latent.get("vae") if isinstance(latent, dict) else None
    recorded = recorded if isinstance(recorded, dict) else {}
    want, have = recorded.get("sha256"), vae.identity["sha256"]
    if want == have:
        return
    raise VaeError(
        f"{vae.identity['name']} (sha256 {_short(have)}) is not the autoencoder that encoded {data}: "
        f"{recorded.get('name')} (sha256 {_short(want)}); use that one, or convert the data again with this one"
    )


def _short(sha) -> str:
    return f"{sha[:16]}..." if isinstance(sha, str) and len(sha) > 16 else repr(sha)


def _number(v) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:  # an int beyond float's range
        return False


def _count(v) -> bool:
    return type(v) is int and v >= 1


# What gpufeed reads from an autoencoder's configuration, and what each must be. Checked before diffusers builds the
# model: a value it cannot use surfaces otherwise as a TypeError from inside diffusers, or (scaling_factor NaN, 0)
# as latents that are all NaN or all zero, accepted.
RULES = {
    "scaling_factor": (lambda v: _number(v) and v != 0, "a finite non-zero number"),
    "shift_factor": (lambda v: v is None or _number(v), "a finite number, or null for none"),
    "in_channels": (_count, "a positive integer"),
    "latent_channels": (_count, "a positive integer"),
    "block_out_channels": (
        lambda v: isinstance(v, (list, tuple)) and len(v) > 0 and all(_count(c) for c in v),
        "a non-empty list of positive integers",
    ),
}


def check_config(config, where: str, loaded: bool = False) -> None:
    """VaeError naming `where` (the config.json) and the key whose value gpufeed cannot use. Before loading only the
    keys present are checked (diffusers fills in defaults for the others); `loaded`, every one."""
    for key, (ok, must) in RULES.items():
        if key not in config and not loaded:
            continue
        value = config.get(key)
        if not ok(value):
            raise VaeError(f"{where}: {key} is {_shown(value)}; must be {must}")


def _shown(value) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, float) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _from_dir(cls, path: Path, values: dict):
    """The model in directory `path`, whose config.json (`values`) check_vae_name has read: an AutoencoderKL's."""
    check_config(values, str(path / "config.json"))
    for entry in path.iterdir():  # a FIFO in place of the weights would block diffusers' open for ever
        if not entry.is_dir():
            require_regular(entry, "file of the autoencoder")
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
        raise VaeError(
            f"--vae {name}: not a directory here, not in the hub's cache, and {host} cannot be reached "
            f"from this machine; {FIX}"
        )
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
    damaged = _non_finite_weight(model)
    if damaged:
        raise VaeError(
            f"{label}: weight {damaged} holds NaN or Inf values, so every latent it computes would too; the "
            "autoencoder's weights are damaged: save or download it again"
        )
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


def _non_finite_weight(model) -> str | None:
    """The name of the first floating-point tensor of the state dict holding a NaN or an infinity, else None."""
    for key, tensor in sorted(model.state_dict().items()):
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            return f"{key} ({int((~torch.isfinite(tensor)).sum())} of {tensor.numel()} values)"
    return None


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
