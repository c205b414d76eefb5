"""Latent diffusion training on CPU with dit_tiny: on cached latents and with the autoencoder in the step it learns,
resumes exactly (flips and noise included), previews through the decoder, and refuses --vae where it does not
belong."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from training_helpers import tiny_cfg

from training.checkpoint import CKPT_NAME
from training.cli import train
from training.config import TrainConfig
from training.data import DataError
from training.loop import main

REPO = Path(__file__).resolve().parents[2]


def dit_cfg(data, out, **overrides) -> TrainConfig:
    """dit_tiny, 16 latents a step, fp32 on the CPU, the resident loader; a sixth of an epoch of 96 per step."""
    return tiny_cfg(data, out, **({"model": "dit_tiny"} | overrides))


def falls(losses: list[float]) -> tuple[float, float]:
    return sum(losses[:5]) / 5, sum(losses[-5:]) / 5


def saved_model_config(run_dir: Path) -> dict:
    return torch.load(run_dir / CKPT_NAME, weights_only=True)["model_config"]


def test_dit_learns_on_cached_latents(latent_images, tmp_path):
    """dit_tiny on the cached latents (flips and draws on): the last 5 steps' mean loss is well below the first 5's;
    the model is fitted to the manifest's latent shape and class-conditional on its 10 classes."""
    s = main(dit_cfg(latent_images, tmp_path / "run", steps=40, log_every=20, ckpt_every=40))
    first, last = falls(s.losses)
    assert len(s.losses) == 40 and last < 0.5 * first, (first, last)
    mc = saved_model_config(tmp_path / "run")
    assert s.config["model"] == "dit_tiny" and mc["in_channels"] == 4 and tuple(mc["input_size"]) == (16, 16)
    assert mc["num_classes"] == 10


@pytest.mark.slow  # make test-slow, for CI's budget
def test_vae_in_the_step_trains_on_latents(latent_pixels, image_vae, tmp_path):
    """train --vae on pixels: dit_tiny is built for the autoencoder's latents (4 x 16 x 16 from 32 x 32 images),
    not for the pixels, and its loss falls."""
    s = main(dit_cfg(latent_pixels, tmp_path / "run", vae=str(image_vae), steps=40, log_every=20, ckpt_every=40))
    first, last = falls(s.losses)
    assert last < 0.5 * first, (first, last)
    mc = saved_model_config(tmp_path / "run")
    assert mc["in_channels"] == 4 and tuple(mc["input_size"]) == (16, 16) and mc["num_classes"] == 10
    assert s.config["vae"] == str(image_vae) and s.config["model"] == "dit_tiny"


def test_online_encoder_draws_as_the_cache_stores(latent_pixels, latent_images, image_vae):
    """train --vae's encoder gives what the cached path gives unmirrored: (mean + std * noise - shift) * scale of
    the same pixels' latent distribution, fresh noise per call."""
    import h5py
    import numpy as np
    from latent_helpers import SCALING, SHIFT, read_stored

    from training.data import data_spec
    from training.latent import OnlineEncoder

    cfg = dit_cfg(latent_pixels, "unused", vae=str(image_vae))
    encode = OnlineEncoder(str(image_vae), data_spec(cfg), latent_pixels, "cpu", compile=False)
    with h5py.File(latent_pixels / "data.h5", "r") as f:
        x = torch.from_numpy(f["x"][:]).permute(0, 3, 1, 2).float() / 127.5 - 1
    stored = read_stored(latent_images, "hdf5")[0][:, 0].astype(np.float64)  # view 0: the image as it is
    z1, z2 = encode(x), encode(x)
    assert z1.shape == (96, 4, 16, 16) and not torch.equal(z1, z2)
    eps = (z1.double().numpy() / SCALING + SHIFT - stored[:, 0]) / stored[:, 1]
    assert abs(eps.mean()) < 0.02 and abs(eps.std() - 1) < 0.02


@pytest.mark.parametrize("loader", [pytest.param("gpu", marks=pytest.mark.slow), "hdf5"])  # one in CI, for time
def test_resume_on_latents_is_exact(latent_images, tmp_path, loader):
    """Stopping mid-epoch and resuming reproduces the uninterrupted run's losses and weights exactly, with the
    latents' mirrored views and noise draws on (96 latents / 16 = 6 batches an epoch; the cut at 9 is mid-epoch)."""
    kw = dict(loader=loader, log_every=3, ckpt_every=9, augment=True)
    full = main(dit_cfg(latent_images, tmp_path / "full", steps=18, **kw))
    cut = dit_cfg(latent_images, tmp_path / "cut", steps=9, **kw)
    main(cut)
    resumed = main(dataclasses.replace(cut, steps=18, resume=True))
    assert resumed.start_step == 9 and resumed.losses == full.losses[9:]
    assert resumed.param_checksum == full.param_checksum
    plain = main(dit_cfg(latent_images, tmp_path / "plain", steps=18, **(kw | {"augment": False})))
    assert plain.losses[9:] != full.losses[9:], "augment=True should change what the model sees"


@pytest.mark.slow
def test_resume_in_a_new_process_is_exact(latent_images, tmp_path):
    """A run resumed by `python -m training --resume` in another interpreter (another PYTHONHASHSEED) ends with
    the uninterrupted run's weights and losses: the latent draws depend on (seed, epoch, batch) only."""
    full = main(dit_cfg(latent_images, tmp_path / "full", loader="hdf5", steps=12, log_every=3, ckpt_every=6))
    main(dit_cfg(latent_images, tmp_path / "cut", loader="hdf5", steps=6, log_every=3, ckpt_every=6))
    args = "--loader hdf5 --model dit_tiny --batch-size 16 --steps 12 --lr 1e-3 --lr-warmup 0 --precision fp32 "
    args += "--device cpu --workers 0 --no-pin-memory --sample-every 0 --log-every 3 --ckpt-every 6 "
    args += "--timing-warmup 2 --no-progress --resume --json"
    cmd = [
        sys.executable,
        "-m",
        "training",
        "--data",
        str(latent_images),
        "--out",
        str(tmp_path / "cut"),
        *args.split(),
    ]
    # the same CPU arithmetic as this process: importing FFCV (another test may have) leaves torch on one thread
    env = os.environ | {"PYTHONHASHSEED": "12345", "OMP_NUM_THREADS": str(torch.get_num_threads())}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rec = json.loads(proc.stdout)
    assert rec["start_step"] == 6 and rec["first_loss"] == full.losses[6] and rec["final_loss"] == full.losses[-1]
    assert rec["param_checksum"] == full.param_checksum


def test_vae_on_latent_data_is_refused(latent_images, image_vae, tmp_path):
    """--vae on data that already holds latents fails before training, naming the autoencoder and saying to drop
    --vae; through the CLI it is a one-line error, exit 1."""
    with pytest.raises(DataError, match=r"holds latents, already encoded by .*image; drop --vae"):
        main(dit_cfg(latent_images, tmp_path / "run", vae=str(image_vae)))
    assert not (tmp_path / "run" / CKPT_NAME).exists()
    args = [
        "--data",
        str(latent_images),
        "--out",
        str(tmp_path / "cli"),
        "--vae",
        str(image_vae),
        "--loader",
        "gpu",
        "--model",
        "dit_tiny",
        "--device",
        "cpu",
        "--steps",
        "2",
        "--no-progress",
    ]
    r = CliRunner().invoke(train, args)
    assert r.exit_code == 1 and "drop --vae" in r.output and "Traceback" not in r.output, r.output


def test_vae_with_fastest_loader_is_refused(latent_pixels, image_vae, tmp_path):
    """--vae with --loader fastest (the default) is a usage error naming the fix, from the CLI (exit 2, no
    traceback) and from TrainConfig."""
    with pytest.raises(ValueError, match="--loader fastest does not measure --vae runs; pass a backend name"):
        TrainConfig(data=latent_pixels, vae=str(image_vae), loader="fastest")
    r = CliRunner().invoke(
        train,
        ["--data", str(latent_pixels), "--out", str(tmp_path / "run"), "--vae", str(image_vae), "--device", "cpu"],
    )
    assert r.exit_code == 2 and "--loader fastest does not measure --vae runs" in r.output, (r.output, r.exception)
    assert not (tmp_path / "run").exists()


def test_sample_grid_is_decoded_to_pixels(latent_images, tmp_path, capsys):
    """On latent data the preview grid goes through the manifest's autoencoder: 32x32 RGB images (the pixels'
    size), not 16x16 latent channels."""
    from PIL import Image

    main(dit_cfg(latent_images, tmp_path / "run", steps=2, sample_every=2, sample_count=4, sample_steps=3))
    pngs = sorted((tmp_path / "run" / "samples").glob("*.png"))
    assert [p.name for p in pngs] == ["step0000002.png"]
    with Image.open(pngs[0]) as im:
        assert im.size == (2 * 32 + 3 * 2, 2 * 32 + 3 * 2) and im.mode == "RGB"  # 2x2 grid, 2 px padding
    assert "showing latent channels" not in capsys.readouterr().err


def test_sample_grid_without_its_autoencoder_shows_latents(image_vae, tmp_path, capsys):
    """Where the manifest's autoencoder is gone the grid shows the 16x16 latent channels and says why, once."""
    import shutil

    from PIL import Image

    from dataprep.convert import ConvertConfig, convert

    vae = shutil.copytree(image_vae, tmp_path / "vae")
    convert(
        ConvertConfig(
            output=tmp_path / "data",
            source="synthetic-images",
            limit=32,
            formats=("hdf5",),
            vae=str(vae),
            device="cpu",
            progress=False,
            workers=1,
        )
    )
    shutil.rmtree(vae)
    main(dit_cfg(tmp_path / "data", tmp_path / "run", steps=4, sample_every=2, sample_count=4, sample_steps=3))
    with Image.open(tmp_path / "run" / "samples" / "step0000004.png") as im:
        assert im.size == (2 * 16 + 3 * 2, 2 * 16 + 3 * 2)
    assert capsys.readouterr().err.count("samples: showing latent channels, not images") == 1
