"""The DDPM training loop, top to bottom: set-up, model, optimizer, resume, data, then the step loop.

Timing is honest by construction: each step is `fetch (host wait) -> step_begin -> enqueue forward, backward,
clip, optimizer and EMA without a host sync -> step_end`, and the loss is read one step late from a pinned copy (never
with Tensor.item() on the device, which waits for everything queued), so the host fetches the next batch while the
device works and a slow loader shows up as idle time between steps. A loader that waits for the device itself (a
copy from pageable memory) makes the host late for every step instead; the timer's host_behind reports that.
"""

from __future__ import annotations

import math
import time
import traceback
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field

import torch

from common.stopping import StopOnSignal
from loaders.workers import worker_errors

from . import cadence, ddp
from .config import TrainConfig
from .data import check_fits
from .prepare import mark, prepare
from .run_parts import Run


@dataclass
class RunSummary:
    steps: int  # optimizer steps run by this call (a resumed run counts from its checkpoint)
    start_step: int  # the checkpoint step it resumed from, 0 for a fresh run
    samples_per_s: float  # all ranks, measured steps only (after timing_warmup), waiting for data included
    starvation: dict  # StarvationSummary.to_dict(); under DDP its `starvation` the group's (metrics.group_headline)
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
    world, device = ddp.setup(cfg.device)
    error = None
    try:
        with StopOnSignal() as stop, ExitStack() as cleanup:
            return _train(cfg, loader, world, device, stop, cleanup)
    except BaseException as e:
        error = e  # under torchrun every rank then stops promptly (ddp.teardown)
        traceback.clear_frames(e.__traceback__)  # the ended frames' locals hold DDP's wrapper: teardown frees it
        raise
    finally:
        ddp.teardown(world, error)


@dataclass
class Progress:
    """What changes from step to step."""

    step: int  # optimizer steps done, a resumed run's included
    losses: list[float] = field(default_factory=list)  # rank 0's local loss per step from start_step + 1
    # losses not yet read, each a host copy and the CUDA event after which it holds the value: Tensor.item() on a
    # device tensor would wait for everything queued, the next step included, and leave the GPU idle while the host
    # fetched
    pending: list[tuple[torch.Tensor, torch.cuda.Event | None]] = field(default_factory=list)
    first_batch_s: float | None = None  # set at the first batch, which also counts the FLOPs and fixes sample_shape
    flops: float | None = None  # per step, on this rank
    sample_shape: tuple[int, ...] = ()
    stopping: bool = False  # a stop signal or a non-finite value, known on every rank alike


def _train(
    cfg: TrainConfig, loader, world: ddp.Dist, device: str, stop: StopOnSignal, cleanup: ExitStack
) -> RunSummary:
    from .profiling import profile_steps

    run = prepare(cfg, loader, world, device, stop, cleanup)
    compiled, watch = run.trainer.compiled, run.watch
    progress = Progress(step=run.start_step)
    # profiled steps end where the timed steps begin, so profiler overhead stays out of the timing figures
    profile_at = run.start_step + max(
        1, min(cfg.timing_warmup - cfg.profile_steps, cfg.steps - run.start_step - cfg.profile_steps)
    )
    with worker_errors(run.feed.backend, cfg.data):  # a dead worker can surface anywhere in a step (SIGCHLD)
        while progress.step < cfg.steps and not progress.stopping:
            if cfg.profile and progress.step == profile_at:
                out = cfg.out / "profile" / (f"rank{world.rank}" if world.enabled else "")
                profile_steps(lambda: _one_step(run, progress), min(cfg.profile_steps, cfg.steps - progress.step), out)
            else:
                _one_step(run, progress)
    _read_losses(run, progress)
    watch.guard.poll(wait=True)  # the last step's loss, read after it
    if compiled is not None and world.main:
        compiled.save()  # what compiled after the first step too (a recompile)
    watch.log.close()
    return _summary(run, progress)


def _one_step(run: Run, progress: Progress) -> None:
    """Fetch, step, then what comes after a step. The timed step includes the wait for its batch: the host fetches
    while the device still runs the step before, so a loader that keeps up costs the timer nothing."""
    cfg, compiled, log, timer = run.cfg, run.trainer.compiled, run.watch.log, run.watch.timer
    batch = timer.fetch(run.feed.stream)
    if run.feed.stream.position == 1:
        timer.mark_epoch_start()
    if progress.first_batch_s is None:
        _first_batch(run, progress, batch)  # outside any timed step
    if compiled is not None and progress.step == run.start_step + cfg.timing_warmup:
        compiled.timed_steps_begin()
    timer.step_begin()
    if compiled is not None and not compiled.done:  # Dynamo, AOTAutograd and Inductor run inside this step
        with log.compiling(progress.step + 1), compiled.first_step():
            _enqueue_step(run, batch, progress.step, progress.pending)
        log.write(f"step {progress.step + 1}: {compiled.finish(run.world.main)}")
    else:
        _enqueue_step(run, batch, progress.step, progress.pending)
    timer.step_end()
    progress.step += 1
    _after_step(run, progress)


def _first_batch(run: Run, progress: Progress, batch) -> None:
    """The first batch's latency; the data checked against the model; the FLOPs counted once; the previews' shape,
    which is the data's (the latents' under --vae)."""
    trainer, spec = run.trainer, run.feed.spec
    progress.first_batch_s = time.perf_counter() - run.feed.started
    mark(run.marks, "first batch in hand")
    if trainer.encoder is None:
        check_fits(trainer.config, tuple(batch.x.shape), run.cfg.data, spec.model, spec.kind)
    x0 = batch.x if trainer.encoder is None else trainer.encoder(batch.x)
    captions = run.feed.captions
    text = captions.embed(batch.text) if captions is not None else None
    progress.flops = _count_flops(trainer.config, x0, batch.y if trainer.conditional else None, text)
    progress.sample_shape = (run.cfg.sample_count, *x0.shape[1:])
    mark(run.marks, "FLOPs counted")


def _enqueue_step(run: Run, batch, step: int, pending: list) -> None:
    """Step `step` (0-based) enqueued: as one CUDA graph under the step graph, else launched op by op; its loss joins
    `pending`, to be read a step later. The schedule then sets the next step's learning rate."""
    trainer, x, text = run.trainer, batch.x, batch.text
    y = batch.y if trainer.conditional else None
    trainer.ema.next_step(step)
    if trainer.graph is not None:  # its copy of the loss is staged after the replay
        pending.append(_stage(trainer.graph(lambda x, y: train_step(run, x, y), x, y)))
    else:
        if run.cfg.compile:  # torch.compile's CUDA graphs: a new step may overwrite the previous one's outputs
            torch.compiler.cudagraph_mark_step_begin()
        train_step(run, x, y, stage=lambda loss: pending.append(_stage(loss)), text=text)
    trainer.stateful["schedule"].step()


def train_step(run: Run, x: torch.Tensor, y: torch.Tensor | None, stage=None, text=None) -> torch.Tensor:
    """One optimizer step, enqueued without a host sync: forward, backward, gradient sync, clip, optimizer and EMA.
    The step graph captures it unchanged. `stage(loss)` before the backward, so that reading the loss waits for the
    forward alone; the late EMA (training.ema) runs beside the forward (one process) or the all-reduce (several)."""
    trainer, cfg = run.trainer, run.cfg
    optimizer, ema, sync_grads = trainer.stateful["optimizer"], trainer.ema, trainer.sync_grads
    if sync_grads is None:
        ema.fork()
    with trainer.autocast:
        x = trainer.encoder(x) if trainer.encoder is not None else x  # inside the step: its GPU time is the step's
        captions = run.feed.captions  # text models: Batch.text, cached embeddings or (--text-encoder) encoded here
        text = captions(text) if captions is not None else None
        loss = trainer.diffusion.loss(trainer.net, x, y=y, text=text).float()
    if stage is not None:
        stage(loss.detach())
    loss.backward()
    if sync_grads is not None:
        ema.fork()  # the all-reduce leaves the SMs idle
        sync_grads()
    if cfg.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(trainer.params, cfg.grad_clip, foreach=True)
    ema.join()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)  # the backward hands its gradients over: no zeroing, no adding into them
    ema.after_optimizer()
    return loss.detach()


def _stage(loss: torch.Tensor) -> tuple[torch.Tensor, torch.cuda.Event | None]:
    """The loss's host copy and the event after which it holds the value (on CPU, the loss itself)."""
    if not loss.is_cuda:
        return loss, None
    host = torch.empty((), dtype=loss.dtype, pin_memory=True)  # pinned, so the copy does not block the host
    host.copy_(loss, non_blocking=True)
    # blocking: the host sleeps while it waits for the value instead of spinning on a core the loader's threads need
    done = torch.cuda.Event(blocking=True)
    done.record()
    return host, done


def _count_flops(mcfg, x: torch.Tensor, y: torch.Tensor | None, text=None) -> float:
    """On the meta device, from shapes alone: a real pass would run eagerly in fp32 before the first step, autotuning
    cuDNN for convolutions the bf16 step never runs, and touch the RNG and the gradients. Attention counts as its
    matmuls (a fused kernel's backward recompute is not the model's work)."""
    from .diffusion import GaussianDiffusion
    from .profiling import count_train_flops

    with torch.device("meta"):
        shadow = mcfg.build()
    meta = [None if t is None else t.to("meta") for t in (x, y, text)]
    return count_train_flops(shadow, GaussianDiffusion().to("meta"), *meta)


def _read_losses(run: Run, progress: Progress, keep: int = 0) -> None:
    """Read the pending losses but the newest `keep`; a non-finite one goes to the guard, which stops the run."""
    while len(progress.pending) > keep:
        host, done = progress.pending.pop(0)
        if done is not None:
            done.synchronize()  # waits for that step's forward only, not for the work queued after it
        progress.losses.append(host.item())
        if not math.isfinite(progress.losses[-1]):
            run.watch.guard.loss(run.start_step + len(progress.losses), progress.losses[-1])


def _after_step(run: Run, progress: Progress) -> None:
    """The step's log, the stop decision, then the preview grid and the checkpoint when due."""
    cfg, step, guard, log, timer = run.cfg, progress.step, run.watch.guard, run.watch.log, run.watch.timer
    logged = step % cfg.log_every == 0 or step == cfg.steps
    # the previous step's loss, the device still busy with this one; on a log step this one's, as the log line's
    _read_losses(run, progress, keep=0 if logged else 1)
    log.step(step, progress.losses[-1] if progress.losses else float("nan"), timer)
    if logged:
        log.window(step, progress.losses[-1], timer, progress.flops)
        guard.check_weights(step)  # the window's figures have just waited for the device
    # every rank alike: a stop signal on any rank, or NonFiniteError (decided one step late under DDP, no sync)
    progress.stopping = guard.poll()
    if cadence.sample_due(cfg, step, run.world):
        cadence.sample(run, step, progress.sample_shape)
    if cadence.checkpoint_due(cfg, step, progress.stopping):
        _read_losses(run, progress)  # every loss so far checked before the checkpoint is written
        progress.stopping = cadence.write_checkpoint(run, step) or progress.stopping


def _summary(run: Run, progress: Progress) -> RunSummary:
    trainer, watch, feed = run.trainer, run.watch, run.feed
    checksum = sum(v.double().sum().item() for v in trainer.stateful["model"].state_dict().values())
    figures = watch.log.final(watch.timer, progress.flops, checksum)
    losses, choice = progress.losses, feed.choice
    return RunSummary(
        steps=progress.step - run.start_step,
        start_step=run.start_step,
        first_batch_s=progress.first_batch_s or 0.0,
        final_loss=losses[-1] if losses else float("nan"),
        losses=losses,
        wall_s=time.perf_counter() - run.started,
        backend=feed.backend,
        param_checksum=checksum,
        stopped_by=watch.guard.stopped_by or watch.stop.received,
        compile=trainer.compiled.to_dict() if trainer.compiled is not None else {},
        config=run.record.train_config,
        loader=asdict(choice) if choice else {"backend": feed.backend, "reason": "a loader given to the loop"},
        **figures,
    )
