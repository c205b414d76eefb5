"""The DDPM UNet of Ho et al. (2020), as in their TensorFlow release: residual blocks with a sinusoidal time
embedding, GroupNorm(32), self-attention at chosen resolutions, skip connections across the U."""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from .config import MODELS
from .dit import DiTConfig, refuse_problems


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
        refuse_problems("UNetConfig", problems)

    def build(self) -> UNet:
        return UNet(self)


def ddpm_cifar10(**overrides) -> UNetConfig:
    """Ho et al. CIFAR-10: 35.7M parameters."""
    return replace(UNetConfig(), **overrides)


def ddpm_audio_mel(**overrides) -> UNetConfig:
    """The same network on 1-channel 64x64 log-mel spectrograms; one more level so the bottleneck stays 4x4."""
    return replace(UNetConfig(in_channels=1, image_size=64, ch_mult=(1, 2, 2, 2, 2)), **overrides)


def tiny(**overrides) -> UNetConfig:
    """For tests and CPU runs: same structure (res blocks, attention at 16x16, skips), 0.18M parameters."""
    return replace(UNetConfig(ch=16, ch_mult=(1, 2), num_res_blocks=1, attn_resolutions=(16,), groups=4), **overrides)


def text_preset(config: type, base: Callable, **text) -> Callable:
    """The preset function of a text model's `config`: preset `base`'s fields, then `text` (the caption's width),
    then the caller's overrides."""
    return lambda **overrides: replace(config(**vars(base()), **text), **overrides)


def preset(name: str):
    """The preset function registered as `name` (training.config.MODELS): its keywords override the config's."""
    module, function = MODELS[name].split(":")
    return getattr(importlib.import_module(module), function)


# the text models (cross-attention to the caption's tokens) build on this module's UNet: looked up when built
TEXT_PRESETS = tuple(name for name in MODELS if name.endswith("_text"))


def _built_later(name: str):
    """A text model's preset, looked up when called (its module imports this one)."""
    return lambda **overrides: preset(name)(**overrides)


MODEL_PRESETS = {name: preset(name) for name in MODELS if name not in TEXT_PRESETS}
MODEL_PRESETS |= {name: _built_later(name) for name in TEXT_PRESETS}


def model_config(name: str, shape: tuple[int, int, int] | None, num_classes: int = 0, text_dim: int | None = None):
    """Preset `name` fitted to the data: input channels and size from `shape` (C, H, W), for DiT class-conditional
    where the data has two classes or more, and a text model to its captions' width `text_dim`. None: the preset as
    it is (a loader given to the loop with no prepared directory)."""
    if name in TEXT_PRESETS:
        return _text_config(name, shape, text_dim)
    make = MODEL_PRESETS[name]
    if shape is None:
        return make()
    c, h, w = shape
    if isinstance(make(), DiTConfig):
        return make(in_channels=c, input_size=(h, w), num_classes=num_classes if num_classes > 1 else 0)
    try:
        return make(in_channels=c, image_size=h)
    except ValueError:  # a size the UNet cannot halve: training.data.check_fits says so, with the fix
        return make(in_channels=c)


def _text_config(name: str, shape: tuple[int, int, int] | None, text_dim: int | None):
    fit = {} if text_dim is None else {"text_dim": text_dim}
    if shape is not None:
        c, h, w = shape
        fit |= {"in_channels": c} | ({"input_size": (h, w)} if name.startswith("dit") else {"image_size": h})
    return MODEL_PRESETS[name](**fit)


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal embedding of integer timesteps, as in the Transformer (and the DDPM release)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, device=t.device, dtype=torch.float32) / (half - 1))
    args = t.float()[:, None] * freqs[None]
    return torch.cat([torch.sin(args), torch.cos(args)], dim=1)


class GroupNorm(nn.GroupNorm):
    """nn.GroupNorm that, under torch.compile, keeps a channels_last input channels_last and reduces per channel.

    Inductor's decomposition of GroupNorm makes a CUDA input contiguous (NCHW) first, so in a channels_last UNet every
    norm cost a layout copy and the convolution after it another, forward and backward (the gain: docs/BENCHMARKS.md,
    "What the model eats"). The statistics are reduced per (sample, channel) first: in NHWC that reads neighbouring
    channels side by side, where a per-group reduction reads a group's channels at a stride of C. A group's variance
    follows exactly from its channels' means and variances (they have equal counts), and the output is one scale and
    shift per (sample, channel), so the backward reduces per channel too (the same section). Same arithmetic up to float
    rounding (fp32 statistics, fp32 output under autocast), same parameters."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # eager, PyTorch's one fused kernel is faster than these few (channels_last eager, docs/BENCHMARKS.md)
        if not torch.compiler.is_compiling() or x.dim() != 4 or not x.is_contiguous(memory_format=torch.channels_last):
            return super().forward(x)
        return self._channels_last_forward(x)

    def _channels_last_forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, _, _ = x.shape
        g = self.num_groups
        out_dtype = torch.float32 if torch.is_autocast_enabled(x.device.type) else x.dtype
        xf = x.float()
        var_c, mean_c = torch.var_mean(xf, dim=(2, 3), correction=0)
        mean_c, var_c = mean_c.view(b, g, c // g), var_c.view(b, g, c // g)
        mean = mean_c.mean(2, keepdim=True)
        var = var_c.mean(2, keepdim=True) + (mean_c - mean).square().mean(2, keepdim=True)  # law of total variance
        rstd = torch.rsqrt(var + self.eps)  # (b, g, 1)
        # y = (x - mean) * rstd * weight + bias = x * scale + shift, per (sample, channel)
        scale = rstd * self.weight.float().view(g, c // g) if self.affine else rstd.expand(b, g, c // g)
        shift = (self.bias.float().view(g, c // g) if self.affine else 0.0) - mean * scale
        scale, shift = scale.reshape(b, c), shift.reshape(b, c)
        return (xf * scale[:, :, None, None] + shift[:, :, None, None]).to(out_dtype)


class Upsample2x(nn.Module):
    """Nearest 2x upsampling as a broadcast of each pixel over a 2x2 block, in the input's layout. PyTorch decomposes
    nn.Upsample into an indexed gather whose gradient is a scatter-add (atomic adds into a zeroed NCHW tensor); the
    broadcast's gradient is a plain sum over each block, and channels_last stays channels_last (+3% alone)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        if x.is_contiguous(memory_format=torch.channels_last):
            y = x.permute(0, 2, 3, 1)[:, :, None, :, None, :].expand(b, h, 2, w, 2, c)
            return y.reshape(b, 2 * h, 2 * w, c).permute(0, 3, 1, 2)
        return x[:, :, :, None, :, None].expand(b, c, h, 2, w, 2).reshape(b, c, 2 * h, 2 * w)


class _CatDenseGrad(torch.autograd.Function):
    """torch.cat([h, skip], 1) whose gradient for h is a dense tensor in h's layout. torch.cat's backward hands each
    input a channel slice of the output's gradient; where h is a convolution's output, cuDNN's backward then copies
    that slice to a dense tensor twice (data and weight gradients) and sums the bias gradient over it with strides.
    Made dense here, the copy is one write that torch.compile fuses into the kernel producing the gradient (+3%
    alone). The skip half needs nothing: it meets the down path's gradient in an addition, which writes densely."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        ctx.split = h.shape[1]
        ctx.channels_last = h.is_contiguous(memory_format=torch.channels_last)
        return torch.cat([h, skip], 1)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        layout = torch.channels_last if ctx.channels_last else torch.contiguous_format
        return grad[:, : ctx.split].contiguous(memory_format=layout), grad[:, ctx.split :]


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
                self.up.append(nn.Sequential(Upsample2x(), nn.Conv2d(cur, cur, 3, padding=1)))
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
        return _CatDenseGrad.apply(h, skip)

    def forward(self, x: torch.Tensor, t: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        """y (labels) is accepted for a common signature with DiT and unused: the paper's UNet is unconditional."""
        temb = self.temb(timestep_embedding(t, self.cfg.ch))
        hs = [self.conv_in(x)]
        for block in self.down:
            hs.append(self._run(block, hs[-1], temb))
        h = self.mid[2](self.mid[1](self.mid[0](hs[-1], temb)), temb)
        for block in self.up:
            h = self._run(block, self._cat(h, hs.pop()), temb) if isinstance(block, nn.ModuleList) else block(h)
        return self.out(h)
