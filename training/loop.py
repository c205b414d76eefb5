"""The DDPM training loop, top to bottom: set-up, model, optimizer, resume, data, then the step loop.

Timing is honest by construction: each step is `fetch (host wait) -> step_begin -> enqueue forward, backward,
clip, optimizer and EMA without a host sync -> step_end`, and the loss is read one step late from a pinned copy (never
with Tensor.item() on the device, which waits for everything queued), so the host fetches the next batch while the
device works and a slow loader shows up as idle time between steps. A loader that waits for the device itself (a
copy from pageable memory) makes the host late for every step instead; the timer's host_behind reports that.
"""

from __future__ import annotations

import copy
import math
import sys
import time
import traceback
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field

import torch

from loaders.workers import worker_errors

from . import ddp
from .checkpoint import (
    CKPT_NAME,
    CheckpointError,
    capture_rng,
    check_data,
    data_identity,
    load_checkpoint,
    remove_leftovers,
    restore_rng,
    save_checkpoint,
)
from .compile_cache import for_run, since_launch
from .config import TrainConfig
from .grad_sync import wrap
from .guard import Guard
from .metrics import MetricsLog
from .starvation import StepTimer
from .stopping import StopOnSignal
from .stream import EpochStream, check_fits, choose_loader, data_spec, open_loader

AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}


@dataclass
class RunSummary:
    steps: int  # optimizer steps run by this call (a resumed run counts from its checkpoint)
    start_step: int  # the checkpoint step it resumed from, 0 for a fresh run
    samples_per_s: float  # all ranks, measured steps only (after timing_warmup), waiting for data included
    starvation: dict  # StarvationSummary.to_dict() of this rank, + mean over ranks and worst rank (metrics.merged)
    first_batch_s: float  # data-stream start to first batch in hand: loader and worker start-up
    final_loss: float
    losses: list[float]  # per step from start_step + 1, rank 0's local loss
    wall_s: float  # the whole call, set-up included
    peak_memory_gib: float  # max allocated on the device (0 on CPU)
    tflops: float  # per device, over the measured steps
    mfu: float  # tflops / peak_tflops (0 when this device's peak is unknown)
    peak_tflops: float
    backend: str
    param_checksum: float  # sum of every state_dict entry: equal on all ranks when DDP kept them in step
    stopped_by: str | None  # "SIGTERM"/"SIGINT" when a signal ended the run (after checkpointing)
    config: dict = field(default_factory=dict)
    loader: dict = field(default_factory=dict)  # backend, workers, pin_memory and why (`--loader fastest` says)
    ranks: list[dict] = field(default_factory=list)  # every rank's own figures (metrics.RANK_FIGURES), by rank
    compile: dict = field(default_factory=dict)  # compiled runs: first step's seconds, phases, caches (compile_cache)

    def to_dict(self) -> dict:
        return asdict(self)


def main(cfg: TrainConfig, loader=None) -> RunSummary:
    """Train per `cfg`. `loader` (any loaders.base.Loader) replaces the one `cfg` describes, e.g. for bench."""
    info, device = ddp.setup(cfg.device)
    error = None
    try:
        with StopOnSignal() as stop, ExitStack() as cleanup:
            return _train(cfg, loader, info, device, stop, cleanup)
    except BaseException as e:
        error = e  # under torchrun every rank then stops promptly (ddp.teardown)
        traceback.clear_frames(e.__traceback__)  # the ended frames' locals hold DDP's wrapper: teardown frees it
        raise
    finally:
        ddp.teardown(info, error)


@torch.no_grad()
def ema_update(ema_params: list[torch.Tensor], params: list[torch.Tensor], decay: float) -> None:
    """ema = decay * ema + (1 - decay) * params. Outside autograd: recorded, each update chained a graph node to the
    previous one through the EMA weights, and host memory grew by ~170 KB a step (6.5 GB in a 20-minute H100 run)."""
    torch._foreach_lerp_(ema_params, params, 1.0 - decay)


def _train(cfg: TrainConfig, loader, info: ddp.Dist, device: str, stop: StopOnSignal, cleanup: ExitStack) -> RunSummary:
    from .diffusion import GaussianDiffusion
    from .latent import OnlineEncoder, Preview
    from .model import model_config
    from .profiling import count_train_flops, profile_steps

    t_start, cuda, run_dir = time.perf_counter(), device.startswith("cuda"), cfg.out
    set_up: dict[str, float] = {}  # points of the start, seconds since launch: a compiled run's record keeps them

    def mark(what: str) -> None:
        set_up[what] = round(since_launch(), 3)

    mark("imports done")
    spec = data_spec(cfg, injected=loader is not None)
    kind, model_name = spec.kind, spec.model
    # --vae: the autoencoder encodes every batch inside the step, and the model trains on its latents
    encoder = OnlineEncoder(cfg.vae, spec, cfg.data, device, cfg.compile) if cfg.vae else None
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True  # fp32 mode on tensor cores
    torch.backends.cudnn.benchmark = True  # fixed shapes: autotune the convolutions once

    # model, EMA copy, diffusion, optimizer: the same init on every rank (DDP broadcasts it as well)
    torch.manual_seed(cfg.seed)
    mcfg = model_config(model_name, encoder.shape if encoder else spec.shape, spec.classes)
    conditional = getattr(mcfg, "num_classes", 0) > 0  # DiT on labelled data
    memory_format = torch.channels_last if cfg.channels_last and cuda else torch.contiguous_format
    model = mcfg.build().to(device, memory_format=memory_format)
    ema_model = copy.deepcopy(model).requires_grad_(False)
    diffusion = GaussianDiffusion().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, fused=cuda)  # fused: one kernel for all params
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / max(cfg.warmup, 1)))
    scaler = torch.amp.GradScaler(device.split(":")[0], enabled=cfg.precision == "fp16")
    train_dict = cfg.to_dict() | {"model": model_name, "world_size": info.world_size}
    stateful = {"model": model, "ema": ema_model, "optimizer": optimizer, "scaler": scaler, "schedule": schedule}
    mark("model on the device")  # CUDA's start included

    # resume, or refuse to overwrite a run that has a checkpoint; a checkpoint write killed midway left a temporary file
    ckpt_path, start_step, epoch, position, state = run_dir / CKPT_NAME, 0, 0, 0, None
    for line in remove_leftovers(run_dir) if info.main else ():
        print(line, file=sys.stderr)
    # what it trains on, recorded in every checkpoint: a resume on other data or another autoencoder is refused
    record = {"data": data_identity(cfg.data, spec.manifest, encoder.vae.identity if encoder else None)}
    if cfg.resume:
        state = load_checkpoint(ckpt_path, model_config=asdict(mcfg), train_config=train_dict)
        note = check_data(ckpt_path, state.get("data"), record["data"], cfg.resume_other_data)
        if note and info.main:
            print(f"resume: {note}", file=sys.stderr)
        if note and state.get("data"):  # an override: the checkpoint keeps what the run trained on before
            record["data_before"] = [*state.get("data_before", []), {"until_step": state["step"], **state["data"]}]
        for name, obj in stateful.items():
            obj.load_state_dict(state[name])
        start_step, epoch, position = state["step"], state["epoch"], state["position"]
        stop.last_checkpoint = f"{ckpt_path} (step {start_step}) is as it was"
    elif ckpt_path.exists():
        raise CheckpointError(
            f"{ckpt_path}: a run is already there; pass --resume to continue it or choose another --out"
        )
    else:
        torch.manual_seed(cfg.seed + info.rank)  # different noise and timesteps on each rank

    # Under DDP the wrapper itself is compiled: Dynamo's DDPOptimizer splits the graph at DDP's gradient buckets, so
    # each bucket's all-reduce overlaps the rest of the backward. With "reduce-overhead" each piece is its own CUDA
    # graph and the NCCL all-reduces run eagerly between them. `--grad-sync` chooses another way (training.grad_sync);
    # `sync_grads` then averages the gradients between backward and the optimizer. The compile cache loads first:
    # torch.compile installs the traced program it may hold
    net, sync_grads = wrap(model, cfg.grad_sync, info.world_size)
    autocast = torch.autocast(device.split(":")[0], dtype=AUTOCAST[cfg.precision], enabled=cfg.precision != "fp32")
    compiled = None  # the first step compiles: its seconds, where they went, and the compile cache's part
    if cfg.compile:
        compiled = for_run(cfg, model_name, asdict(mcfg), device, info.world_size, set_up)
        net = compiled.compile(net, None if cfg.compile_mode == "default" else cfg.compile_mode, autocast)
        mark("model compiled")

    # data: the loader is started (and on resume fast-forwarded) before the RNG states are restored
    choice = None
    if loader is None:
        choice = choose_loader(cfg, model_name, device, info)
        loader = open_loader(cfg, choice, device, info, kind)
        cleanup.callback(loader.close)  # its workers or pipeline threads end with the run, also on an error
    backend = choice.backend if choice else type(loader).__name__
    mark("loader open")
    t_stream = time.perf_counter()
    stream = EpochStream(loader, epoch, position)
    if state is not None:
        stream.start()
        restore_rng(state["rng"][info.rank])
        if info.main and not getattr(loader, "order_from_epoch", True):
            print(f"resume: {backend} chooses its own shuffle, so from here the batches differ from an uninterrupted "
                  "run's (equally shuffled, not the same); use another loader where a resume must match exactly",
                  file=sys.stderr)  # fmt: skip

    log = MetricsLog(cfg, info, device, start_step, backend, choice and choice.reason)
    if compiled is not None and compiled.cache is not None:
        log.write(f"compile cache: {compiled.cache.note}")
    preview = Preview(spec, encoder, device)
    timer = StepTimer(device)
    params, ema_params = list(model.parameters()), list(ema_model.parameters())
    guard = Guard(info, stop, model, ema_model, optimizer)  # non-finite values end the run, on every rank alike
    losses: list[float] = []
    # losses not yet read, each a host copy and the CUDA event after which it holds the value: Tensor.item() on a
    # device tensor synchronizes the whole stream, so reading step i-1's loss that way after enqueuing step i waited
    # for step i too; the host then fetched every batch while the GPU sat idle (bench: host_behind 1.0, 3-5% idle)
    pending: list[tuple[torch.Tensor, torch.cuda.Event | None]] = []
    step, first_batch_s, flops, stopping, sample_shape = start_step, None, None, False, []

    def train_step(x: torch.Tensor, y: torch.Tensor) -> None:
        if cfg.compile and cfg.compile_mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()
        with autocast:
            x = encoder(x) if encoder is not None else x  # inside the step: its GPU time is the step's
            loss = diffusion.loss(net, x, y=y if conditional else None).float()
        pending.append(stage(loss.detach()))  # before backward: the event lands early in this step's stream
        scaler.scale(loss).backward()
        if sync_grads is not None:
            sync_grads()
        if cfg.grad_clip > 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip, foreach=True)
        scaler.step(optimizer)  # fused Adam keeps the fp16 inf check on the device: no sync
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        schedule.step()
        # EMA warm-up, decay (1+t)/(10+t) capped at cfg.ema, so short runs preview trained weights, not the init
        ema_update(ema_params, params, min(cfg.ema, (1 + step) / (10 + step)))

    def stage(loss: torch.Tensor) -> tuple[torch.Tensor, torch.cuda.Event | None]:
        if not cuda:
            return loss, None
        host = torch.empty((), dtype=loss.dtype, pin_memory=True)  # pinned, so the copy does not block the host
        host.copy_(loss, non_blocking=True)
        done = torch.cuda.Event()
        done.record()
        return host, done

    def count_flops(x: torch.Tensor, y: torch.Tensor | None) -> float:
        # on the meta device, from shapes alone: a real pass would run eagerly in fp32 before the first step,
        # autotuning cuDNN for convolutions the bf16 step never runs, and touch the RNG and the gradients. Attention
        # counts as its matmuls (a fused kernel's backward recompute is not the model's work)
        with torch.device("meta"):
            shadow = mcfg.build()
        meta = [None if t is None else t.to("meta") for t in (x, y)]
        return count_train_flops(shadow, GaussianDiffusion().to("meta"), *meta)

    def drain(keep: int = 0) -> None:
        while len(pending) > keep:
            host, done = pending.pop(0)
            if done is not None:
                done.synchronize()  # waits for that step's forward only, not for the work queued after it
            losses.append(host.item())
            if not math.isfinite(losses[-1]):
                guard.loss(start_step + len(losses), losses[-1])

    def one_step() -> None:
        nonlocal step, first_batch_s, flops, stopping
        batch = timer.fetch(stream)
        if first_batch_s is None:  # count FLOPs once, outside any timed step; previews take the data's shape
            first_batch_s = time.perf_counter() - t_stream
            mark("first batch in hand")
            if encoder is None:
                check_fits(mcfg, tuple(batch.x.shape), cfg.data, model_name, kind)
            x0 = batch.x if encoder is None else encoder(batch.x)
            flops = count_flops(x0, batch.y if conditional else None)
            sample_shape[:] = [cfg.sample_count, *x0.shape[1:]]
            mark("FLOPs counted")
        if compiled is not None and step == start_step + cfg.timing_warmup:
            compiled.timed_steps_begin()
        timer.step_begin()
        if compiled is not None and not compiled.done:  # Dynamo, AOTAutograd and Inductor run inside this step
            with log.compiling(step + 1), compiled.first_step():
                train_step(batch.x, batch.y)
            log.write(f"step {step + 1}: {compiled.finish(info.main)}")
        else:
            train_step(batch.x, batch.y)
        timer.step_end()
        step += 1
        drain(keep=1)  # the previous step's loss; the device is still busy with this one
        log.step(step, losses[-1] if losses else float("nan"), timer)
        at_log = step % cfg.log_every == 0 or step == cfg.steps
        if at_log:
            drain()
            log.window(step, losses[-1], timer, flops)
            guard.check_weights(step)  # the window's figures have just waited for the device
        # every rank alike: a stop signal on any rank, or NonFiniteError (decided one step late under DDP, no sync)
        stopping = guard.poll()
        if cfg.sample_every and (step % cfg.sample_every == 0 or step == cfg.steps) and info.main:
            with timer.paused():  # the GPU samples here: neither training nor starving
                labels = torch.arange(cfg.sample_count, device=device) % spec.classes if conditional else None
                log.samples(ema_model, diffusion, tuple(sample_shape), kind, step, labels, preview)
        if cfg.ckpt_every and (step % cfg.ckpt_every == 0 or step == cfg.steps or stopping):
            drain()
            with timer.paused():
                guard.check_weights(step, optimizer=True)
                stopping = guard.poll(wait=True) or stopping  # no rank writes on an old answer
                _save(ckpt_path, stateful, step, stream, asdict(mcfg), train_dict, info, record)
                stop.last_checkpoint = f"{ckpt_path} (step {step}) is the last good one"
            log.write(f"step {step}: checkpoint written to {ckpt_path}")

    # the loop
    # profiled steps end where the timed steps begin, so profiler overhead stays out of the timing figures
    profile_at = start_step + max(
        1, min(cfg.timing_warmup - cfg.profile_steps, cfg.steps - start_step - cfg.profile_steps)
    )
    with worker_errors(backend, cfg.data):  # a dead worker can surface anywhere in a step (PyTorch's SIGCHLD handler)
        while step < cfg.steps and not stopping:
            if cfg.profile and step == profile_at:
                out = run_dir / "profile" / (f"rank{info.rank}" if info.enabled else "")
                profile_steps(one_step, min(cfg.profile_steps, cfg.steps - step), out)
            else:
                one_step()
    drain()
    guard.poll(wait=True)  # the last step's loss, read after it
    if compiled is not None and info.main:
        compiled.save()  # what compiled after the first step too (a recompile)
    log.close()
    checksum = sum(v.double().sum().item() for v in model.state_dict().values())
    figures = log.final(timer, flops, checksum)
    return RunSummary(
        steps=step - start_step,
        start_step=start_step,
        first_batch_s=first_batch_s or 0.0,
        final_loss=losses[-1] if losses else float("nan"),
        losses=losses,
        wall_s=time.perf_counter() - t_start,
        backend=backend,
        param_checksum=checksum,
        stopped_by=guard.stopped_by or stop.received,
        compile=compiled.to_dict() if compiled is not None else {},
        config=train_dict,
        loader=asdict(choice) if choice else {"backend": backend, "reason": "a loader given to the loop"},
        **figures,
    )


def _save(
    path,
    stateful: dict,
    step: int,
    stream: EpochStream,
    model_config: dict,
    train_config: dict,
    info: ddp.Dist,
    record: dict,
) -> None:
    """Every rank's RNG state goes into rank 0's checkpoint: each rank draws its own noise. `record`: what the run
    trains on (checkpoint.data_identity)."""
    rng = [capture_rng()]
    if info.enabled:
        rng = [None] * info.world_size
        torch.distributed.all_gather_object(rng, capture_rng())
    if not info.main:
        return
    state = {name: obj.state_dict() for name, obj in stateful.items()}
    state |= {"step": step, "epoch": stream.epoch, "position": stream.position, "rng": rng} | record
    save_checkpoint(path, state | {"model_config": model_config, "train_config": train_config})
