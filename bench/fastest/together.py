"""The probe under several ranks: `train --loader fastest` under torchrun, with no results, measures with the rank
count it will train with.

Every rank of the training starts `bench fastest` in a child process; the children form a process group of their own
(training.data.choose_loader gives them a port of rank 0's host) and run the probe's training loop together, one GPU
each under DDP, each rank reading its own shard as the training will. Rank 0 leads: it runs the probe (probe_feed.py) as
one process does, and before each step tells the others, over a gloo group (a few host bytes, no device sync), what that
step eats: the resident batch, a candidate loader's next batch, or nothing more. A follower opens the same candidate on
its own shard; one that cannot deliver a batch says so at the next step (training the resident batch meanwhile, so that
the ranks stay in step), and rank 0 counts the candidate as failed. The ceilings are rank 0's alone (they only rule out
and order); every confirmation and data-free window is all ranks' training loop. At the end each rank measures the same
windows on its own timer, and rank 0 writes them as records of `nproc` ranks, merged as `bench loaders --nproc` merges
its ranks'."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import torch
import torch.distributed as dist

from common.ranks import host_group

from ..grid.job import BACKEND_NAMES
from .probe_feed import DONE, Feed, Probe, ProbeDone

RESIDENT, LOADER, FINISHED = 0, 1, 2  # what a step eats


class FollowerFailed(RuntimeError):
    """A rank other than 0 could not deliver the candidate's batch (its own error is in its stderr)."""


def same(value):
    """Rank 0's `value` on every rank (itself in one process)."""
    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0, group=host_group())
    return box[0]


def _say(code: list[int]) -> list[int]:
    """One all-reduce (sum) of [what, backend, workers + 1, pin + 1, failures]: rank 0 fills the first four, every
    other rank the last."""
    t = torch.tensor(code, dtype=torch.int64)
    dist.all_reduce(t, group=host_group())
    return t.tolist()


def _encode(cand: tuple | None) -> list[int]:
    if cand is None:
        return [RESIDENT, 0, 0, 0, 0]
    if cand == DONE:
        return [FINISHED, 0, 0, 0, 0]
    backend, workers, pin = cand
    return [LOADER, BACKEND_NAMES.index(backend), -1 if workers is None else workers, -1 if pin is None else pin, 0]


def _decode(code: list[int]) -> tuple | None:
    what, b, w, p, _ = code
    if what == RESIDENT:
        return None
    if what == FINISHED:
        return DONE
    return BACKEND_NAMES[b], None if w == -1 else w, None if p == -1 else bool(p)


def feed(probe: Probe, resident) -> Feed:
    """The loader the probe's training loop sees on this rank: the probe itself on rank 0, its follower elsewhere."""
    rank, size = dist.get_rank(), dist.get_world_size()
    probe.shard = {"rank": rank, "world_size": size}
    if rank == 0:
        probe.tell = _Leader(probe)
        return Feed(probe.run(resident))
    return Feed(_follow(probe, resident))


class _Leader:
    """Rank 0's `Probe.tell`: says what each step eats, and hears which candidate another rank could not load. The
    news comes with the next step's message: a candidate still being confirmed is then refused before that step is
    told (its confirmation fails, as on rank 0 itself); one whose confirmation has ended loses its window."""

    def __init__(self, probe: Probe) -> None:
        self.probe, self.last, self.failed = probe, None, None

    def __call__(self, cand: tuple | None) -> None:
        if self.failed is not None:
            failed, self.failed = self.failed, None
            error = f"another rank could not load {failed} (its error is in its output)"
            if cand == failed:
                raise FollowerFailed(error)
            p = self.probe
            p.windows = [w for w in p.windows if w.get("config") != failed]
            p.failed.append({"config": failed, "error": f"FollowerFailed: {error}"})
        failures = _say(_encode(cand))[-1]
        if failures and self.last not in (None, DONE):
            self.failed = self.last
        self.last = cand


def _follow(probe: Probe, resident) -> Iterator:
    """A rank other than 0: each step, what rank 0 says; a candidate opened on this rank's shard."""
    from loaders import build_loader
    from training.data import EpochStream

    current, loader, stream, failed = None, None, None, 0
    try:
        while True:
            cand = _decode(_say([0, 0, 0, 0, failed]))
            failed = 0
            if cand == DONE:
                raise ProbeDone
            if cand != current and loader is not None:
                loader.close()
                loader = stream = None
            current = cand
            if cand is None:
                yield resident
                continue
            try:
                if loader is None:
                    loader = build_loader(cand[0], probe.data, **probe.loader_options(cand))
                    stream = EpochStream(loader)
                yield next(stream)
            except Exception as e:  # this rank trains the resident batch; rank 0 drops the candidate next step
                print(f"fastest: rank {dist.get_rank()}: {cand[0]} failed ({type(e).__name__}: {e})", file=sys.stderr)
                failed = 1
                yield resident
    finally:
        if loader is not None:
            loader.close()


def merged_figures(probe: Probe, monitor) -> list[dict] | None:
    """Each window's figures merged over the ranks, on rank 0 (None elsewhere): every rank measures rank 0's windows on
    its own timer and monitor."""
    from training.starvation import latest_timer

    from ..grid.ranks import merge_figures

    windows = same(probe.windows)
    own = probe.figures(latest_timer(), monitor, windows)
    every: list = [None] * dist.get_world_size()
    dist.gather_object(own, every if dist.get_rank() == 0 else None, dst=0, group=host_group())
    if dist.get_rank() != 0:
        return None
    return [merge_figures([ranks_figs[i] for ranks_figs in every]) for i in range(len(windows))]
