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
    from .prepare import Run


def sample_due(cfg: TrainConfig, step: int, info: ddp.Dist) -> bool:
    """Rank 0 alone samples: the grid is the same on every rank."""
    return bool(cfg.sample_every) and (step % cfg.sample_every == 0 or step == cfg.steps) and info.main


def sample(run: Run, step: int, shape: tuple[int, ...]) -> None:
    """A grid of `shape` (the data's, or the latents' under --vae) from the EMA weights, one class per image in turn
    for a class-conditional model."""
    cfg, classes = run.cfg, run.spec.classes
    with run.timer.paused():
        settle_ema(run)
        labels = torch.arange(cfg.sample_count, device=run.device) % classes if run.conditional else None
        model = run.stateful["ema"]
        if run.captions is not None:  # a text model: guided by the prompts, else the empty caption's samples
            from .captions import prompted

            model, shape = prompted(model, run.captions, cfg, shape)
        run.log.samples(model, run.diffusion, shape, run.spec.kind, step, labels, run.preview)


def settle_ema(run: Run) -> None:
    """The step graph updates the EMA a step late (training.step_graph): up to date before it is read."""
    if run.graph is not None:
        run.graph.settle_ema()


def checkpoint_due(cfg: TrainConfig, step: int, stopping: bool) -> bool:
    return bool(cfg.ckpt_every) and (step % cfg.ckpt_every == 0 or step == cfg.steps or stopping)


def write_checkpoint(run: Run, step: int) -> bool:
    """Check the weights and optimizer moments, then write; every rank takes part (the RNG states are gathered).
    Returns whether the run stops: decided again here, with every rank's answer, so no rank writes on an old one.
    The caller has read every loss so far, so a non-finite one is known before anything is written."""
    with run.timer.paused():
        settle_ema(run)
        run.guard.check_weights(step, optimizer=True)
        stopping = run.guard.poll(wait=True)
        save(run.ckpt_path, run.stateful, step, run.stream, run.model_config, run.train_config, run.info, run.record)
        run.stop.last_checkpoint = f"{run.ckpt_path} (step {step}) is the last good one"
    run.log.write(f"step {step}: checkpoint written to {run.ckpt_path}")
    return stopping


def save(
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
