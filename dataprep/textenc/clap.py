"""CLAP's text model for audio (AudioLDM, its successors): transformers' ClapTextModelWithProjection (a RoBERTa)
with its tokenizer. Pooled: the projected text embedding, the vector CLAP matches against audio."""

from __future__ import annotations

from pathlib import Path

import torch

from .hf import TransformersEncoder, save_folder
from .vocab import unigram_tokenizer

SIZES = {
    "tiny": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, projection_dim=32),
}
DEFAULT_TOKENS = 77  # as the CLIP-sized captions AudioLDM's pipelines tokenize
PAD = 1  # RoBERTa's padding id, which also offsets its position ids by PAD + 1


class ClapEncoder(TransformersEncoder):
    kind = "clap"
    default_tokens = DEFAULT_TOKENS
    model_name, pooled_field = "ClapTextModelWithProjection", "projection_dim"

    @staticmethod
    def token_limit(config) -> int:
        return int(config.get("max_position_embeddings", 514)) - int(config.get("pad_token_id", PAD)) - 1

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.model(input_ids=ids, attention_mask=mask)
        return out.last_hidden_state, out.text_embeds


def make(path: Path, size: str) -> Path:
    """A ClapTextModelWithProjection of `size` with random weights and a RoBERTa-shaped unigram tokenizer over CLIP's
    vocabulary, saved in `path`."""
    from transformers import ClapTextConfig, ClapTextModelWithProjection, PreTrainedTokenizerFast

    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # RoBERTa's ids 0..4
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=unigram_tokenizer(specials, "<s> $A </s>"),
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        mask_token="<mask>",
        model_max_length=DEFAULT_TOKENS,
    )
    config = ClapTextConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=DEFAULT_TOKENS + PAD + 1,
        pad_token_id=PAD,
        bos_token_id=0,
        eos_token_id=2,
        **SIZES[size],
    )
    torch.manual_seed(0)
    return save_folder(path, ClapTextModelWithProjection(config), tokenizer)
