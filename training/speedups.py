"""Faster forms of parts of the UNet, for the training-step study (bench/studies/train_speed.py) to measure before
any becomes the default: each computes the same function with the same parameters, written so that torch.compile on
a channels_last model emits fewer or better kernels. `apply_speedups(model, names)` swaps module classes in place;
the replacements are subclasses without state of their own, so state_dict and checkpoints are unchanged."""

from __future__ import annotations

import torch
from torch import nn

from .model import GroupNorm, UNet


class ChannelStatsGroupNorm(GroupNorm):
    """GroupNorm whose statistics are reduced per channel first. In NHWC a reduction over the pixels of each
    (sample, channel) reads consecutive channels side by side (coalesced), where the per-group reduction reads the
    4-16 channels of a group at a stride of C. The group's variance follows exactly from its channels' means and
    variances (law of total variance: the channels of a group have equal counts). The output is then one
    per-(sample, channel) scale and shift, so the backward's reductions are two sums over pixels per channel, and the
    weight and bias gradients sums over the batch of those, instead of two more passes over the activations."""

    def _channels_last_forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, _, _ = x.shape
        g = self.num_groups
        out_dtype = torch.float32 if torch.is_autocast_enabled(x.device.type) else x.dtype
        xf = x.float()
        var_c, mean_c = torch.var_mean(xf, dim=(2, 3), correction=0)
        mean_c, var_c = mean_c.view(b, g, c // g), var_c.view(b, g, c // g)
        mean = mean_c.mean(2, keepdim=True)
        var = var_c.mean(2, keepdim=True) + (mean_c - mean).square().mean(2, keepdim=True)
        rstd = torch.rsqrt(var + self.eps)  # (b, g, 1)
        # per (sample, channel): y = x * scale + shift, i.e. (x - mean) * rstd * weight + bias
        scale = rstd * self.weight.float().view(g, c // g) if self.affine else rstd.expand(b, g, c // g)
        shift = (self.bias.float().view(g, c // g) if self.affine else 0.0) - mean * scale
        scale, shift = scale.reshape(b, c), shift.reshape(b, c)
        return (xf * scale[:, :, None, None] + shift[:, :, None, None]).to(out_dtype)


class BroadcastUpsample(nn.Upsample):
    """Nearest 2x upsampling as a broadcast. PyTorch decomposes nn.Upsample into an indexed gather, whose gradient
    is a scatter-add (atomic adds into a zeroed tensor); as a broadcast of each pixel over a 2x2 block, the gradient is
    a plain sum over that block. The broadcast is done in the input's layout, so channels_last stays channels_last."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode != "nearest" or self.scale_factor not in (2, 2.0) or x.dim() != 4:
            return super().forward(x)
        b, c, h, w = x.shape
        if x.is_contiguous(memory_format=torch.channels_last):
            y = x.permute(0, 2, 3, 1)[:, :, None, :, None, :].expand(b, h, 2, w, 2, c)
            return y.reshape(b, 2 * h, 2 * w, c).permute(0, 3, 1, 2)
        return x[:, :, :, None, :, None].expand(b, c, h, 2, w, 2).reshape(b, c, 2 * h, 2 * w)


class _CatDenseGrad(torch.autograd.Function):
    """torch.cat([h, skip], 1) whose gradient for h is a dense tensor in h's layout. torch.cat's backward hands each
    input a channel slice of the output's gradient; where h is a convolution's output (directly or through a residual
    addition), cuDNN's backward then copies that slice to a dense tensor twice (data and weight gradients) and sums
    the bias gradient over it with strides. Made dense here, the copy is one write that torch.compile can fuse into
    the kernel producing the gradient. The skip half needs nothing: it meets the down path's gradient in an addition,
    which writes a dense tensor anyway."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        ctx.split = h.shape[1]
        ctx.channels_last = h.is_contiguous(memory_format=torch.channels_last)
        return torch.cat([h, skip], 1)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        layout = torch.channels_last if ctx.channels_last else torch.contiguous_format
        return grad[:, : ctx.split].contiguous(memory_format=layout), grad[:, ctx.split :]


class DenseGradCatUNet(UNet):
    """The UNet whose up path joins the skip connections with _CatDenseGrad."""

    @staticmethod
    def _cat(h: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return _CatDenseGrad.apply(h, skip)


# name: (the class replaced, its replacement); the study's modes name them
SPEEDUPS: dict[str, tuple[type[nn.Module], type[nn.Module]]] = {
    "gn_channel_stats": (GroupNorm, ChannelStatsGroupNorm),
    "cat_dense_grad": (UNet, DenseGradCatUNet),
    "upsample_broadcast": (nn.Upsample, BroadcastUpsample),
}


def apply_speedups(model: nn.Module, names: tuple[str, ...] | list[str]) -> nn.Module:
    """Swap in the named replacements, in place (`model` itself included); returns `model`."""
    unknown = [n for n in names if n not in SPEEDUPS]
    if unknown:
        raise ValueError(f"unknown speedup(s) {', '.join(unknown)}; valid: {', '.join(SPEEDUPS)}")
    swaps = dict(SPEEDUPS[n] for n in names)
    for module in model.modules():
        if type(module) in swaps:
            module.__class__ = swaps[type(module)]
    return model
