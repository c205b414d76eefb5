"""`dataprep convert --vae` under torchrun: each rank decodes only the files of its own autoencoder batches, and the
ranks together write the dataset one process writes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from dataprep_helpers import random_images
from PIL import Image

from dataprep.convert_config import ConvertConfig
from dataprep.convert_input import open_source
from dataprep.convert_latents import share_decoding
from dataprep.sources import AudioSpec

PER_CLASS, BATCH = 48, 16  # 96 images: one chunk of 6 batches, 3 for each of 2 ranks


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """Two classes of PNG files, 96 in all."""
    root = tmp_path_factory.mktemp("ranks") / "images"
    for c, name in enumerate(("a", "b")):
        (root / name).mkdir(parents=True)
        for i, x in enumerate(random_images(PER_CLASS, seed=c)):
            Image.fromarray(x).save(root / name / f"{i:03d}.png")
    return root


def _chunks(folder: Path, monkeypatch, rank: int, world: int, **text) -> tuple[list, int]:
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", str(world))
    cfg = ConvertConfig(output=folder.parent / "out", input=folder, vae="vae", batch_size=BATCH, workers=1, **text)
    source = open_source(cfg, AudioSpec())
    share_decoding(cfg, source, 2 * PER_CLASS)
    return list(source.chunks(2 * PER_CLASS, "error", 1)), source.decoded


@pytest.mark.parametrize("text", [{}, {"text_encoder": "t5", "caption_templates": ("a {label}",)}])
def test_a_rank_decodes_only_its_own_batches(folder, monkeypatch, text):
    """Rank 1 of 2 decodes its 3 batches of 16 and the first file; those hold one process's pixels, the rest zeros.
    With --text-encoder too: every caption comes from the labels (or the listing), not from the pixels."""
    (whole,), decoded_all = _chunks(folder, monkeypatch, 0, 1, **text)
    (share,), decoded = _chunks(folder, monkeypatch, 1, 2, **text)
    assert decoded_all == 96 and decoded == 3 * BATCH + 1
    assert share.x.shape == whole.x.shape and (share.y == whole.y).all() and share.names == whole.names
    mine = np.zeros(96, bool)
    for k in (1, 3, 5):
        mine[k * BATCH : (k + 1) * BATCH] = True
    assert (share.x[mine] == whole.x[mine]).all() and not share.x[~mine][1:].any()


RANKS_CONVERT = "import sys\nfrom dataprep.cli import cli\ncli(sys.argv[1:], standalone_mode=False)\n"


@pytest.mark.slow
def test_two_ranks_decode_half_each_and_write_one_process_dataset(folder, image_vae, tmp_path):
    """Under torchrun with 2 gloo ranks on the CPU the digest equals one process's and each rank decoded its half."""
    args = ["convert", "--input", str(folder), "--vae", str(image_vae), "--batch-size", str(BATCH), "--format", "hdf5"]
    args += ["--device", "cpu", "--quiet", "--timings"]
    # one thread in every process: the CPU's convolutions round differently with another thread count
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[2]), "OMP_NUM_THREADS": "1"}
    one = subprocess.run([sys.executable, "-m", "dataprep", *args, "--output", str(tmp_path / "one")], env=env)
    assert one.returncode == 0
    script = tmp_path / "ranks.py"
    script.write_text(RANKS_CONVERT)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script)]
    two = subprocess.run(
        [*torchrun, *args, "--output", str(tmp_path / "two")], capture_output=True, text=True, env=env, timeout=300
    )
    assert two.returncode == 0, two.stderr[-2000:]
    digests = [json.loads((tmp_path / d / "manifest.json").read_text())["digest"]["total"] for d in ("one", "two")]
    assert digests[0] == digests[1]
    counts = dict(re.findall(r"rank (\d): decoded (\d+) of 96 samples", two.stderr))
    assert counts == {"0": "48", "1": "49"}, two.stderr[-2000:]
    # the fixed costs a short conversion on several GPUs is made of, each a stage of its own
    stages = json.loads((tmp_path / "two" / "manifest.json").read_text())["timings"]["stages"]
    fixed = (
        "start: the interpreter, imports",
        "import torch",
        "join the other ranks",
        "import diffusers",
        "load the autoencoder",
    )
    for stage in fixed:
        assert stage in stages and stages[stage]["seconds"] > 0, stage
