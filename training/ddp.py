"""Data-parallel plumbing: torchrun sets RANK/WORLD_SIZE/LOCAL_RANK, we join the group and merge figures."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from common import ranks


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    # the heartbeat of a group this process joined (common.ranks); None when single or in a group its caller made
    watch: object | None = field(default=None, compare=False, repr=False)

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def main(self) -> bool:
        """Rank 0 alone logs, samples and writes checkpoints."""
        return self.rank == 0


def setup(device: str) -> tuple[Dist, str]:
    """Join the process group when launched by torchrun; return this process's place in the group and its device
    (cuda:LOCAL_RANK under torchrun: one GPU per rank)."""
    rank, world_size, local_rank = ranks.world()
    if world_size <= 1:
        if device.startswith("cuda:") and torch.cuda.is_available():
            torch.cuda.set_device(device)  # events, streams and synchronize() act on the current device, not on cuda:N
        return Dist(), device
    device = ranks.rank_device(device)
    if dist.is_initialized():  # a group the caller made (bench's probe) is the caller's to leave
        if device.startswith("cuda"):
            torch.cuda.set_device(device)
        return Dist(rank, world_size, local_rank), device
    return Dist(rank, world_size, local_rank, ranks.join(device)), device


def teardown(world: Dist, error: BaseException | None = None) -> None:
    """Leave the group `setup` joined; after `error`, say which rank failed and end this rank promptly, so that the
    others stop too (common.ranks). DDP's wrapper sits in a reference cycle whose reducer holds the process group:
    leaving collects it first, as a group freed at the interpreter's shutdown can abort the rank."""
    if world.enabled and world.watch is not None:
        ranks.leave(world.watch, error)


def all_reduce(values: list[float], world: Dist, device: str, op: str = "sum") -> list[float]:
    """Reduce a few host floats across ranks (one collective); identity on a single process."""
    if not world.enabled:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op={"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}[op])
    return t.tolist()


def gather(values: list[float], world: Dist, device: str) -> list[list[float]]:
    """Every rank's `values` (same length on all), indexed by rank, on every rank. Each rank fills its own row of a
    zeroed table and one sum assembles it: a NaN (a figure a rank does not have) stays in its own row."""
    if not world.enabled:
        return [list(values)]
    table = [0.0] * (len(values) * world.world_size)
    table[world.rank * len(values) : (world.rank + 1) * len(values)] = values
    flat = all_reduce(table, world, device, "sum")
    return [flat[r * len(values) : (r + 1) * len(values)] for r in range(world.world_size)]
