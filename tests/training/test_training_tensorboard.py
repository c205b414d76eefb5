"""`train --tensorboard`: the logged scalars and the sample grids as TensorBoard events, read back with
TensorBoard's own EventAccumulator and compared with metrics.jsonl and the grid PNG."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("tensorboard", reason="the tensorboard extra: pip install 'gpufeed[tensorboard]'")


@pytest.mark.slow
def test_scalars_and_sample_grids_are_written(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from dataprep.convert import ConvertConfig, convert
    from training.config import TrainConfig
    from training.loop import main
    from training.metrics import BOARD_TAGS

    data = tmp_path / "img"
    convert(
        ConvertConfig(output=data, source="synthetic-images", limit=64, formats=("hdf5",), workers=1, progress=False)
    )
    run = tmp_path / "run"
    cfg = TrainConfig(
        data=data,
        loader="gpu",
        model="tiny",
        batch_size=8,
        steps=4,
        precision="fp32",
        device="cpu",
        workers=0,
        pin_memory=False,
        log_every=2,
        sample_every=4,
        sample_count=4,
        sample_steps=2,
        ckpt_every=0,
        timing_warmup=0,
        progress=False,
        tensorboard=True,
        out=run,
    )
    main(cfg)
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"images": 0, "scalars": 0}).Reload()
    tags = events.Tags()
    for tag in ("train/loss", "speed/images_per_s", "speed/starvation", "speed/host_wait_ms", "speed/tflops"):
        assert tag in tags["scalars"], tags
    for key, tag in BOARD_TAGS.items():
        got = [(e.step, e.value) for e in events.Scalars(tag)]
        assert got == [(r["step"], pytest.approx(r[key], rel=1e-5)) for r in logged], tag
    (image,) = events.Images("samples")
    png = np.asarray(Image.open(run / "samples" / "step0000004.png").convert("RGB"))
    assert image.step == 4 and (image.height, image.width) == png.shape[:2]
