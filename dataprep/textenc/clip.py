"""CLIP's text model (Stable Diffusion 1/2, SDXL, SD3): transformers' CLIPTextModel or CLIPTextModelWithProjection
with a CLIPTokenizer. Pooled: the projected text embedding (with a projection), else the end-of-text token's state."""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from .hf import TransformersEncoder, save_folder
from .vocab import BOS, EOS, write_clip_vocab

# text towers: "clip-l" as CLIP ViT-L/14's (Stable Diffusion 1's encoder, the first of SDXL's and SD3's)
SIZES = {
    "tiny": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, projection_dim=32),
    "clip-l": dict(
        hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12, projection_dim=768
    ),
}
CONTEXT = 77  # CLIP's position table: 75 caption tokens between start and end of text


class ClipEncoder(TransformersEncoder):
    kind = "clip"

    @staticmethod
    def model_class(config: dict):
        import transformers

        projected = "CLIPTextModelWithProjection" in (config.get("architectures") or [])
        return transformers.CLIPTextModelWithProjection if projected else transformers.CLIPTextModel

    @staticmethod
    def token_limit(config) -> int:
        return int(config.get("max_position_embeddings", CONTEXT))

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.model(input_ids=ids, attention_mask=mask)
        return out.last_hidden_state, out.text_embeds if hasattr(out, "text_embeds") else out.pooler_output

    @staticmethod
    def pooled_size(config) -> int:
        projected = "CLIPTextModelWithProjection" in (config.architectures or [])
        return int(config.projection_dim if projected else config.hidden_size)


def make(path: Path, size: str) -> Path:
    """A CLIPTextModelWithProjection of `size` with random weights and OpenAI's CLIP tokenizer, saved in `path`."""
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, CLIPTokenizer

    with tempfile.TemporaryDirectory() as vocab_dir:
        vocab, merges = write_clip_vocab(Path(vocab_dir))
        tokenizer = CLIPTokenizer(str(vocab), str(merges), pad_token=EOS, model_max_length=CONTEXT)
    config = CLIPTextConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=CONTEXT,
        bos_token_id=tokenizer.convert_tokens_to_ids(BOS),
        eos_token_id=tokenizer.convert_tokens_to_ids(EOS),
        pad_token_id=tokenizer.convert_tokens_to_ids(EOS),
        **SIZES[size],
    )
    torch.manual_seed(0)  # the same weights on every build
    return save_folder(path, CLIPTextModelWithProjection(config), tokenizer)
