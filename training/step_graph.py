"""`--grad-sync step-graph`: the whole training step (forward, backward, the gradients' all-reduce, clip, optimizer and
EMA) captured once as one CUDA graph and replayed every step, so the host launches one graph a step instead of
every kernel of it.

Why: with CUDA graphs from torch.compile ("reduce-overhead") only the forward and backward are graphs; the all-reduce,
clip, optimizer and EMA are launched from Python each step. One process kept ahead of an H200's 18 ms `ddpm_cifar10`
step, but on some 4-GPU hosts each DDP rank took 24-31 ms of host time a step, and the GPUs waited for it
(docs/BENCHMARKS.md, finding 7). A replayed graph costs the host microseconds, whatever the host.

What a graph needs, and where it gets it here:
- fixed addresses: the batch is copied into static input tensors; everything else the step keeps (gradients, the
  flat buffer they are averaged in, optimizer state) is allocated at the capture and reused by every replay;
- nothing decided on the host inside the step: the learning rate becomes a device tensor that the schedule fills
  before each replay (torch's schedules fill a tensor rate in place), and the EMA's weight is one too;
- warm-up outside the graph: the first steps run eagerly (torch.compile compiles, cuDNN tunes, NCCL connects, Adam
  makes its state), on the side stream the capture uses, as torch's documentation advises;
- the random numbers of an eager step: torch's graph-safe generator gives each replay the offsets an eager step
  would have drawn, so the noise and timesteps (and dropout) match the launched step's (tests/test_training_loop.py).

The EMA runs one step late, on a stream of its own: the weights the last step made stay as they are until this
step's optimizer, so their EMA update (memory-bound: three passes over every weight) runs beside this step's forward
or all-reduce instead of after its optimizer, alone. `settle_ema` brings it up to date before anything reads it (a
checkpoint, a preview grid); the updates are the launched step's, in the same order.

On a CPU there is no graph: the same step runs eagerly, which is how the CPU tests exercise it."""

from __future__ import annotations

from collections.abc import Callable

import torch

WARMUP_STEPS = 3  # eager steps before the capture: the compile and the lazy set-ups happen in the first


class StepGraph:
    """Runs `body(x, y) -> loss` for each step: eagerly for the first WARMUP_STEPS, then captured once and
    replayed. `body` must enqueue the whole step without a host sync and leave every tensor it keeps where it was."""

    def __init__(
        self, optimizer: torch.optim.Optimizer, device: str, ema: Callable[[float | torch.Tensor], None]
    ) -> None:
        self.capture = device.startswith("cuda")
        self.ema = ema  # ema(weight): the EMA update toward the model's weights as they are
        self.ema_weight = torch.zeros((), device=device)  # the update the graph runs: the previous step's weight
        self.ema_due = 0.0  # the weight of the update the last step left to the next
        self.x: torch.Tensor | None = None
        self.y: torch.Tensor | None = None
        self.loss: torch.Tensor | None = None
        self.graph: torch.cuda.CUDAGraph | None = None
        self.steps = 0
        if self.capture:
            self.stream = torch.cuda.Stream(device)
            self.side = torch.cuda.Stream(device)  # the late EMA's
            for group in optimizer.param_groups:  # read by the captured optimizer at each replay, not frozen into it
                group["lr"] = torch.tensor(float(group["lr"]), device=device)
                group["capturable"] = True
            optimizer.register_state_dict_post_hook(_plain_groups)

    def __call__(
        self, body: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor], x, y, ema_weight: float
    ) -> torch.Tensor:
        """This step's loss (a device tensor the next replay overwrites: copy it before then). `body` calls
        `ema_beside` once and `before_optimizer` before the optimizer; `ema_weight` is this step's EMA weight."""
        self._inputs(x, y)
        self.ema_weight.fill_(self.ema_due)
        self.ema_due = ema_weight
        self.steps += 1
        if not self.capture:
            return body(self.x, self.y)
        if self.graph is not None:
            self.graph.replay()
            return self.loss
        here = torch.cuda.current_stream()
        self.stream.wait_stream(here)
        if self.steps <= WARMUP_STEPS:
            with torch.cuda.stream(self.stream):
                loss = body(self.x, self.y)
            here.wait_stream(self.stream)
            return loss
        graph = torch.cuda.CUDAGraph()
        # thread_local, as torch.compile's own CUDA graphs capture: in the default ("global") mode a CUDA call from any
        # other thread meanwhile (a loader's pinning thread) invalidates the capture; a streamed dit_b2 run's was so
        with torch.cuda.graph(graph, stream=self.stream, capture_error_mode="thread_local"):
            self.loss = body(self.x, self.y)
        self.graph = graph
        graph.replay()  # the capture recorded the step without running it: this step's work
        return self.loss

    def ema_beside(self) -> None:
        """The previous step's EMA update, forked onto the side stream here: it runs beside whatever the step
        enqueues next, until `before_optimizer`."""
        if not self.capture:
            self.ema(self.ema_weight)
            return
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            self.ema(self.ema_weight)

    def before_optimizer(self) -> None:
        """The optimizer moves the weights the late EMA update reads: it waits for it."""
        if self.capture:
            torch.cuda.current_stream().wait_stream(self.side)

    def settle_ema(self) -> None:
        """The update the last step left to the next, now, so the EMA holds every step's; the next step's graph then
        updates by a weight of 0 (no change)."""
        if self.ema_due:
            self.ema(self.ema_due)
            self.ema_due = 0.0

    def _inputs(self, x: torch.Tensor, y: torch.Tensor | None) -> None:
        """The batch into the tensors the graph reads (made at the first step, with the batch's shapes)."""
        if self.x is None:
            self.x, self.y = x.clone(), None if y is None else y.clone()
            return
        if x.shape != self.x.shape or (y is not None and y.shape != self.y.shape):
            raise ValueError(
                f"--grad-sync step-graph replays one batch shape: got {tuple(x.shape)} after {tuple(self.x.shape)}; "
                "batches must keep their size (drop_last)"
            )
        self.x.copy_(x, non_blocking=True)
        if y is not None:
            self.y.copy_(y, non_blocking=True)


def _plain_groups(optimizer: torch.optim.Optimizer, state: dict) -> dict:
    """A checkpoint keeps the rate as a number, as any run writes it: a run without the graph resumes from it as
    well (its copies of the groups, not the live ones, are changed)."""
    for group in state["param_groups"]:
        group["lr"], group["capturable"] = float(group["lr"]), False
    return state
