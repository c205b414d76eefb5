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
  CUDA graph and replayed (training.step_graph): the host launches one graph a step. The gradients stay views into
  the buffer for good: the step zeroes it and the backward adds into them. It applies on one GPU too (without the
  all-reduce), so a rank count's rate compares with one GPU's of the same kind.
- `step-graph-buckets`: `step-graph`, with each gradient bucket all-reduced inside the graph as soon as the backward has
  made it, so the all-reduces overlap the rest of the backward. A compiled backward hands over every gradient at its
  end, so the model compiles in pieces at 25 MB of parameters (Dynamo's DDPOptimizer, as under DDP); the buffer is
  laid out in the order the first step's backward made the gradients, and cut into buckets along it. On one GPU it is
  `step-graph`.

Each gives the same losses as `ddp` to rounding (tests/test_grad_sync.py, over gloo); which is fastest is measured on
GPUs (bench/studies/scaling.sh)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from functools import partial

import torch
import torch.distributed as dist

GRAD_SYNCS = ("ddp", "ddp-nosplit", "ddp-bucket100", "flat", "step-graph", "step-graph-buckets")  # as training.config
BUCKET_BYTES = 25 * 2**20  # step-graph-buckets: DDP's bucket size, and its smaller first bucket, which starts
FIRST_BUCKET_BYTES = 2**20  # the first all-reduce early


def wrap(model: torch.nn.Module, how: str, world_size: int) -> tuple[torch.nn.Module, Callable[[], None] | None]:
    """(the module the step calls, what to call between backward and the optimizer: None where the wrapper has
    averaged the gradients by the end of backward). A single process trains `model` itself (its gradients in one
    buffer under `step-graph`)."""
    if how not in GRAD_SYNCS:
        raise ValueError(f"grad_sync must be one of {', '.join(GRAD_SYNCS)}, not {how!r}")
    if how in ("step-graph", "step-graph-buckets"):
        buckets = BUCKET_BYTES if how == "step-graph-buckets" else 0
        return model, FlatAllReduce(model, world_size, bound=True, bucket_bytes=buckets)
    if world_size <= 1:
        return model, None
    if how == "flat":
        return model, FlatAllReduce(model, world_size)
    import torch._dynamo

    # read when the compiled model is first called, so set for every DDP run (one process may train twice)
    torch._dynamo.config.optimize_ddp = how != "ddp-nosplit"
    options = {"bucket_cap_mb": 100, "gradient_as_bucket_view": True} if how == "ddp-bucket100" else {}
    return torch.nn.parallel.DistributedDataParallel(model, **options), None


def compile_split(how: str, world_size: int) -> tuple[int, int] | None:
    """(bytes of parameters per piece, of the first) where the compiled model is cut so that its backward hands over
    each bucket's gradients as it goes: under `step-graph-buckets` on several ranks; None: whole."""
    return (BUCKET_BYTES, FIRST_BUCKET_BYTES) if how == "step-graph-buckets" and world_size > 1 else None


class FlatAllReduce:
    """Averages every gradient over the ranks with one all-reduce of a flat buffer per dtype. Construction broadcasts
    rank 0's parameters and buffers, as DDP's does, so every rank starts from the same weights. `bound`: the
    gradients are the buffer's views from the start, zeroed, for a caller that zeroes them in place after each step
    (zero_grad(set_to_none=False)) so that they never move. `bucket_bytes` (bound, several ranks): all-reduce the
    buffer in buckets of about that size, each as soon as the backward has made its gradients (Bucketed)."""

    def __init__(self, model: torch.nn.Module, world_size: int, bound: bool = False, bucket_bytes: int = 0) -> None:
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.world_size = world_size
        self.groups = _by_dtype(self.params)
        self._lay_out(self.groups)
        if bound:
            self._bind()
        self.bucketed = Bucketed(self, bucket_bytes) if bound and bucket_bytes and world_size > 1 else None
        if world_size <= 1:
            return
        with torch.no_grad():
            for group in _by_dtype([*model.parameters(), *model.buffers()]).values():
                flat = torch.cat([t.reshape(-1) for t in group])
                dist.broadcast(flat, 0)
                torch._foreach_copy_(group, _views(flat, group))

    def _lay_out(self, groups: dict[torch.dtype, list[torch.Tensor]]) -> None:
        """One zeroed buffer per dtype and its views, in the groups' order: the step hands the views back as the
        gradients."""
        self.groups = groups
        self.buffers = {
            d: torch.zeros(sum(p.numel() for p in ps), dtype=d, device=ps[0].device) for d, ps in groups.items()
        }
        self.views = {d: _strided_views(self.buffers[d], ps) for d, ps in groups.items()}

    def _bind(self) -> None:
        for d, params in self.groups.items():
            for p, view in zip(params, self.views[d]):
                p.grad = view

    @torch.no_grad()
    def __call__(self) -> None:
        for p in self.params:
            if p.grad is None:  # unused this step: DDP's bucket holds zeros for it too
                p.grad = torch.zeros_like(p)
        if self.bucketed is not None and self.bucketed.run():
            return
        for dtype, params in self.groups.items():
            flat, views = self.buffers[dtype], self.views[dtype]
            grads = [p.grad for p in params]
            if not all(g is v for g, v in zip(grads, views)):  # unless zero_grad kept the views and backward added
                torch._foreach_copy_(views, grads)  # into them: the gradients are in place already
            if self.world_size > 1:
                flat.div_(self.world_size)  # before the sum, as DDP divides each bucket
                dist.all_reduce(flat)
            for p, view in zip(params, views):
                p.grad = view
        if self.bucketed is not None:
            self.bucketed.learnt()


class Bucketed:
    """The all-reduce of a bound FlatAllReduce in buckets, each launched from the backward as soon as its gradients
    are in (a hook on every parameter), on a stream of its own, so that it overlaps the rest of the backward; the
    step's stream waits for them all before the optimizer. The first step learns the order in which the backward makes
    the gradients (all-reduced whole); the buffer is then laid out in rank 0's order and cut into buckets along it.
    Buckets launch in that order on every rank, as NCCL needs: one whose gradients come early waits for those before
    it, and what the backward did not reach (an unused parameter) is launched after it."""

    def __init__(self, sync: FlatAllReduce, bucket_bytes: int) -> None:
        self.sync, self.bucket_bytes = sync, bucket_bytes
        self.order: list[int] = []  # parameter indices as the first backward made their gradients
        self.buckets: list[torch.Tensor] = []  # slices of the buffers, in launch order
        self.bucket_of: list[int] = []  # per parameter
        self.left: list[int] = []  # per bucket: gradients not yet made this step
        self.launched = 0
        device = sync.params[0].device
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        for i, p in enumerate(sync.params):
            p.register_post_accumulate_grad_hook(partial(self._made, i))

    def _made(self, i: int, _: torch.Tensor) -> None:
        if not self.buckets:
            self.order.append(i)
            return
        self.left[self.bucket_of[i]] -= 1
        while self.launched < len(self.buckets) and self.left[self.launched] == 0:
            self._launch()

    def _launch(self) -> None:
        bucket, here = self.buckets[self.launched], torch.cuda.current_stream() if self.stream else None
        self.launched += 1
        if here is not None:
            self.stream.wait_stream(here)
        with torch.cuda.stream(self.stream) if here is not None else nullcontext():
            bucket.div_(self.sync.world_size)  # before the sum, as DDP divides each bucket
            dist.all_reduce(bucket)

    def run(self) -> bool:
        """After the backward: launch what it did not reach and wait for every bucket. False while still learning."""
        if not self.buckets:
            return False
        while self.launched < len(self.buckets):
            self._launch()
        if self.stream is not None:
            torch.cuda.current_stream().wait_stream(self.stream)
        self._reset()
        return True

    def _reset(self) -> None:
        self.launched, self.left = 0, [0] * len(self.buckets)
        for b in self.bucket_of:
            self.left[b] += 1

    def learnt(self) -> None:
        """After the first step's whole all-reduce: the buffer laid out anew in rank 0's order, this step's gradients
        moved with it, and cut into buckets."""
        sync, n = self.sync, len(self.sync.params)
        made = list(dict.fromkeys(self.order))
        order = torch.tensor(made + sorted(set(range(n)) - set(made)), device=sync.params[0].device)
        dist.broadcast(order, 0)
        order = order.tolist()
        grads = [sync.params[i].grad.clone() for i in order]
        sync._lay_out(_by_dtype([sync.params[i] for i in order]))
        sync._bind()
        torch._foreach_copy_([sync.params[i].grad for i in order], grads)
        self._cut()
        self._reset()

    def _cut(self) -> None:
        """Buckets along each dtype's buffer: gradients in order, up to bucket_bytes (the first FIRST_BUCKET_BYTES)."""
        index = {id(p): i for i, p in enumerate(self.sync.params)}
        self.bucket_of = [0] * len(index)
        for d, params in self.sync.groups.items():
            flat, start, end = self.sync.buffers[d], 0, 0
            for k, p in enumerate(params):
                self.bucket_of[index[id(p)]] = len(self.buckets)
                end += p.numel()
                cap = self.bucket_bytes if self.buckets else FIRST_BUCKET_BYTES
                if (end - start) * flat.element_size() >= cap or k == len(params) - 1:
                    self.buckets.append(flat[start:end])
                    start = end


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
