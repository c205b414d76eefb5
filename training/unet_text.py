"""The DDPM UNet (training.model) with cross-attention to the caption for pixels, as Stable Diffusion's UNet attends
to CLIP's tokens: after every self-attention (and in the middle) the pixels, as queries, attend to the caption's
valid tokens; the attention's output projection starts at zero, so the network starts as the unconditional UNet."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .model import GroupNorm, UNet, UNetConfig, ddpm_cifar10, text_preset, timestep_embedding, tiny


@dataclass(kw_only=True)
class TextUNetConfig(UNetConfig):
    text_dim: int = 768  # the caption tokens' width: CLIP ViT-L/14's; fitted to the encoder at set-up
    caption_dropout: float = 0.1  # share of captions replaced by the empty one: classifier-free guidance's rate

    def build(self) -> TextUNet:
        return TextUNet(self)


# Ho et al.'s CIFAR-10 UNet, with cross-attention to the caption at its attention resolutions (16x16, middle)
ddpm_cifar10_text = text_preset(TextUNetConfig, ddpm_cifar10)
# for tests and CPU runs: the tiny UNet with captions 32 wide (the tiny text encoders')
tiny_text = text_preset(TextUNetConfig, tiny, text_dim=32)


class CrossAttention(nn.Module):
    """Pixels (N, C, H, W) attend to caption tokens (N, L, text_dim) where `mask` (N, L) is True; one head, as the
    UNet's self-attention."""

    def __init__(self, ch: int, text_dim: int, groups: int) -> None:
        super().__init__()
        self.norm, self.q = GroupNorm(groups, ch), nn.Conv2d(ch, ch, 1)
        self.kv, self.proj = nn.Linear(text_dim, 2 * ch), nn.Conv2d(ch, ch, 1)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def forward(self, x: torch.Tensor, context: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        q = self.q(self.norm(x)).permute(0, 2, 3, 1).reshape(b, 1, h * w, c)
        k, v = self.kv(context.to(q.dtype)).reshape(b, 1, context.shape[1], 2, c).unbind(3)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])
        out = out.reshape(b, h, w, c).permute(0, 3, 1, 2)
        return x + self.proj(out if x.is_contiguous(memory_format=torch.channels_last) else out.contiguous())


class TextUNet(UNet):
    def __init__(self, cfg: TextUNetConfig) -> None:
        super().__init__(cfg)
        # a cross-attention after each self-attention: the blocks that hold one, and the middle
        for block in [*self.down, *self.up]:
            if isinstance(block, nn.ModuleList) and len(block) > 1:
                block.append(CrossAttention(block[1].proj.out_channels, cfg.text_dim, cfg.groups))
        width = self.mid[1].proj.out_channels
        self.mid_cross = CrossAttention(width, cfg.text_dim, cfg.groups)

    @staticmethod
    def _run_text(block, h: torch.Tensor, temb: torch.Tensor, context: torch.Tensor, mask: torch.Tensor):
        if not isinstance(block, nn.ModuleList):
            return block(h)
        h = block[0](h, temb)
        for layer in block[1:]:
            h = layer(h, context, mask) if isinstance(layer, CrossAttention) else layer(h)
        return h

    def forward(self, x: torch.Tensor, t: torch.Tensor, y: torch.Tensor | None = None, text=None) -> torch.Tensor:
        """`text`: dataprep.textenc.TextEmbeddings (tokens (N, L, text_dim), mask (N, L)); y is unused."""
        if text is None:
            raise ValueError("text UNets need caption embeddings: train on data with captions")
        context, mask = text.tokens, text.mask
        temb = self.temb(timestep_embedding(t, self.cfg.ch))
        hs = [self.conv_in(x)]
        for block in self.down:
            hs.append(self._run_text(block, hs[-1], temb, context, mask))
        h = self.mid[1](self.mid[0](hs[-1], temb))
        h = self.mid[2](self.mid_cross(h, context, mask), temb)
        for block in self.up:
            h = (
                self._run_text(block, self._cat(h, hs.pop()), temb, context, mask)
                if isinstance(block, nn.ModuleList)
                else block(h)
            )
        return self.out(h)
