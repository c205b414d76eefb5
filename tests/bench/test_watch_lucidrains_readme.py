"""`bench watch` on a training program as its authors publish it: the Trainer example of lucidrains'
denoising-diffusion-pytorch README (tests/bench/fixtures/lucidrains_readme/, its origin and license named there), run
from its own folder with the images where the example says they are."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

REPO = Path(__file__).resolve().parents[2]
PROGRAM = Path(__file__).resolve().parent / "fixtures" / "lucidrains_readme" / "train.py"


@pytest.mark.slow
def test_bench_watch_measures_the_readme_trainer(tmp_path):
    """The README's Trainer program, its loader found inside the library, its steps and batch size measured."""
    images = tmp_path / "path" / "to" / "your" / "images"  # the folder the example names, relative to where it runs
    images.mkdir(parents=True)
    for i, x in enumerate(np.random.default_rng(0).integers(0, 256, (128, 16, 16, 3), dtype=np.uint8)):
        Image.fromarray(x).save(images / f"{i:03d}.png")  # the Trainer wants at least 100 images
    out = tmp_path / "watch"
    cmd = [sys.executable, "-m", "bench", "watch", "--out", str(out), "--every", "0", "--timing-warmup", "3", "--"]
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [*cmd, sys.executable, str(PROGRAM)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    w = json.loads((out / "watch.json").read_text())
    assert w["loader"].startswith("DataLoaderShard(Dataset) x8 at denoising_diffusion_pytorch/")
    assert w["steps"] >= 10 and w["batch_size"] == 16 and w["samples_per_s"] > 0
