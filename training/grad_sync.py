"""How the ranks average their gradients under torchrun (`train --grad-sync`): DDP as torch ships it, or ways that
keep a compiled step in fewer pieces.

A compiled `ddpm_cifar10` step at batch 128 takes milliseconds (docs/BENCHMARKS.md, finding 7), so what data parallelism
adds per step shows. Under DDP, Dynamo's DDPOptimizer splits the compiled model at DDP's 25 MB gradient buckets so that
each bucket's all-reduce overlaps the rest of the backward; with CUDA graphs ("reduce-overhead") each piece is a graph
of its own and the all-reduces run eagerly between them. The choices:

- `ddp`: that, as torch ships it (the default).
- `ddp-nosplit`: DDP with Dynamo's DDPOptimizer off: the model compiles as one graph, forward and backward, as on one
  GPU; DDP's buckets are all-reduced when the backward has produced every gradient, with no overlap.
- `ddp-bucket100`: DDP with 100 MB buckets whose gradients are views into them (`gradient_as_bucket_view`): fewer
  pieces, no copy of each gradient into its bucket.
- `flat`: no DDP wrapper. The model compiles as on one GPU; after the backward, every gradient is copied into one flat
  buffer, divided by the number of ranks and all-reduced once; the gradients then become views into that buffer
  (copying them back launched a copy per gradient: 254 device-to-device copies a step in a `ddpm_cifar10` trace).
  Each view has its parameter's strides (channels_last convolutions included): the fused optimizer needs a gradient
  laid out as its parameter. The same arithmetic as DDP's (each gradient divided, then summed over ranks), in one
  collective.
- `step-graph`: `flat`, with the whole step (forward, backward, that all-reduce, clip, optimizer, EMA) captured as one
  CUDA graph and replayed (training.step_graph): the host launches one graph a step. It applies on one GPU too
  (without the all-reduce), so a rank count's rate compares with one GPU's of the same kind.

Each gives the same losses as `ddp` to rounding (tests/test_grad_sync.py, over gloo); which is fastest is measured on
GPUs (bench/studies/scaling.sh)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from .config import GRAD_SYNC_WAYS

FINDING = "docs/BENCHMARKS.md, finding 7"


def choose(how: str, *, compiled: bool, device: str, world_size: int, precision: str, vae: bool) -> tuple[str, str]:
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
    if precision == "fp16" or vae:
        return "ddp", "the step graph captures neither fp16's loss scaling nor --vae's encoder"
    return "step-graph", f"compiled on {world_size} GPUs: the whole step as one CUDA graph, the fastest ({FINDING})"


def wrap(model: torch.nn.Module, how: str, world_size: int) -> tuple[torch.nn.Module, Callable[[], None] | None]:
    """(the module the step calls, what to call between backward and the optimizer: None where the wrapper has
    averaged the gradients by the end of backward). A single process trains `model` itself, with nothing to average."""
    if how not in GRAD_SYNC_WAYS:
        raise ValueError(f"grad_sync must be one of {', '.join(GRAD_SYNC_WAYS)}, not {how!r}")
    if world_size <= 1:
        return model, None
    if how in ("flat", "step-graph"):
        return model, FlatAllReduce(model, world_size)
    import torch._dynamo

    # read when the compiled model is first called, so set for every DDP run (one process may train twice)
    torch._dynamo.config.optimize_ddp = how != "ddp-nosplit"
    options = {"bucket_cap_mb": 100, "gradient_as_bucket_view": True} if how == "ddp-bucket100" else {}
    return torch.nn.parallel.DistributedDataParallel(model, **options), None


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
                torch._foreach_copy_(group, _views(flat, group))

    @torch.no_grad()
    def __call__(self) -> None:
        for p in self.params:
            if p.grad is None:  # unused this step: DDP's bucket holds zeros for it too
                p.grad = torch.zeros_like(p)
        for dtype, params in self.groups.items():
            flat, views = self.buffers[dtype], self.views[dtype]
            torch._foreach_copy_(views, [p.grad for p in params])
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
