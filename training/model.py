"""The DDPM UNet of Ho et al. (2020), as in their TensorFlow release: residual blocks with a sinusoidal time
embedding, GroupNorm(32), self-attention at chosen resolutions, skip connections across the U."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(kw_only=True)
class UNetConfig:
    in_channels: int = 3  # RGB; 1 for log-mel spectrograms
    out_channels: int | None = None  # None: as in_channels, since the network predicts noise of the input's shape
    image_size: int = 32  # CIFAR-10; must be divisible by 2 ** (len(ch_mult) - 1)
    ch: int = 128  # base width; every level is a multiple of it
    ch_mult: tuple[int, ...] = (1, 2, 2, 2)  # 32 -> 16 -> 8 -> 4 for CIFAR-10
    num_res_blocks: int = 2  # per level, as in the paper (the up path has one more, fed by the downsampler's skip)
    attn_resolutions: tuple[int, ...] = (16,)  # self-attention is quadratic in pixels: only at 16x16 in the paper
    dropout: float = 0.1  # the paper's CIFAR-10 value; it overfits without it
    groups: int = 32  # GroupNorm groups, the paper's value; every width must be divisible by it

    def __post_init__(self) -> None:
        down = 2 ** (len(self.ch_mult) - 1)
        problems = [
            (self.image_size % down == 0, f"image_size {self.image_size} is not divisible by {down} (ch_mult)"),
            (
                all(self.ch * m % self.groups == 0 for m in self.ch_mult),
                f"a width is not divisible by groups={self.groups}",
            ),
            (0.0 <= self.dropout < 1.0, f"dropout {self.dropout} is outside [0, 1)"),
        ]
        for ok, message in problems:
            if not ok:
                raise ValueError(f"UNetConfig: {message}")


def ddpm_cifar10(**overrides) -> UNetConfig:
    """Ho et al. CIFAR-10: 35.7M parameters."""
    return replace(UNetConfig(), **overrides)


def ddpm_audio_mel(**overrides) -> UNetConfig:
    """The same network on 1-channel 64x64 log-mel spectrograms; one more level so the bottleneck stays 4x4."""
    return replace(UNetConfig(in_channels=1, image_size=64, ch_mult=(1, 2, 2, 2, 2)), **overrides)


def tiny(**overrides) -> UNetConfig:
    """For tests and CPU runs: same structure (res blocks, attention at 16x16, skips), 0.18M parameters."""
    return replace(UNetConfig(ch=16, ch_mult=(1, 2), num_res_blocks=1, attn_resolutions=(16,), groups=4), **overrides)


MODEL_PRESETS = {"ddpm_cifar10": ddpm_cifar10, "ddpm_audio_mel": ddpm_audio_mel, "tiny": tiny}


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal embedding of integer timesteps, as in the Transformer (and the DDPM release)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, device=t.device, dtype=torch.float32) / (half - 1))
    args = t.float()[:, None] * freqs[None]
    return torch.cat([torch.sin(args), torch.cos(args)], dim=1)


class GroupNorm(nn.GroupNorm):
    """nn.GroupNorm that, under torch.compile, keeps a channels_last input channels_last. Inductor's decomposition of
    GroupNorm makes a CUDA input contiguous (NCHW) first, so in a channels_last UNet every norm cost a layout copy and
    the convolution after it another, forward and backward: 4,407 -> 5,049 img/s for a compiled ddpm_cifar10 step on
    an H100 (docs/BENCHMARKS.md). Same arithmetic (fp32 statistics, fp32 output under autocast), same parameters."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # eager, PyTorch's one fused kernel is faster than these few (channels_last eager: 1,508 vs 2,009 img/s)
        if not torch.compiler.is_compiling() or x.dim() != 4 or not x.is_contiguous(memory_format=torch.channels_last):
            return super().forward(x)
        return self._channels_last_forward(x)

    def _channels_last_forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        out_dtype = torch.float32 if torch.is_autocast_enabled(x.device.type) else x.dtype
        # splitting C into (groups, C // groups) is a view in NHWC; element-wise ops then keep NHWC strides
        xg = x.float().view(b, self.num_groups, c // self.num_groups, h, w)
        var, mean = torch.var_mean(xg, dim=(2, 3, 4), correction=0, keepdim=True)
        y = ((xg - mean) * torch.rsqrt(var + self.eps)).view(b, c, h, w)
        if self.affine:
            y = y * self.weight.float().view(1, c, 1, 1) + self.bias.float().view(1, c, 1, 1)
        return y.to(out_dtype)


class ResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, temb: int, dropout: float, groups: int) -> None:
        super().__init__()
        self.norm1, self.conv1 = GroupNorm(groups, cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.temb = nn.Linear(temb, cout)
        self.norm2, self.conv2 = GroupNorm(groups, cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.dropout = nn.Dropout(dropout)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.temb(F.silu(temb))[:, :, None, None]
        h = self.conv2(self.dropout(F.silu(self.norm2(h))))
        return self.skip(x) + h


class Attention(nn.Module):
    def __init__(self, ch: int, groups: int) -> None:
        super().__init__()
        self.norm, self.qkv, self.proj = GroupNorm(groups, ch), nn.Conv2d(ch, 3 * ch, 1), nn.Conv2d(ch, ch, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        # (b, hw, 3, c): pixels as tokens, channels last, a free view when x is channels_last (as on the GPU), and
        # the layout attention kernels want; one head, as in the paper
        q, k, v = self.qkv(self.norm(x)).permute(0, 2, 3, 1).reshape(b, 1, h * w, 3, c).unbind(3)
        out = F.scaled_dot_product_attention(q, k, v).reshape(b, h, w, c).permute(0, 3, 1, 2)
        # back in x's layout, so a contiguous (NCHW) model does not flip layouts at every residual add
        return x + self.proj(out if x.is_contiguous(memory_format=torch.channels_last) else out.contiguous())


class UNet(nn.Module):
    def __init__(self, cfg: UNetConfig) -> None:
        super().__init__()
        self.cfg = cfg
        ch, temb, g, p = cfg.ch, 4 * cfg.ch, cfg.groups, cfg.dropout
        self.temb = nn.Sequential(nn.Linear(ch, temb), nn.SiLU(), nn.Linear(temb, temb))
        self.conv_in = nn.Conv2d(cfg.in_channels, ch, 3, padding=1)
        self.down, skips, cur, res = nn.ModuleList(), [ch], ch, cfg.image_size
        for level, mult in enumerate(cfg.ch_mult):
            for _ in range(cfg.num_res_blocks):
                self.down.append(self._block(ResBlock(cur, ch * mult, temb, p, g), res, ch * mult))
                cur = ch * mult
                skips.append(cur)
            if level != len(cfg.ch_mult) - 1:
                self.down.append(nn.Conv2d(cur, cur, 3, stride=2, padding=1))
                skips.append(cur)
                res //= 2
        self.mid = nn.ModuleList([ResBlock(cur, cur, temb, p, g), Attention(cur, g), ResBlock(cur, cur, temb, p, g)])
        self.up = nn.ModuleList()
        for level, mult in reversed(list(enumerate(cfg.ch_mult))):
            for _ in range(cfg.num_res_blocks + 1):
                self.up.append(self._block(ResBlock(cur + skips.pop(), ch * mult, temb, p, g), res, ch * mult))
                cur = ch * mult
            if level != 0:
                self.up.append(
                    nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(cur, cur, 3, padding=1))
                )
                res *= 2
        out_ch = cfg.out_channels or cfg.in_channels
        self.out = nn.Sequential(GroupNorm(g, cur), nn.SiLU(), nn.Conv2d(cur, out_ch, 3, padding=1))

    def _block(self, res_block: ResBlock, resolution: int, ch: int) -> nn.ModuleList:
        attn = [Attention(ch, self.cfg.groups)] if resolution in self.cfg.attn_resolutions else []
        return nn.ModuleList([res_block, *attn])

    @staticmethod
    def _run(block, h: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        if isinstance(block, nn.ModuleList):
            h = block[0](h, temb)
            return block[1](h) if len(block) > 1 else h
        return block(h)

    @staticmethod
    def _cat(h: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return torch.cat([h, skip], 1)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        temb = self.temb(timestep_embedding(t, self.cfg.ch))
        hs = [self.conv_in(x)]
        for block in self.down:
            hs.append(self._run(block, hs[-1], temb))
        h = self.mid[2](self.mid[1](self.mid[0](hs[-1], temb)), temb)
        for block in self.up:
            h = self._run(block, self._cat(h, hs.pop()), temb) if isinstance(block, nn.ModuleList) else block(h)
        return self.out(h)
