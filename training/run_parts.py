"""What set-up (training.prepare) makes, as one `Run` of a few typed groups that the loop (training.loop) passes to
each of its pieces: the trainer (model and what trains it), the feed (the data), the watch (log, timer, guard, stop)
and the record every checkpoint carries."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from common.stopping import StopOnSignal

from . import ddp
from .compile_cache import Compiled
from .config import TrainConfig
from .data import DataSpec, EpochStream, LoaderChoice
from .ema import Ema
from .grad_sync import FlatAllReduce
from .guard import Guard
from .metrics import MetricsLog
from .starvation import StepTimer
from .step_graph import StepGraph

if TYPE_CHECKING:
    from .latent import OnlineEncoder, Preview


@dataclass(kw_only=True)
class Trainer:
    """The model and what trains it: what one step uses."""

    stateful: dict  # model, ema, optimizer, schedule: what a checkpoint saves and a resume loads
    config: object  # the preset's UNetConfig or DiTConfig: FLOPs counted from shapes, check_fits, the checkpoint
    diffusion: torch.nn.Module
    net: torch.nn.Module  # the model as the step calls it: DDP-wrapped and/or compiled
    grad_sync: str  # the way taken (training.grad_sync.choose)
    sync_grads: FlatAllReduce | None  # averages the gradients between backward and the optimizer
    graph: StepGraph | None  # --grad-sync step-graph: runs each step as one CUDA graph
    ema: Ema
    autocast: torch.autocast
    encoder: OnlineEncoder | None  # --vae: run inside the step
    compiled: Compiled | None  # compile_cache's record of a compiled run; None when eager

    def __post_init__(self) -> None:
        self.params = list(self.stateful["model"].parameters())  # listed once: the foreach calls take lists

    @property
    def conditional(self) -> bool:
        return getattr(self.config, "num_classes", 0) > 0  # DiT on labelled data


@dataclass(kw_only=True)
class Feed:
    """The data: where batches come from and what a preview grid shows."""

    spec: DataSpec
    stream: EpochStream
    backend: str
    choice: LoaderChoice | None  # training.data.choose_loader's, None for a loader given to main
    preview: Preview
    started: float  # when the stream started: the first batch's latency counts from here
    captions: object | None = None  # text models: training.captions.Captions, which prepares Batch.text for the step


@dataclass(kw_only=True)
class Watch:
    """What watches the steps: the log, the step timer, the non-finite guard and the stop signal."""

    log: MetricsLog
    timer: StepTimer
    guard: Guard
    stop: StopOnSignal


@dataclass(kw_only=True)
class Record:
    """What every checkpoint carries besides the state."""

    path: Path
    train_config: dict
    trained_on: dict  # "data": what the run trains on (checkpoint.data_identity); "data_before": earlier data, if any
    model_config: dict


@dataclass(kw_only=True)
class Run:
    """What set-up made, never rebound: passed explicitly rather than shared through closures."""

    cfg: TrainConfig
    world: ddp.Dist  # this process's rank among the group's
    device: str
    trainer: Trainer
    feed: Feed
    watch: Watch
    record: Record
    start_step: int  # the checkpoint's step, 0 for a fresh run
    marks: dict[str, float]  # points of the start, seconds since launch: a compiled run's record keeps them
    started: float  # the call's start, for wall_s
