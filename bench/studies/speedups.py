"""The UNet's parts as they were before the faster forms in training.model, so that the training-step study
(bench/studies/train_speed.py) can measure each faster form against what it replaced, in one run, and the tests can
check that both compute the same function. `revert(model, names)` swaps module classes in place; the previous forms
are subclasses without state of their own, so state_dict and checkpoints are the same either way."""

from __future__ import annotations

import torch
from torch import nn

from training.model import GroupNorm, UNet, Upsample2x


class GroupStatsGroupNorm(GroupNorm):
    """GroupNorm with its statistics reduced per group over (channels of the group, pixels): in NHWC, the group's
    channels are read at a stride of C, and the backward makes two more passes for the weight and bias gradients."""

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


class GatherUpsample(Upsample2x):
    """nn.Upsample(scale_factor=2, mode="nearest"): an indexed gather, whose gradient is a scatter-add."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.interpolate(x, scale_factor=2, mode="nearest")


class SlicedGradCatUNet(UNet):
    """The UNet joining the skip connections with torch.cat, whose gradient for h is a channel slice."""

    @staticmethod
    def _cat(h: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return torch.cat([h, skip], 1)


# name: (the class of training.model, the form it replaced); the study's modes name them
PREVIOUS: dict[str, tuple[type[nn.Module], type[nn.Module]]] = {
    "gn_group_stats": (GroupNorm, GroupStatsGroupNorm),
    "cat_sliced_grad": (UNet, SlicedGradCatUNet),
    "upsample_gather": (Upsample2x, GatherUpsample),
}


def revert(model: nn.Module, names: tuple[str, ...] | list[str]) -> nn.Module:
    """Swap in the named previous forms, in place (`model` itself included); returns `model`."""
    unknown = [n for n in names if n not in PREVIOUS]
    if unknown:
        raise ValueError(f"unknown previous form(s) {', '.join(unknown)}; valid: {', '.join(PREVIOUS)}")
    swaps = dict(PREVIOUS[n] for n in names)
    for module in model.modules():
        if type(module) in swaps:
            module.__class__ = swaps[type(module)]
    return model
