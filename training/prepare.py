"""Everything made before the first step, in the order it is made: the model and optimizer, the resume, the compile,
the data stream, and what watches the steps (log, timer, guard). `set_up` returns it all as one `Run`, which the loop
(training.loop) passes to each of its pieces."""

from __future__ import annotations

import copy
import sys
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import torch

from . import ddp
from .checkpoint import (
    CKPT_NAME,
    CheckpointError,
    check_data,
    data_identity,
    load_checkpoint,
    remove_leftovers,
    restore_rng,
    unchecked_note,
)
from .compile_cache import for_run, since_launch
from .config import TrainConfig
from .data import DataSpec, EpochStream, choose_loader, data_spec, open_loader
from .ema import ema_update
from .grad_sync import wrap
from .guard import Guard
from .metrics import MetricsLog
from .starvation import StepTimer
from .step_graph import StepGraph
from .stopping import StopOnSignal

AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}


@dataclass
class Run:
    """What set-up made, read by every piece of the loop and never rebound: passed explicitly rather than shared
    through closures, so each piece says what it uses."""

    cfg: TrainConfig
    info: ddp.Dist
    device: str
    stop: StopOnSignal
    spec: DataSpec
    mcfg: object  # the model preset's config: FLOPs counted from shapes, check_fits, the checkpoint's record
    encoder: object | None  # --vae: latent.OnlineEncoder, run inside the step
    stateful: dict  # model, ema, optimizer, scaler, schedule: what a checkpoint saves and a resume loads
    diffusion: torch.nn.Module
    net: torch.nn.Module  # the model as the step calls it: DDP-wrapped and/or compiled
    sync_grads: object | None  # averages the gradients between backward and the optimizer (training.grad_sync)
    graph: object | None  # --grad-sync step-graph: training.step_graph.StepGraph, which runs each step
    autocast: torch.autocast
    compiled: object | None  # compile_cache's record of a compiled run; None when eager
    stream: EpochStream
    backend: str
    choice: object | None  # stream.choose_loader's choice, None for a loader given to main
    log: MetricsLog
    preview: object  # latent.Preview: what a sample grid shows
    timer: StepTimer
    guard: Guard
    ckpt_path: Path
    train_config: dict
    record: dict  # what the run trains on, saved in every checkpoint (checkpoint.data_identity)
    set_up: dict[str, float]  # points of the start, seconds since launch: a compiled run's record keeps them
    start_step: int  # the checkpoint's step, 0 for a fresh run
    t_start: float  # the call's start, for wall_s
    t_stream: float  # when the data stream started: the first batch's latency counts from here
    captions: object | None = None  # text models: training.captions.Captions, which prepares Batch.text for the step

    def __post_init__(self) -> None:
        # listed once: the step's foreach calls take lists
        self.params = list(self.stateful["model"].parameters())
        self.ema_params = list(self.stateful["ema"].parameters())

    @property
    def conditional(self) -> bool:
        return getattr(self.mcfg, "num_classes", 0) > 0  # DiT on labelled data

    @property
    def model_config(self) -> dict:
        return asdict(self.mcfg)


def set_up(cfg: TrainConfig, loader, info: ddp.Dist, device: str, stop: StopOnSignal, cleanup: ExitStack) -> Run:
    """Model, resume, compile, data: the resume needs the model, the compile the resumed weights, and so on."""
    from .diffusion import GaussianDiffusion
    from .latent import OnlineEncoder, Preview
    from .model import model_config

    t_start, set_up = time.perf_counter(), {}
    mark(set_up, "imports done")
    spec = data_spec(cfg, injected=loader is not None)
    # --vae: the autoencoder encodes every batch inside the step, and the model trains on its latents
    encoder = OnlineEncoder(cfg.vae, spec, cfg.data, device, cfg.compile) if cfg.vae else None
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True  # fp32 mode on tensor cores
    torch.backends.cudnn.benchmark = True  # fixed shapes: autotune the convolutions once

    # model, EMA copy, diffusion, optimizer: the same init on every rank (DDP broadcasts it as well)
    torch.manual_seed(cfg.seed)
    captions = _captions(cfg, spec, device)
    text_dim = captions.dim if captions else None
    mcfg = model_config(spec.model, encoder.shape if encoder else spec.shape, spec.classes, text_dim)
    stateful = _build(cfg, mcfg, device)
    diffusion = GaussianDiffusion().to(device)
    train_config = cfg.to_dict() | {"model": spec.model, "world_size": info.world_size}
    mark(set_up, "model on the device")  # CUDA's start included
    ckpt_path, record = cfg.out / CKPT_NAME, _record(cfg, info, spec, encoder)
    state = _resume(cfg, info, stop, ckpt_path, stateful, asdict(mcfg), train_config, record)
    net, sync_grads, autocast, compiled = _compile(cfg, stateful["model"], spec.model, mcfg, device, info, set_up)
    graph = None
    if cfg.grad_sync == "step-graph":  # after the resume: the captured optimizer reads the resumed state
        ema_params, params = list(stateful["ema"].parameters()), list(stateful["model"].parameters())
        graph = StepGraph(stateful["optimizer"], device, partial(ema_update, ema_params, params))
    stream, backend, choice, t_stream = _open_data(cfg, loader, device, info, spec, cleanup, set_up, state)

    start_step = state["step"] if state is not None else 0
    log = MetricsLog(cfg, info, device, start_step, backend, choice and choice.reason)
    if compiled is not None and compiled.cache is not None:
        log.write(f"compile cache: {compiled.cache.note}")
    preview = Preview(spec, encoder, device)
    timer = StepTimer(device)
    # non-finite values end the run, on every rank alike
    guard = Guard(info, stop, stateful["model"], stateful["ema"], stateful["optimizer"])
    return Run(
        cfg,
        info,
        device,
        stop,
        spec,
        mcfg,
        encoder,
        stateful,
        diffusion,
        net,
        sync_grads,
        graph,
        autocast,
        compiled,
        stream,
        backend,
        choice,
        log,
        preview,
        timer,
        guard,
        ckpt_path,
        train_config,
        record,
        set_up,
        start_step,
        t_start,
        t_stream,
        captions,
    )


def _captions(cfg: TrainConfig, spec: DataSpec, device: str):
    """Text models (and --text-encoder runs): what prepares each batch's captions; None for the others."""
    from .data import DataError
    from .model import TEXT_PRESETS

    model = spec.model
    if model not in TEXT_PRESETS and not cfg.text_encoder:
        return None
    if model not in TEXT_PRESETS:
        raise DataError(f"--text-encoder: {model} takes no captions; pick a text model ({', '.join(TEXT_PRESETS)})")
    from .captions import Captions

    captions = Captions.for_data(cfg, spec.manifest, device)
    problem = captions.missing(cfg)
    if problem:
        raise DataError(problem)
    return captions


def mark(set_up: dict[str, float], what: str) -> None:
    set_up[what] = round(since_launch(), 3)


def _record(cfg: TrainConfig, info: ddp.Dist, spec: DataSpec, encoder) -> dict:
    """What the run trains on, recorded in every checkpoint: a resume on other data or another autoencoder is
    refused. First the temporary files of checkpoint writes killed midway go."""
    for line in remove_leftovers(cfg.out) if info.main else ():
        print(line, file=sys.stderr)
    return {"data": data_identity(cfg.data, spec.manifest, encoder.vae.identity if encoder else None)}


def _build(cfg: TrainConfig, mcfg, device: str) -> dict:
    """The model, its EMA copy, the optimizer, the loss scaler and the learning-rate schedule: what a checkpoint
    holds, by the names it holds them under."""
    cuda = device.startswith("cuda")
    memory_format = torch.channels_last if cfg.channels_last and cuda else torch.contiguous_format
    model = mcfg.build().to(device, memory_format=memory_format)
    ema_model = copy.deepcopy(model).requires_grad_(False)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, fused=cuda)  # fused: one kernel for all params
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / max(cfg.warmup, 1)))
    scaler = torch.amp.GradScaler(device.split(":")[0], enabled=cfg.precision == "fp16")
    return {"model": model, "ema": ema_model, "optimizer": optimizer, "scaler": scaler, "schedule": schedule}


def _resume(
    cfg: TrainConfig,
    info: ddp.Dist,
    stop: StopOnSignal,
    ckpt_path: Path,
    stateful: dict,
    model_config: dict,
    train_config: dict,
    record: dict,
) -> dict | None:
    """The checkpoint's state, loaded into `stateful`, under --resume; else None, and a run already in --out is
    refused rather than overwritten. `record` gains the data the checkpoint trained on before, where that differs."""
    if cfg.resume:
        state = load_checkpoint(ckpt_path, model_config=model_config, train_config=train_config)
        note = check_data(ckpt_path, state.get("data"), record["data"], cfg.resume_other_data)
        for line in (unchecked_note(ckpt_path, state), note) if info.main else ():
            if line:
                print(f"resume: {line}", file=sys.stderr)
        if note and state.get("data"):  # an override: the checkpoint keeps what the run trained on before
            record["data_before"] = [*state.get("data_before", []), {"until_step": state["step"], **state["data"]}]
        for name, obj in stateful.items():
            obj.load_state_dict(state[name])
        stop.last_checkpoint = f"{ckpt_path} (step {state['step']}) is as it was"
        return state
    if ckpt_path.exists():
        raise CheckpointError(
            f"{ckpt_path}: a run is already there; pass --resume to continue it or choose another --out"
        )
    torch.manual_seed(cfg.seed + info.rank)  # different noise and timesteps on each rank
    return None


def _compile(cfg: TrainConfig, model, model_name: str, mcfg, device: str, info: ddp.Dist, set_up: dict) -> tuple:
    """(net, sync_grads, autocast, compiled): the model as the step calls it.

    Under DDP the wrapper itself is compiled: Dynamo's DDPOptimizer splits the graph at DDP's gradient buckets, so
    each bucket's all-reduce overlaps the rest of the backward. With "reduce-overhead" each piece is its own CUDA
    graph and the NCCL all-reduces run eagerly between them. `--grad-sync` chooses another way (training.grad_sync);
    `sync_grads` then averages the gradients between backward and the optimizer; under `step-graph` the step is one
    CUDA graph of training.step_graph's, which Inductor's own (reduce-overhead) cannot sit inside, so the kernels
    compile without them. The compile cache loads first: torch.compile installs the traced program it may hold."""
    net, sync_grads = wrap(model, cfg.grad_sync, info.world_size)
    autocast = torch.autocast(device.split(":")[0], dtype=AUTOCAST[cfg.precision], enabled=cfg.precision != "fp32")
    compiled = None  # the first step compiles: its seconds, where they went, and the compile cache's part
    if cfg.compile:
        compiled = for_run(cfg, model_name, asdict(mcfg), device, info.world_size, set_up)
        mode = None if cfg.compile_mode == "default" or cfg.grad_sync == "step-graph" else cfg.compile_mode
        net = compiled.compile(net, mode, autocast)
        mark(set_up, "model compiled")
    return net, sync_grads, autocast, compiled


def _open_data(
    cfg: TrainConfig, loader, device: str, info: ddp.Dist, spec: DataSpec, cleanup: ExitStack, set_up: dict, state
) -> tuple:
    """(stream, backend, choice, t_stream). The loader is started (and on resume fast-forwarded) before the RNG
    states are restored, so the batches and noise after a resume are those of an uninterrupted run."""
    choice = None
    if loader is None:
        choice = choose_loader(cfg, spec.model, device, info)
        loader = open_loader(cfg, choice, device, info, spec.kind)
        cleanup.callback(loader.close)  # its workers or pipeline threads end with the run, also on an error
    backend = choice.backend if choice else type(loader).__name__
    mark(set_up, "loader open")
    t_stream = time.perf_counter()
    stream = EpochStream(loader, state["epoch"] if state else 0, state["position"] if state else 0)
    if state is not None:
        stream.start()
        restore_rng(state["rng"][info.rank])
        if info.main and not getattr(loader, "order_from_epoch", True):
            print(
                f"resume: {backend} chooses its own shuffle, so from here the batches differ from an uninterrupted "
                "run's (equally shuffled, not the same); use another loader where a resume must match exactly",
                file=sys.stderr,
            )
    return stream, backend, choice, t_stream
