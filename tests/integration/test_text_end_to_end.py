"""The text-to-image path a user types: `dataprep convert --text-encoder` on real CIFAR-10 images with a caption
template, then `train` a text model on that data with no encoder at train time: it runs with caption dropout and
sample grids (the empty caption's embedding cached by convert), learns, resumes exactly; a --text-encoder other than
the cache's is refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from training_helpers import tiny_cfg

from dataprep.cli import cli
from dataprep.manifest import load_manifest
from dataprep.textcache import TextTable
from dataprep.textenc import load_text_encoder
from training.cli import train
from training.loop import main

N = 64  # real CIFAR-10 images, 32x32


@pytest.fixture(scope="module")
def captioned(cifar_jpg_root, text_encoders, tmp_path_factory) -> Path:
    """N CIFAR-10 images captioned "a photo of a {label}", embeddings cached by the tiny CLIP, as hdf5 and stream."""
    out = tmp_path_factory.mktemp("text-e2e") / "data"
    args = ["convert", "--input", str(cifar_jpg_root), "--output", str(out), "--format", "hdf5,stream"]
    args += ["--limit", str(N), "--caption-template", "a photo of a {label}", "--workers", "1", "--quiet"]
    r = CliRunner().invoke(cli, [*args, "--text-encoder", str(text_encoders["clip"]), "--batch-size", "16"])
    assert r.exit_code == 0, r.output
    return out


@pytest.fixture(scope="module")
def captioned_latents(cifar_jpg_root, text_encoders, image_vae, tmp_path_factory) -> Path:
    """The same images as latents of the tiny VAE (4x16x16) with the same cached captions, in one pass."""
    out = tmp_path_factory.mktemp("text-e2e") / "latents"
    args = ["convert", "--input", str(cifar_jpg_root), "--output", str(out), "--format", "hdf5", "--limit", str(N)]
    args += ["--caption-template", "a photo of a {label}", "--workers", "1", "--quiet", "--batch-size", "16"]
    args += ["--text-encoder", str(text_encoders["clip"]), "--vae", str(image_vae), "--device", "cpu"]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    return out


def _cfg(data: Path, out: Path, **overrides):
    base = dict(model="tiny_text", loader="hdf5", batch_size=16, steps=6, lr=3e-3, log_every=1, ckpt_every=0)
    return tiny_cfg(data, out, **(base | overrides))


def test_convert_caches_the_empty_caption(captioned, text_encoders):
    """The table holds the empty caption where the manifest says, equal to the encoder's own embedding of ""."""
    m = load_manifest(captioned)
    table = TextTable(captioned, m)
    assert table.captions[m["text"]["empty_caption"]] == ""
    got, want = table.empty(), load_text_encoder(text_encoders["clip"]).encode([""])
    assert torch.equal(got.mask, want.mask)
    torch.testing.assert_close(got.tokens.float(), want.tokens, rtol=2**-7, atol=1e-6)


def test_cached_text_run_learns_and_samples(captioned, tmp_path):
    """tiny_text on the cache, no --text-encoder, caption dropout on: the loss falls, the width comes from the data,
    and the last step draws a sample grid from the cached empty caption."""
    cfg = _cfg(captioned, tmp_path / "run", steps=12, ckpt_every=12, sample_every=12, sample_steps=2, sample_count=2)
    summary = main(cfg)
    first, last = sum(summary.losses[:4]) / 4, sum(summary.losses[-4:]) / 4
    assert last < 0.8 * first, summary.losses
    assert (tmp_path / "run" / "samples" / "step0000012.png").is_file()
    saved = torch.load(tmp_path / "run" / "ckpt.pt", weights_only=False)
    assert saved["model_config"]["text_dim"] == load_manifest(captioned)["text"]["encoder"]["dim"]


SLOW = pytest.mark.slow  # seconds more than the hdf5 run (a VAE pass, stream shards): left to make test-slow, for CI
RUNS = [("captioned", "hdf5", "tiny_text"), ("captioned", "stream", "tiny_text", SLOW)]
RUNS += [("captioned_latents", "hdf5", "dit_tiny_text", SLOW)]


@pytest.mark.parametrize(("data", "loader", "model"), [pytest.param(*r[:3], marks=r[3:]) for r in RUNS])
def test_cached_text_run_resumes_exactly(request, tmp_path, data, loader, model):
    """4 steps then a resume to 6 give the losses and weights of 6 steps straight, caption dropout on: pixels from
    hdf5 and from local stream shards, and DiT on cached latents."""
    data, opts = request.getfixturevalue(data), dict(loader=loader, model=model)
    straight = main(_cfg(data, tmp_path / "straight", **opts))
    main(_cfg(data, tmp_path / "resumed", steps=4, ckpt_every=4, **opts))
    resumed = main(_cfg(data, tmp_path / "resumed", resume=True, **opts))
    assert resumed.losses == straight.losses[4:]
    assert resumed.param_checksum == straight.param_checksum


def test_another_text_encoder_is_refused(captioned, text_encoders, tmp_path):
    """train --text-encoder with an encoder other than the cache's exits non-zero with one line naming both."""
    args = ["--data", str(captioned), "--out", str(tmp_path / "run"), "--model", "tiny_text", "--loader", "hdf5"]
    args += ["--device", "cpu", "--steps", "2", "--no-progress", "--text-encoder", str(text_encoders["t5"])]
    result = CliRunner().invoke(train, args)
    assert result.exit_code != 0 and isinstance(result.exception, SystemExit), result.output
    error = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(error) == 1 and "is not the text encoder that made the caption embeddings" in error[0], result.output
    assert str(text_encoders["t5"]) in error[0] and "clip" in error[0]
    assert not (tmp_path / "run" / "ckpt.pt").exists()


def test_data_free_batch_keeps_the_text(captioned):
    """The resident batch `train --loader fastest` times the model on carries the cached caption embeddings, so a
    text model's data-free steps run (the default loader choice of a text run)."""
    from bench.fastest.probe_run import job_of
    from bench.grid.run_one import build

    key = dict(batch_size=8, model="tiny_text", device="cpu", compile=False, precision="fp32")
    resident, _ = build(job_of(captioned, key, "t", kind="data_free", backend=None))
    batch = next(iter(resident))
    assert batch.text.tokens.shape[0] == 8 and batch.text.mask.any(1).all()
