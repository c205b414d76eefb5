"""The program's own data-free rate: its loader replaced by a replay of its first batches.

The first time a watched loader is iterated, its real iterator hands over `replay_batches` batches and is dropped
(its workers stop). From then on every iteration of that loader cycles through copies kept in memory, copied afresh
for each step: tensors on the CPU into page-locked memory (so the only loading cost left is the copy to the GPU the
program makes itself, and it can overlap), tensors already on the GPU on the GPU. Each iteration yields as many
batches as the real one would (`len(loader)`), so epoch-based programs keep their shape; a loader without a length
replays without end.
"""

from __future__ import annotations

import dataclasses
import itertools

_CACHE: dict[tuple, list] = {}


def _keep(x):
    """A copy that outlives the loader's buffers: pinned on the CPU (when CUDA is there), cloned on a GPU."""
    import torch

    if isinstance(x, torch.Tensor):
        if x.is_cuda or not torch.cuda.is_available():
            return x.detach().clone()
        return torch.empty_like(x, pin_memory=True).copy_(x)  # one copy, into the caching host allocator's memory
    if isinstance(x, dict):
        return type(x)((k, _keep(v)) for k, v in x.items())
    if isinstance(x, tuple) and hasattr(x, "_fields"):  # a namedtuple
        return type(x)(*(_keep(v) for v in x))
    if isinstance(x, (list, tuple)):
        return type(x)(_keep(v) for v in x)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return dataclasses.replace(x, **{f.name: _keep(getattr(x, f.name)) for f in dataclasses.fields(x)})
    return x


def capture(make_iter, count: int) -> list:
    """The first `count` batches of one fresh iteration (fewer if the epoch is shorter)."""
    it = make_iter()
    try:
        batches = [_keep(b) for b in itertools.islice(it, count)]
    finally:
        shutdown = getattr(it, "_shutdown_workers", None)  # a DataLoader's worker processes: stop them now
        if callable(shutdown):
            shutdown()
        close = getattr(it, "close", None)
        if callable(close):
            close()
    if not batches:
        raise RuntimeError("bench watch --data-free: the loader yielded no batch to replay")
    return batches


def replay_iterator(loader, key: tuple, make_iter):
    """An iterator over the replayed batches, as long as one real iteration of `loader`."""
    from .state import STATE

    if key not in _CACHE:
        _CACHE[key] = capture(make_iter, STATE.settings.replay_batches)
    try:
        length = len(loader)
    except Exception:  # no length: replay until the program stops asking
        length = None
    batches = map(_fresh, itertools.cycle(_CACHE[key]))
    return batches if length is None else itertools.islice(batches, length)


def _fresh(batch):
    """A new copy per step, as a real loader hands out: a program may edit its batch in place (x.div_(255)), and
    the replay must not hand those edits back. Pinned buffers come from torch's caching host allocator."""
    return _keep(batch)
