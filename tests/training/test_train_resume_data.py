"""`--resume` goes on with the data and the autoencoder the checkpoint was trained on, or says which differ: other
samples, latents made by another autoencoder, another `--vae` (by its weights, also under the same name); a copied
directory is the same data; `--resume-other-data` goes on anyway and the checkpoint records it; a checkpoint from
before the record resumes with a note. Sample grids decode only through the autoencoder that made the latents."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from training_helpers import tiny_cfg

from training.checkpoint import CKPT_NAME, DIGEST, CheckpointError
from training.cli import train
from training.loop import main


def cli_args(data: Path, out: Path, steps: int, *extra: str) -> list[str]:
    opts = f"--loader gpu --model tiny --batch-size 8 --steps {steps} --precision fp32 --device cpu --workers 0"
    opts += " --no-pin-memory --sample-every 0 --log-every 2 --ckpt-every 2 --no-progress --timing-warmup 1"
    return ["--data", str(data), "--out", str(out), *opts.split(), *extra]


@pytest.fixture(scope="module")
def other_vae(image_vae, tmp_path_factory) -> Path:
    """The tiny autoencoder with one weight changed: the same shapes and name pattern, another hash."""
    from diffusers import AutoencoderKL

    vae = AutoencoderKL.from_pretrained(image_vae)
    with torch.no_grad():
        vae.encoder.conv_in.weight[0, 0, 0, 0] += 0.5
    out = tmp_path_factory.mktemp("vae") / "other"
    vae.save_pretrained(out)
    return out


def encoded(vae: Path, out: Path) -> Path:
    from dataprep.convert import ConvertConfig, convert

    convert(
        ConvertConfig(
            output=out,
            source="synthetic-images",
            limit=32,
            formats=("hdf5",),
            vae=str(vae),
            device="cpu",
            batch_size=32,
            workers=1,
            progress=False,
        )
    )
    return out


def test_other_data_is_refused_naming_both_and_the_flag_goes_on(synthetic_images, tmp_path):
    """Resuming on another dataset names both (path, count, digest) and the flag; with --resume-other-data the run
    goes on, the checkpoint records the flag, the new data and what it trained on before; a later plain --resume on
    the new data needs no flag."""
    first, second, out = synthetic_images(64), synthetic_images(96), tmp_path / "run"
    runner = CliRunner()
    assert runner.invoke(train, cli_args(first, out, 2)).exit_code == 0
    refused = runner.invoke(train, cli_args(second, out, 4, "--resume"))
    assert refused.exit_code == 1
    said = " ".join(refused.output.split())
    assert f"it was trained on {first} (64 samples, digest " in said, said
    assert f"this run's --data is {second} (96 samples, digest " in said and "--resume-other-data" in said
    assert torch.load(out / CKPT_NAME, weights_only=True)["step"] == 2  # untouched
    went_on = runner.invoke(train, cli_args(second, out, 4, "--resume", "--resume-other-data"))
    assert went_on.exit_code == 0, went_on.output
    assert "resume: resuming on other data, as --resume-other-data asks" in went_on.output
    state = torch.load(out / CKPT_NAME, weights_only=True)
    assert state["step"] == 4 and state["train_config"]["resume_other_data"] is True
    assert state["data"]["path"] == str(second) and state["data"]["count"] == 96
    assert [(d["path"], d["count"], d["until_step"]) for d in state["data_before"]] == [(str(first), 64, 2)]
    again = runner.invoke(train, cli_args(second, out, 6, "--resume"))
    assert again.exit_code == 0 and "other data" not in again.output, again.output


@pytest.mark.slow  # make test-slow, for CI's budget
def test_a_copied_directory_is_the_same_data(synthetic_images, tmp_path):
    """The identity is the data's digest and count, not its path: a copy elsewhere resumes without a word."""
    data, out = synthetic_images(64), tmp_path / "run"
    cfg = tiny_cfg(data, out, steps=2, ckpt_every=2, log_every=2)
    main(cfg)
    copied = tmp_path / "copied"
    shutil.copytree(data, copied)
    assert main(dataclasses.replace(cfg, data=copied, resume=True, steps=4)).steps == 2


def test_latents_of_another_autoencoder_are_refused(image_vae, other_vae, tmp_path):
    """The same images encoded by another autoencoder: the refusal names both autoencoders by name and hash."""
    ours, theirs = encoded(image_vae, tmp_path / "ours"), encoded(other_vae, tmp_path / "theirs")
    cfg = tiny_cfg(ours, tmp_path / "run", model="dit_tiny", steps=2, ckpt_every=2, log_every=2)
    main(cfg)
    with pytest.raises(CheckpointError) as refused:
        main(dataclasses.replace(cfg, data=theirs, resume=True, steps=4))
    said = str(refused.value)
    assert re.search(
        rf"latents made by the autoencoder {re.escape(str(image_vae))} \(sha256 [0-9a-f]{{16}}\.\.\.\) "
        rf"then, {re.escape(str(other_vae))} \(sha256 [0-9a-f]{{16}}\.\.\.\) now",
        said,
    ), said


def test_another_vae_in_the_step_is_refused_also_under_the_same_name(latent_pixels, image_vae, other_vae, tmp_path):
    """`--vae DIR` whose weights changed since the checkpoint (the same path, other files) is refused, naming both
    hashes; the checkpoint's own autoencoder resumes."""
    vae = tmp_path / "vae"
    shutil.copytree(image_vae, vae)
    cfg = tiny_cfg(latent_pixels, tmp_path / "run", model="dit_tiny", vae=str(vae), steps=2, ckpt_every=2, log_every=2)
    main(cfg)
    saved = torch.load(tmp_path / "run" / CKPT_NAME, weights_only=True)["data"]["vae"]["sha256"]
    shutil.rmtree(vae)
    shutil.copytree(other_vae, vae)
    with pytest.raises(CheckpointError, match=rf"--vae {re.escape(str(vae))} \(sha256 {saved[:16]}\.\.\.\) then, "):
        main(dataclasses.replace(cfg, resume=True, steps=4))


@pytest.mark.slow  # make test-slow, for CI's budget
def test_a_checkpoint_from_before_the_record_resumes_with_a_note(synthetic_images, tmp_path, capsys):
    """A checkpoint without the data's identity (written before it was recorded) still resumes, and says it could
    not check the data."""
    data, out = synthetic_images(64), tmp_path / "run"
    cfg = tiny_cfg(data, out, steps=2, ckpt_every=2, log_every=2)
    main(cfg)
    state = torch.load(out / CKPT_NAME, weights_only=True)
    del state["data"], state[DIGEST]  # as such a writer left it: without the checksum, which came later
    torch.save(state, out / CKPT_NAME)
    capsys.readouterr()
    assert main(dataclasses.replace(cfg, resume=True, steps=4)).steps == 2
    assert "was written before checkpoints recorded their data" in capsys.readouterr().err
    assert torch.load(out / CKPT_NAME, weights_only=True)["data"]["count"] == 64  # recorded from now on


def test_resume_other_data_goes_with_resume(synthetic_images, tmp_path):
    done = CliRunner().invoke(train, cli_args(synthetic_images(64), tmp_path / "run", 2, "--resume-other-data"))
    assert done.exit_code == 2 and "--resume-other-data goes with --resume" in done.output


def test_sample_grids_never_decode_through_another_autoencoder_of_the_same_name(image_vae, other_vae, tmp_path, capsys):
    """The manifest's autoencoder path now holds other weights: the grid shows the latent channels and says why, once,
    rather than images decoded by the wrong autoencoder."""
    from PIL import Image

    vae = tmp_path / "vae"
    shutil.copytree(image_vae, vae)
    data = encoded(vae, tmp_path / "data")
    shutil.rmtree(vae)
    shutil.copytree(other_vae, vae)
    cfg = tiny_cfg(data, tmp_path / "run", model="dit_tiny", steps=4, sample_every=2, sample_count=4, sample_steps=3)
    main(cfg)
    with Image.open(tmp_path / "run" / "samples" / "step0000004.png") as im:
        assert im.size == (2 * 16 + 3 * 2, 2 * 16 + 3 * 2)  # latent channels, not 32x32 images
    err = capsys.readouterr().err
    why = re.findall(
        rf"samples: showing latent channels, not images: {re.escape(str(vae))} \(sha256 \w+\.\.\.\) is "
        "not the autoencoder that encoded these latents",
        err,
    )
    assert len(why) == 1, err
