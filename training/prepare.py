"""Everything made before the first step, in the order it is made: the model and optimizer, the resume, the compile,
the data stream, and what watches the steps (log, timer, guard). `prepare` returns it all as one `Run` of a few typed
groups, which the loop (training.loop) passes to each of its pieces."""

from __future__ import annotations

import copy
import os
import sys
import time
from contextlib import ExitStack
from dataclasses import asdict

import torch

from common.stopping import StopOnSignal

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
from .ema import Ema
from .grad_sync import choose, wrap
from .guard import Guard
from .metrics import MetricsLog
from .run_parts import Feed, Record, Run, Trainer, Watch
from .starvation import StepTimer
from .step_graph import StepGraph

AUTOCAST = {"bf16": torch.bfloat16, "fp32": None}


def prepare(cfg: TrainConfig, loader, world: ddp.Dist, device: str, stop: StopOnSignal, cleanup: ExitStack) -> Run:
    """Model, resume, compile, data: the resume needs the model, the compile the resumed weights, and so on."""
    from .diffusion import GaussianDiffusion
    from .latent import OnlineEncoder, Preview
    from .model import model_config

    started, marks = time.perf_counter(), {}
    mark(marks, "imports done")
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
    way, why = choose(
        cfg.grad_sync,
        compiled=cfg.compile,
        device=device,
        world_size=world.world_size,
        vae=bool(cfg.vae),
        text=captions is not None,
    )
    train_config = cfg.to_dict() | {"model": spec.model, "world_size": world.world_size, "grad_sync": way}
    mark(marks, "model on the device")  # CUDA's start included
    trained_on = _trained_on(cfg, world, spec, encoder)
    record = Record(
        path=cfg.out / CKPT_NAME, train_config=train_config, trained_on=trained_on, model_config=asdict(mcfg)
    )
    state = _resume(cfg, world, stop, stateful, record)
    net, sync_grads, autocast, compiled = _compile(cfg, way, stateful["model"], spec.model, mcfg, device, world, marks)
    # after the resume: the captured optimizer reads the resumed state
    graph = StepGraph(stateful["optimizer"], device) if way == "step-graph" else None
    ema = Ema(stateful["ema"], stateful["model"], cfg.ema, device, late=graph is not None)
    stream, backend, choice, stream_started = _open_data(cfg, loader, device, world, spec, cleanup, marks, state)
    if captions is not None:
        captions.take_empty(stream.loader)
    if choice is not None:  # what the run uses, where `fastest` chose it or a CPU has no page-locked copies
        train_config |= {"workers": choice.workers, "pin_memory": choice.pin_memory and device.startswith("cuda")}
    train_config["threads"] = torch.get_num_threads()

    start_step = state["step"] if state is not None else 0
    log = MetricsLog(cfg, world, device, start_step, backend, choice and choice.reason)
    log.write(f"grad sync: {way} ({why})")
    if compiled is not None and compiled.cache is not None:
        log.write(f"compile cache: {compiled.cache.note}")
    # non-finite values end the run, on every rank alike
    guard = Guard(world, stop, stateful["model"], stateful["ema"], stateful["optimizer"])
    trainer = Trainer(
        stateful=stateful,
        config=mcfg,
        diffusion=GaussianDiffusion().to(device),
        net=net,
        grad_sync=way,
        sync_grads=sync_grads,
        graph=graph,
        ema=ema,
        autocast=autocast,
        encoder=encoder,
        compiled=compiled,
    )
    feed = Feed(
        spec=spec,
        stream=stream,
        backend=backend,
        choice=choice,
        preview=Preview(spec, encoder, device),
        started=stream_started,
        captions=captions,
    )
    watch = Watch(log=log, timer=StepTimer(device), guard=guard, stop=stop)
    return Run(
        cfg=cfg,
        world=world,
        device=device,
        trainer=trainer,
        feed=feed,
        watch=watch,
        record=record,
        start_step=start_step,
        marks=marks,
        started=started,
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
    if cfg.compile:
        captions.fix_length()
    return captions


def mark(marks: dict[str, float], what: str) -> None:
    marks[what] = round(since_launch(), 3)


def _trained_on(cfg: TrainConfig, world: ddp.Dist, spec: DataSpec, encoder) -> dict:
    """What the run trains on, recorded in every checkpoint: a resume on other data or another autoencoder is
    refused. First the temporary files of checkpoint writes killed midway go."""
    for line in remove_leftovers(cfg.out) if world.main else ():
        print(line, file=sys.stderr)
    return {"data": data_identity(cfg.data, spec.manifest, encoder.vae.identity if encoder else None)}


def _build(cfg: TrainConfig, mcfg, device: str) -> dict:
    """The model, its EMA copy, the optimizer and the learning-rate schedule: what a checkpoint holds, by the names
    it holds them under."""
    cuda = device.startswith("cuda")
    memory_format = torch.channels_last if cfg.channels_last and cuda else torch.contiguous_format
    model = mcfg.build().to(device, memory_format=memory_format)
    ema_model = copy.deepcopy(model).requires_grad_(False)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, fused=cuda)  # fused: one kernel for all params
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / max(cfg.warmup, 1)))
    return {"model": model, "ema": ema_model, "optimizer": optimizer, "schedule": schedule}


def _resume(cfg: TrainConfig, world: ddp.Dist, stop: StopOnSignal, stateful: dict, record: Record) -> dict | None:
    """The checkpoint's state, loaded into `stateful`, under --resume; else None, and a run already in --out is
    refused rather than overwritten. `record` gains the data the checkpoint trained on before, where that differs."""
    ckpt_path, data = record.path, record.trained_on
    if cfg.resume:
        state = load_checkpoint(ckpt_path, model_config=record.model_config, train_config=record.train_config)
        note = check_data(ckpt_path, state.get("data"), data["data"], cfg.resume_other_data)
        for line in (unchecked_note(ckpt_path, state), *state["replaced"], note) if world.main else ():
            if line:
                print(f"resume: {line}", file=sys.stderr)
        if note and state.get("data"):  # an override: the checkpoint keeps what the run trained on before
            data["data_before"] = [*state.get("data_before", []), {"until_step": state["step"], **state["data"]}]
        for name, obj in stateful.items():
            obj.load_state_dict(state[name])
        stop.last_checkpoint = f"{ckpt_path} (step {state['step']}) is as it was"
        return state
    if ckpt_path.exists():
        raise CheckpointError(
            f"{ckpt_path}: a run is already there; pass --resume to continue it or choose another --out"
        )
    torch.manual_seed(cfg.seed + world.rank)  # different noise and timesteps on each rank
    return None


def _compile(
    cfg: TrainConfig, way: str, model, model_name: str, mcfg, device: str, world: ddp.Dist, marks: dict
) -> tuple:
    """(net, sync_grads, autocast, compiled): the model as the step calls it, wrapped for the way `way`
    (training.grad_sync) and compiled: with torch.compile's CUDA graphs, except under the step graph, whose one graph
    they cannot sit inside. The compile cache loads first: torch.compile installs the traced program it may hold."""
    net, sync_grads = wrap(model, way, world.world_size)
    autocast = torch.autocast(device.split(":")[0], dtype=AUTOCAST[cfg.precision], enabled=cfg.precision != "fp32")
    compiled = None  # the first step compiles: its seconds, where they went, and the compile cache's part
    if cfg.compile:
        compiled = for_run(cfg, model_name, asdict(mcfg), device, world.world_size, marks, grad_sync=way)
        mode = None if way == "step-graph" else "reduce-overhead"
        net = compiled.compile(net, mode, autocast)
        mark(marks, "model compiled")
    return net, sync_grads, autocast, compiled


def _open_data(
    cfg: TrainConfig, loader, device: str, world: ddp.Dist, spec: DataSpec, cleanup: ExitStack, marks: dict, state
) -> tuple:
    """(stream, backend, choice, t_stream). The loader is started (and on resume fast-forwarded) before the RNG
    states are restored, so the batches and noise after a resume are those of an uninterrupted run."""
    choice = None
    if loader is None:
        choice = choose_loader(cfg, spec.model, device, world)
        _set_threads(choice, world, cleanup)
        loader = open_loader(cfg, choice, device, world, spec.kind)
        cleanup.callback(loader.close)  # its workers or pipeline threads end with the run, also on an error
    backend = choice.backend if choice else type(loader).__name__
    mark(marks, "loader open")
    t_stream = time.perf_counter()
    stream = EpochStream(loader, state["epoch"] if state else 0, state["position"] if state else 0)
    if state is not None:
        stream.start()
        restore_rng(state["rng"][world.rank])
        if world.main and not getattr(loader, "order_from_epoch", True):
            print(
                f"resume: {backend} chooses its own shuffle, so from here the batches differ from an uninterrupted "
                "run's (equally shuffled, not the same); use another loader where a resume must match exactly",
                file=sys.stderr,
            )
    return stream, backend, choice, t_stream


def _set_threads(choice, world: ddp.Dist, cleanup: ExitStack) -> None:
    """This rank's torch threads for the run (loaders.workers.training_threads), said once; restored after it."""
    from loaders.workers import set_training_threads

    cleanup.callback(torch.set_num_threads, torch.get_num_threads())
    processes = choice.backend in ("torch", "hdf5", "stream")  # DataLoader workers; ffcv's and dali's are threads
    line = set_training_threads(choice.workers, int(os.environ.get("LOCAL_WORLD_SIZE", "1")), processes)
    if world.main:
        print(line, file=sys.stderr)
