"""Between two steps, on a cadence: an EMA preview grid every `sample_every` steps, a checkpoint every `ckpt_every`
steps. Both also run at the last step, and a checkpoint also when the run is stopping, so a stopped run resumes from
where it stopped. The device works for them, not for training, so the step timer is paused meanwhile: that time is
neither training nor starvation."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from . import ddp
from .checkpoint import capture_rng, save_checkpoint
from .config import TrainConfig
from .data import EpochStream

if TYPE_CHECKING:
    from .run_parts import Record, Run


def sample_due(cfg: TrainConfig, step: int, world: ddp.Dist) -> bool:
    """Rank 0 alone samples: the grid is the same on every rank."""
    return bool(cfg.sample_every) and (step % cfg.sample_every == 0 or step == cfg.steps) and world.main


def sample(run: Run, step: int, shape: tuple[int, ...]) -> None:
    """A grid of `shape` (the data's, or the latents' under --vae) from the EMA weights, one class per image in turn
    for a class-conditional model."""
    cfg, trainer, feed = run.cfg, run.trainer, run.feed
    with run.watch.timer.paused():
        trainer.ema.settle()
        labels = torch.arange(cfg.sample_count, device=run.device) % feed.spec.classes if trainer.conditional else None
        ema_model = trainer.stateful["ema"]
        if feed.captions is not None:  # a text model: guided by the prompts, else the empty caption's samples
            from .captions import prompted

            ema_model, shape = prompted(ema_model, feed.captions, cfg, shape)
        run.watch.log.samples(ema_model, trainer.diffusion, shape, feed.spec.kind, step, labels, feed.preview)


def checkpoint_due(cfg: TrainConfig, step: int, stopping: bool) -> bool:
    return bool(cfg.ckpt_every) and (step % cfg.ckpt_every == 0 or step == cfg.steps or stopping)


def write_checkpoint(run: Run, step: int) -> bool:
    """Check the weights and optimizer moments, then write; every rank takes part (the RNG states are gathered).
    Returns whether the run stops: decided again here, with every rank's answer, so no rank writes on an old one.
    The caller has read every loss so far, so a non-finite one is known before anything is written."""
    watch, record = run.watch, run.record
    with watch.timer.paused():
        run.trainer.ema.settle()
        watch.guard.check_weights(step, optimizer=True)
        stopping = watch.guard.poll(wait=True)
        save(record, run.trainer.stateful, step, run.feed.stream, run.world)
        watch.stop.last_checkpoint = f"{record.path} (step {step}) is the last good one"
    watch.log.write(f"step {step}: checkpoint written to {record.path}")
    return stopping


def save(record: Record, stateful: dict, step: int, stream: EpochStream, world: ddp.Dist) -> None:
    """Every rank's RNG state goes into rank 0's checkpoint: each rank draws its own noise."""
    rng = [capture_rng()]
    if world.enabled:
        rng = [None] * world.world_size
        torch.distributed.all_gather_object(rng, capture_rng())
    if not world.main:
        return
    state = {name: obj.state_dict() for name, obj in stateful.items()}
    state |= {"step": step, "epoch": stream.epoch, "position": stream.position, "rng": rng} | record.trained_on
    save_checkpoint(record.path, state | {"model_config": record.model_config, "train_config": record.train_config})
