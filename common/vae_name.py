"""What `--vae` names, checked before torch or diffusers is imported (seconds of imports before a typo was refused):
an existing path must be a diffusers AutoencoderKL directory written by `save_pretrained`; anything else must look
like a hub id, owner/name. Loading it is common.vae's job."""

from __future__ import annotations

import json
import re
from pathlib import Path

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")  # "owner/name", as the hub spells repositories
FIX = "pass a local directory written by AutoencoderKL.save_pretrained"


class VaeError(ValueError):
    """The autoencoder cannot be used as asked; the message says what to pass instead."""


def check_vae_name(name: str | Path) -> dict | None:
    """VaeError with the fix when `name` is neither an AutoencoderKL directory nor shaped like a hub id; for a
    directory, its config.json as read (None for a hub id)."""
    path = Path(name)
    if not path.exists():
        if not HUB_ID.match(str(name)):
            raise VaeError(f"--vae {name}: no such directory (nor a hub id owner/name); {FIX}")
        return None
    config = path / "config.json"
    if not config.is_file():
        raise VaeError(f"{path}: no config.json, so not a diffusers model directory; {FIX}")
    try:
        values = json.loads(config.read_text())
        declared = values.get("_class_name")
    except (OSError, ValueError, AttributeError) as e:
        raise VaeError(f"{config}: unreadable ({e}); {FIX}") from None
    if declared != "AutoencoderKL":
        raise VaeError(f"{path}: its config.json describes a {declared}, not an AutoencoderKL; {FIX}")
    return values
