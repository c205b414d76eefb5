"""DiT with cross-attention to the caption, as PixArt-alpha (Chen et al. 2023) builds it: each block runs
self-attention, then cross-attention from the image tokens to the caption's tokens (padded ones masked out), then the
MLP; the timestep conditions every block through one shared adaLN ("adaLN-single": one projection of the timestep,
plus a learned per-block table), and the caption tokens enter through a two-layer MLP (the caption embedder). The
pooled caption vector is not used, as in PixArt-alpha."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .dit import Attention as SelfAttention
from .dit import DiTConfig, PatchModel, dit_b2, dit_tiny, frequency_embedding, modulate
from .model import text_preset


@dataclass(kw_only=True)
class DiTTextConfig(DiTConfig):
    text_dim: int = 4096  # the caption tokens' width: T5-XXL's (PixArt-alpha); fitted to the encoder at set-up
    caption_dropout: float = 0.1  # share of captions replaced by the empty one: classifier-free guidance's rate

    def build(self) -> DiTText:
        return DiTText(self)


dit_b2_text = text_preset(DiTTextConfig, dit_b2)  # DiT-B/2 with PixArt-alpha's cross-attention to the caption
# for tests and CPU runs: dit_tiny with captions 32 wide (the tiny text encoders')
dit_tiny_text = text_preset(DiTTextConfig, dit_tiny, text_dim=32)


class CrossAttention(nn.Module):
    """Queries from the image tokens, keys and values from the caption's; `mask` (N, L) True on valid tokens."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q, self.kv, self.proj = nn.Linear(dim, dim), nn.Linear(dim, 2 * dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, context: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        n, tokens, dim = x.shape
        q = self.q(x).reshape(n, tokens, self.heads, dim // self.heads).transpose(1, 2)
        k, v = self.kv(context).reshape(n, context.shape[1], 2, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])
        return self.proj(out.transpose(1, 2).reshape(n, tokens, dim))


class TextBlock(nn.Module):
    """PixArt-alpha's block: modulated self-attention, plain cross-attention, modulated MLP."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.attn = SelfAttention(dim, heads)
        self.cross_attn = CrossAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        mlp = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp), nn.GELU(approximate="tanh"), nn.Linear(mlp, dim))
        self.scale_shift_table = nn.Parameter(torch.randn(6, dim) / dim**0.5)  # this block's offset to the shared adaLN

    def forward(self, x: torch.Tensor, t6: torch.Tensor, context: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        mod = self.scale_shift_table[None] + t6.reshape(len(x), 6, -1)
        shift1, scale1, gate1, shift2, scale2, gate2 = mod.unbind(1)
        x = x + gate1[:, None] * self.attn(modulate(self.norm1(x), shift1, scale1))
        x = x + self.cross_attn(x, context, mask)
        return x + gate2[:, None] * self.mlp(modulate(self.norm2(x), shift2, scale2))


class DiTText(PatchModel):
    def __init__(self, cfg: DiTTextConfig) -> None:
        super().__init__(cfg)
        d = cfg.hidden
        self.t_block = nn.Sequential(nn.SiLU(), nn.Linear(d, 6 * d))  # adaLN-single: shared by every block
        self.y_embedder = nn.Sequential(nn.Linear(cfg.text_dim, d), nn.GELU(approximate="tanh"), nn.Linear(d, d))
        self.blocks = nn.ModuleList(TextBlock(d, cfg.heads, cfg.mlp_ratio) for _ in range(cfg.depth))
        self.final_norm = nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.final_table = nn.Parameter(torch.randn(2, d) / d**0.5)
        self.final_linear = nn.Linear(d, cfg.patch_size**2 * self.out_channels)
        self._init_weights()

    def _init_weights(self) -> None:
        self._init_linears_and_patches()
        for layer in (self.t_embedder[0], self.t_embedder[2], self.t_block[1], self.y_embedder[0], self.y_embedder[2]):
            nn.init.normal_(layer.weight, std=0.02)
        # as PixArt-alpha: cross-attention starts as no change and the output as zero
        for block in self.blocks:
            nn.init.zeros_(block.cross_attn.proj.weight)
            nn.init.zeros_(block.cross_attn.proj.bias)
        nn.init.zeros_(self.final_linear.weight)
        nn.init.zeros_(self.final_linear.bias)

    def forward(self, x: torch.Tensor, t: torch.Tensor, y: torch.Tensor | None = None, text=None) -> torch.Tensor:
        """x (N, C, H, W), int64 t and `text` (dataprep.textenc.TextEmbeddings: tokens (N, L, text_dim) and their
        mask) to the predicted noise in x's layout; y (labels) is accepted for the common signature and unused."""
        if text is None:
            raise ValueError("dit text models need caption embeddings: train on data with captions")
        h = self._tokens(x)
        temb = self.t_embedder(frequency_embedding(t).to(h.dtype))
        t6 = self.t_block(temb)
        context = self.y_embedder(text.tokens.to(h.dtype))
        for block in self.blocks:
            h = block(h, t6, context, text.mask)
        shift, scale = (self.final_table[None] + temb[:, None]).unbind(1)
        out = self.final_linear(modulate(self.final_norm(h), shift, scale))
        return self._unpatchify(out, x)
