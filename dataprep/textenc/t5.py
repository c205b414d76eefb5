"""A T5 encoder (PixArt-alpha/Sigma, SD3, Flux, DeepFloyd IF): transformers' T5EncoderModel with a T5Tokenizer.
Pooled: the mean of the valid tokens' states (T5 has no pooled output; a model that wants a global vector gets one)."""

from __future__ import annotations

from pathlib import Path

import torch

from .hf import TransformersEncoder, save_folder
from .vocab import unigram_tokenizer

# "t5-xl" as T5 v1.1 XL's encoder (PixArt-alpha/Sigma's, DeepFloyd IF's); both with T5 v1.1's gated GELU
SIZES = {
    "tiny": dict(d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2, relative_attention_num_buckets=8),
    "t5-xl": dict(d_model=2048, d_kv=64, d_ff=5120, num_layers=24, num_heads=32),
}
DEFAULT_TOKENS = 120  # PixArt-alpha's caption length (Sigma: 300, SD3: 256, Flux: 512); relative positions: no limit


class T5Encoder(TransformersEncoder):
    kind = "t5"
    default_tokens = DEFAULT_TOKENS
    model_name, pooled_field = "T5EncoderModel", "d_model"  # relative positions: no token limit

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = self.model(input_ids=ids, attention_mask=mask).last_hidden_state
        weights = mask[..., None].to(tokens.dtype)
        return tokens, (tokens * weights).sum(1) / weights.sum(1).clamp(min=1)


def make(path: Path, size: str) -> Path:
    """A T5EncoderModel of `size`, random weights, a unigram tokenizer over CLIP's vocabulary, saved in `path`."""
    from transformers import T5Config, T5EncoderModel, T5Tokenizer

    specials = ["<pad>", "</s>", "<unk>"]  # T5's ids: pad 0, end 1, unknown 2
    tokenizer = T5Tokenizer(
        tokenizer_object=unigram_tokenizer(specials, "$A </s>"), extra_ids=0, model_max_length=DEFAULT_TOKENS
    )
    config = T5Config(
        vocab_size=len(tokenizer),
        feed_forward_proj="gated-gelu",
        is_encoder_decoder=False,
        use_cache=False,
        pad_token_id=0,
        eos_token_id=1,
        **SIZES[size],
    )
    torch.manual_seed(0)
    return save_folder(path, T5EncoderModel(config), tokenizer)
