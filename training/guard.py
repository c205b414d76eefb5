"""What ends a run early, on every rank alike: a stop signal, or a non-finite loss or weight.

A NaN or an infinity anywhere (one doctored sample is enough) spreads through the gradients into every weight within a
step, and a checkpoint written after that holds nothing usable. So the run stops, with the step named, before one is
written; the last good checkpoint stays. Nothing here waits for the device: the loss is looked at where the loop
already reads it, one step late (training.loop's `_read_losses`), and the weights (the model's and the EMA's; before a
checkpoint the optimizer's moments too) only where the device has just been waited for anyway: at log steps, whose
window figures sync it, and before a checkpoint, whose copy to the host does.

Under DDP each rank sees its own loss, and a rank that stopped alone would leave the others waiting in their next
collective. So after every step each rank sends a row (stop signal received, step and kind of the first non-finite
value it saw) to all the others through a small CPU (gloo) group, without waiting: the rows sent after step k are
read after step k+1, when they have long arrived, and every rank takes the same decision at the same step. Before a
checkpoint and at the end the exchange is waited for, so no rank writes or leaves on an old answer.
"""

from __future__ import annotations

import math
import signal

import torch

from common.stopping import StopOnSignal
from common.torch_private import foreach_norm

from . import ddp

KINDS = {1: "the loss is nan", 2: "the loss is inf", 3: "the loss is -inf", 4: "the weights hold a non-finite value"}
FIX = (
    "look for a non-finite value in the data (one sample is enough: `dataprep verify` compares every file with its "
    "digest) or an unstable setting (a high --lr, no --grad-clip)"
)


class NonFiniteError(Exception):
    """A non-finite loss or weight: the run stopped before writing it into a checkpoint."""


def _kind(value: float) -> int:
    return 1 if math.isnan(value) else 2 if value > 0 else 3


def nonfinite(named: list[tuple[str, torch.Tensor]]) -> list[str]:
    """The names of the tensors holding a NaN or an infinity: one max-abs reduction per tensor on their device
    (a NaN propagates through it), then one read of the flags, the only wait."""
    if not named:
        return []
    norms = foreach_norm([t.detach() for _, t in named], math.inf)
    flags = torch.stack([n.float() for n in norms]).isfinite().logical_not()
    return [named[i][0] for i in flags.nonzero().flatten().tolist()]


def _tensors(module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    return list(module.state_dict().items())


class Guard:
    def __init__(self, world: ddp.Dist, stop: StopOnSignal, model, ema_model, optimizer) -> None:
        self.world, self.stop, self.optimizer = world, stop, optimizer
        named = [(f"{part} {k}", v) for part, m in (("model", model), ("EMA", ema_model)) for k, v in _tensors(m)]
        self.weights = [(k, v) for k, v in named if v.is_floating_point()]  # views of the live tensors
        self.first: tuple[int, int, str] | None = None  # (step, kind, detail) of the first non-finite value here
        self._group = torch.distributed.new_group(backend="gloo") if world.enabled else None
        self._sent: tuple[object, torch.Tensor] | None = None  # the exchange under way, and its table
        self.stopped_by: str | None = None  # the stop signal some rank received, once every rank knows it

    def loss(self, step: int, value: float) -> None:
        """The loss of `step`, as the loop read it."""
        if self.first is None and not math.isfinite(value):
            self.first = (step, _kind(value), f"the loss is {value}")

    def check_weights(self, step: int, optimizer: bool = False) -> None:
        """Where the device was just waited for: the model's and EMA's weights after `step` (and with `optimizer`,
        its moments, which a checkpoint holds too)."""
        moments = []
        if optimizer:
            tensors = [t for state in self.optimizer.state.values() for t in state.values() if torch.is_tensor(t)]
            moments = [("optimizer state", t) for t in tensors if t.is_floating_point()]
        bad = nonfinite(self.weights + moments)
        if bad and self.first is None:
            names = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
            self.first = (step, 4, f"non-finite values in {names}")

    def poll(self, wait: bool = False) -> bool:
        """Whether the run stops now (a signal reached some rank); NonFiniteError where some rank saw a non-finite
        value. Under DDP the answer is the previous call's exchange, or with `wait` this one's, the same on every
        rank; every rank must make the same calls."""
        if not wait:  # called once a step, at its end: the stop's grace follows the time between
            self.stop.at_boundary()
        step, kind = (self.first[0], self.first[1]) if self.first else (0, 0)
        signum = signal.Signals[self.stop.received].value if self.stop.received else 0
        rows = [[signum, step, kind]] if not self.world.enabled else self._exchange([signum, step, kind], wait)
        if rows is None:
            return False
        bad = sorted((int(row[1]), rank, int(row[2])) for rank, row in enumerate(rows) if row[2])
        if bad:
            self._raise(*bad[0])
        received = [int(row[0]) for row in rows if row[0]]
        if received and self.stopped_by is None:  # the signal one rank got stops them all
            self.stopped_by = signal.Signals(received[0]).name
        return bool(received)

    def _exchange(self, mine: list[int], wait: bool) -> list[list[float]] | None:
        """Every rank's row: each fills its own row of a zeroed table and one sum assembles it."""
        answer = None
        if self._sent is not None:
            work, table = self._sent
            work.wait()
            answer = table.view(self.world.world_size, -1).tolist()
        table = torch.zeros(self.world.world_size, len(mine), dtype=torch.float64)
        table[self.world.rank] = torch.tensor(mine, dtype=torch.float64)
        work = torch.distributed.all_reduce(table, group=self._group, async_op=True)
        self._sent = (work, table)
        if wait:
            self._sent = None
            work.wait()
            answer = table.tolist()
        return answer

    def _raise(self, step: int, rank: int, kind: int) -> None:
        mine = self.first is not None and self.first[:2] == (step, kind)
        what = self.first[2] if mine else KINDS[kind]  # the rank that saw it knows the value, or which tensors
        where = f" on rank {rank}" if self.world.enabled and kind != 4 else ""
        raise NonFiniteError(
            f"step {step}: {what}{where}; training stopped before writing it into a checkpoint: "
            f"{self.stop.left()} once the cause is fixed: {FIX}"
        )
