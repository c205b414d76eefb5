"""The exponential moving average of the weights that previews and checkpoints keep (Ho et al. sample from it)."""

from __future__ import annotations

import torch

from dataprep.torch_private import foreach_add_, foreach_lerp_, foreach_mul_, foreach_sub


@torch.no_grad()
def ema_update(ema_params: list[torch.Tensor], params: list[torch.Tensor], weight: float | torch.Tensor) -> None:
    """ema += weight * (params - ema), weight = 1 - decay. Outside autograd: recorded, each update chained a graph
    node to the previous one through the EMA weights, and host memory grew by ~170 KB a step. A tensor weight is a
    CUDA graph's, filled before each replay: lerp takes its weight as a number, which a capture would freeze."""
    if not isinstance(weight, torch.Tensor):
        foreach_lerp_(ema_params, params, weight)
        return
    delta = foreach_sub(params, ema_params)
    foreach_mul_(delta, weight)
    foreach_add_(ema_params, delta)


def ema_weight(step: int, decay: float) -> float:
    """The weight of step `step`'s update (0-based): 1 - decay, the decay warming up as (1+t)/(10+t) to `decay`, so
    that short runs preview trained weights, not the initial ones."""
    return 1.0 - min(decay, (1 + step) / (10 + step))
