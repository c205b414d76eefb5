"""The CPU training configuration the training tests share: tiny(), fp32, the resident loader, no sampling."""

from __future__ import annotations

from training.config import TrainConfig


def tiny_cfg(data, out, **overrides) -> TrainConfig:
    base = dict(
        data=data,
        out=out,
        loader="gpu",
        model="tiny",
        batch_size=16,
        steps=12,
        lr=1e-3,
        warmup=0,
        precision="fp32",
        device="cpu",
        workers=0,
        pin_memory=False,
        sample_every=0,
        log_every=4,
        ckpt_every=4,
        timing_warmup=2,
        progress=False,
    )
    return TrainConfig(**(base | overrides))
