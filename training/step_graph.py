"""`--grad-sync step-graph`: the whole training step (forward, backward, the gradients' all-reduce, clip, optimizer and
EMA) captured once as one CUDA graph and replayed every step, so the host launches one graph a step instead of every
kernel of it: a replay costs the host microseconds, whatever the host (docs/BENCHMARKS.md, finding 7).

What a graph needs, and where it gets it here:
- fixed addresses: the batch is copied into static input tensors; everything else the step keeps (gradients, the
  flat buffer they are averaged in, optimizer state) is allocated at the capture and reused by every replay;
- nothing decided on the host inside the step: the learning rate and the EMA's weight are device tensors filled
  before each replay (torch's schedules fill a tensor rate in place);
- warm-up outside the graph: the first steps run eagerly (torch.compile compiles, cuDNN tunes, NCCL connects, Adam
  makes its state), on the side stream the capture uses, as torch's documentation advises;
- the random numbers of an eager step: torch's graph-safe generator gives each replay the offsets an eager step
  would have drawn, so the noise and timesteps (and dropout) match the launched step's
  (tests/training/test_training_loop.py).

On a CPU there is no graph: the same step runs eagerly, which is how the CPU tests exercise it."""

from __future__ import annotations

from collections.abc import Callable

import torch

WARMUP_STEPS = 3  # eager steps before the capture: the compile and the lazy set-ups happen in the first


class StepGraph:
    """Runs `step(x, y) -> loss` for each step: eagerly for the first WARMUP_STEPS, then captured once and replayed.
    `step` must enqueue the whole step without a host sync and leave every tensor it keeps where it was."""

    def __init__(self, optimizer: torch.optim.Optimizer, device: str) -> None:
        self.capture = device.startswith("cuda")
        self.x: torch.Tensor | None = None
        self.y: torch.Tensor | None = None
        self.loss: torch.Tensor | None = None
        self.graph: torch.cuda.CUDAGraph | None = None
        self.steps = 0
        if self.capture:
            self.stream = torch.cuda.Stream(device)
            for group in optimizer.param_groups:  # read by the captured optimizer at each replay, not frozen into it
                group["lr"] = torch.tensor(float(group["lr"]), device=device)
                group["capturable"] = True
            optimizer.register_state_dict_post_hook(_plain_groups)

    def __call__(self, step: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor], x, y) -> torch.Tensor:
        """This step's loss (a device tensor the next replay overwrites: copy it before then)."""
        self._inputs(x, y)
        self.steps += 1
        if not self.capture:
            return step(self.x, self.y)
        if self.graph is not None:
            self.graph.replay()
            return self.loss
        here = torch.cuda.current_stream()
        self.stream.wait_stream(here)
        if self.steps <= WARMUP_STEPS:
            with torch.cuda.stream(self.stream):
                loss = step(self.x, self.y)
            here.wait_stream(self.stream)
            return loss
        graph = torch.cuda.CUDAGraph()
        # thread_local, as torch.compile's own CUDA graphs capture: in the default ("global") mode a CUDA call from any
        # other thread meanwhile (a loader's pinning thread) invalidates the capture
        with torch.cuda.graph(graph, stream=self.stream, capture_error_mode="thread_local"):
            self.loss = step(self.x, self.y)
        self.graph = graph
        graph.replay()  # the capture recorded the step without running it: this step's work
        return self.loss

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
