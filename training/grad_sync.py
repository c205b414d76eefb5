"""How the ranks average their gradients under torchrun (`train --grad-sync`).

- `ddp`: DistributedDataParallel as torch ships it. Compiled, Dynamo's DDPOptimizer splits the model at DDP's 25 MB
  gradient buckets so that each bucket's all-reduce overlaps the rest of the backward.
- `step-graph`: no DDP wrapper. After the backward every gradient is copied into one flat buffer per dtype and
  all-reduced once (`FlatAllReduce`), and the whole step is captured as one CUDA graph (training.step_graph). The
  gradients then become views into that buffer, each with its parameter's strides, as the fused optimizer needs.
- `auto` (`choose`): the fastest measured way that applies here (docs/BENCHMARKS.md, finding 7).

Both give the same losses to rounding (tests/training/test_grad_sync.py, over gloo)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from common.torch_private import foreach_copy_

from .config import GRAD_SYNC_WAYS

FINDING = "docs/BENCHMARKS.md, finding 7"


def choose(how: str, *, compiled: bool, device: str, world_size: int, vae: bool, text: bool = False) -> tuple[str, str]:
    """(the way the ranks average gradients, why): `how` where the user named one; for "auto" the fastest measured
    way that applies here, the step graph where it can capture the step (compiled, CUDA, bf16 or fp32, no --vae)."""
    if how != "auto":
        return how, "as --grad-sync asks"
    cuda = device.startswith("cuda")
    if world_size <= 1:
        if compiled and cuda:
            return "ddp", f"one GPU: torch.compile's CUDA graphs, 1.5% faster than the step graph there ({FINDING})"
        return "ddp", "one process: no gradients to average"
    if not cuda:
        return "ddp", "on the CPU: the step graph is a CUDA graph"
    if not compiled:
        return "ddp", f"not compiled: the step graph captures a compiled step (--compile; {FINDING})"
    if vae:
        return "ddp", "the step graph does not capture --vae's encoder: latents from `dataprep convert --vae` take it"
    if text:
        return (
            "ddp",
            "the step graph does not capture a text model's captions: their length changes from batch to batch",
        )
    return "step-graph", f"compiled on {world_size} GPUs: the whole step as one CUDA graph, the fastest ({FINDING})"


def wrap(model: torch.nn.Module, how: str, world_size: int) -> tuple[torch.nn.Module, Callable[[], None] | None]:
    """(the module the step calls, what to call between backward and the optimizer: None where the wrapper has
    averaged the gradients by the end of backward). A single process trains `model` itself, with nothing to average."""
    if how not in GRAD_SYNC_WAYS:
        raise ValueError(f"grad_sync must be one of {', '.join(GRAD_SYNC_WAYS)}, not {how!r}")
    if world_size <= 1:
        return model, None
    if how == "step-graph":
        return model, FlatAllReduce(model, world_size)
    return torch.nn.parallel.DistributedDataParallel(model), None


class FlatAllReduce:
    """Averages every gradient over the ranks with one all-reduce of a flat buffer per dtype. Construction broadcasts
    rank 0's parameters and buffers, as DDP's does, so every rank starts from the same weights."""

    def __init__(self, model: torch.nn.Module, world_size: int) -> None:
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.world_size = world_size
        self.groups = _by_dtype(self.params)
        # one buffer per dtype and its views, made once: the step hands the views back as the gradients
        self.buffers = {
            d: torch.zeros(sum(p.numel() for p in ps), dtype=d, device=ps[0].device) for d, ps in self.groups.items()
        }
        self.views = {d: _strided_views(self.buffers[d], ps) for d, ps in self.groups.items()}
        # NCCL divides inside the collective (AVG, the sum scaled by 1/n: DDP's divide-then-sum bit for bit where n
        # is a power of two); gloo has no AVG, so there the buffer is divided first, as DDP divides each bucket
        self.average = dist.get_backend() == "nccl"
        with torch.no_grad():
            for group in _by_dtype([*model.parameters(), *model.buffers()]).values():
                flat = torch.cat([t.reshape(-1) for t in group])
                dist.broadcast(flat, 0)
                foreach_copy_(group, _views(flat, group))

    @torch.no_grad()
    def __call__(self) -> None:
        for p in self.params:
            if p.grad is None:  # unused this step: DDP's bucket holds zeros for it too
                p.grad = torch.zeros_like(p)
        for dtype, params in self.groups.items():
            flat, views = self.buffers[dtype], self.views[dtype]
            foreach_copy_(views, [p.grad for p in params])
            if self.average:
                dist.all_reduce(flat, op=dist.ReduceOp.AVG)
            else:
                flat.div_(self.world_size)
                dist.all_reduce(flat)
            for p, view in zip(params, views):
                p.grad = view


def _by_dtype(tensors: list[torch.Tensor]) -> dict[torch.dtype, list[torch.Tensor]]:
    out: dict[torch.dtype, list[torch.Tensor]] = {}
    for t in tensors:
        out.setdefault(t.dtype, []).append(t)
    return out


def _views(flat: torch.Tensor, like: list[torch.Tensor]) -> list[torch.Tensor]:
    return [v.view_as(t) for v, t in zip(flat.split([t.numel() for t in like]), like)]


def _strided_views(flat: torch.Tensor, like: list[torch.Tensor]) -> list[torch.Tensor]:
    """Consecutive pieces of `flat` with each tensor's shape and strides: a dense tensor in any memory format (a
    channels_last convolution's weight) fills exactly its numel elements."""
    views, offset = [], 0
    for t in like:
        if torch.empty_like(t, device="meta").stride() != t.stride():  # torch keeps a dense tensor's strides alone
            raise ValueError(
                f"flat gradient sync needs dense parameters; one of shape {tuple(t.shape)} has strides "
                f"{t.stride()}: use --grad-sync ddp"
            )
        views.append(flat.as_strided(t.shape, t.stride(), flat.storage_offset() + offset))
        offset += t.numel()
    return views
