"""The exponential moving average of the weights that previews and checkpoints keep (Ho et al. sample from it).

`Ema` is its one owner. Launched steps update it after the optimizer. Under the step graph it runs one step late:
the weights the last step made stay as they are until this step's optimizer, so their update (memory-bound: three
passes over every weight) runs on a stream of its own beside this step's forward or all-reduce, instead of alone after
the optimizer. `settle` brings it up to date before anything reads it; the updates are the launched step's, in order.
"""

from __future__ import annotations

import torch

from common.torch_private import foreach_add_, foreach_lerp_, foreach_mul_, foreach_sub


class Ema:
    """The EMA of `model`'s weights in `ema_model`'s. `late`: the step graph's way, one step late (see above)."""

    def __init__(self, ema_model: torch.nn.Module, model: torch.nn.Module, decay: float, device: str, late: bool):
        self.ema_params = list(ema_model.parameters())  # listed once: the foreach calls take lists
        self.params = list(model.parameters())
        self.decay, self.late = decay, late
        self.now = 0.0  # this step's weight (launched steps)
        self.due = 0.0  # the weight of the update the last step left to the next (late)
        # the late update's weight as a device tensor: a captured graph reads it at each replay, where a number
        # would be frozen into the capture
        self.weight = torch.zeros((), device=device)
        self.side = torch.cuda.Stream(device) if late and device.startswith("cuda") else None

    def next_step(self, step: int) -> None:
        """Before step `step` (0-based) is enqueued: the weights its updates use."""
        if self.late:
            self.weight.fill_(self.due)
            self.due = ema_weight(step, self.decay)
        else:
            self.now = ema_weight(step, self.decay)

    def fork(self) -> None:
        """Late: the previous step's update, forked onto the side stream, beside what the step enqueues next."""
        if not self.late:
            return
        if self.side is None:
            ema_update(self.ema_params, self.params, self.weight)
            return
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            ema_update(self.ema_params, self.params, self.weight)

    def join(self) -> None:
        """Late: the optimizer moves the weights the forked update reads, so it waits for it."""
        if self.side is not None:
            torch.cuda.current_stream().wait_stream(self.side)

    def after_optimizer(self) -> None:
        """Launched steps: the update toward the weights this step made."""
        if not self.late:
            ema_update(self.ema_params, self.params, self.now)

    def settle(self) -> None:
        """Late: the update the last step left to the next, now, so the EMA holds every step's; the next step then
        updates by a weight of 0 (no change)."""
        if self.late and self.due:
            ema_update(self.ema_params, self.params, self.due)
            self.due = 0.0


@torch.no_grad()  # recorded by autograd, each update would chain a graph node to the previous one and hold it
def ema_update(ema_params: list[torch.Tensor], params: list[torch.Tensor], weight: float | torch.Tensor) -> None:
    """ema += weight * (params - ema), weight = 1 - decay; a tensor weight (lerp takes only a number's) for a graph."""
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
