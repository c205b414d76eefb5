"""Latent diffusion on a GPU: the SD-shaped encoder in `dataprep convert --vae` (bf16 on CUDA against fp32 on the CPU),
and DiT-B/2 compiled in bf16 on the cached latents and with the encoder in the step."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def _convert(out, vae, device, formats=("hdf5", "ffcv", "files"), limit=256, **kw):
    from dataprep.convert import ConvertConfig, convert

    return convert(
        ConvertConfig(
            output=out,
            source="synthetic-images",
            limit=limit,
            formats=formats,
            vae=str(vae),
            device=device,
            progress=False,
            workers=2,
            **kw,
        )
    )


def test_sd_encoder_on_cuda_matches_the_cpu(sd_vae, tmp_path):
    """bf16 encoding on the GPU stores the fp32 CPU encoding's means to bf16 accuracy, and every format verifies."""
    from dataprep.formats import module
    from dataprep.verify import verify

    gpu, cpu = _convert(tmp_path / "gpu", sd_vae, "cuda"), _convert(tmp_path / "cpu", sd_vae, "cpu", ("hdf5",))
    assert gpu["latent"]["encoded"]["precision"] == "bf16" and cpu["latent"]["encoded"]["precision"] == "fp32"
    assert gpu["sample_shape"] == [2, 2, 4, 4, 4]
    assert verify(tmp_path / "gpu") == []
    a = np.concatenate([c.x for c in module("hdf5").read_chunks(tmp_path / "gpu", gpu, 1024)]).astype(np.float32)
    b = np.concatenate([c.x for c in module("hdf5").read_chunks(tmp_path / "cpu", cpu, 1024)]).astype(np.float32)
    mean_a, mean_b = a[:, :, 0], b[:, :, 0]
    assert np.abs(mean_a - mean_b).max() <= 0.05 * np.abs(mean_b).max()


def test_eager_gpu_encoder_replays_one_graph_per_shape_and_matches_plain_eager(sd_vae):
    """The conversion's eager GPU encoder is a CUDA graph: each replay reads its new input, and gives what the plain
    eager forward gives (the same kernels)."""
    from common.vae import load_vae
    from dataprep.graphed import Graphed

    vae = load_vae(sd_vae, "cuda")
    graphed = Graphed(vae.moments, torch.bfloat16)
    x = torch.randn(4, 3, 64, 64, device="cuda").contiguous(memory_format=torch.channels_last)
    with torch.autocast("cuda", torch.bfloat16):
        for scale in (1.0, -0.5):
            got = [t.clone() for t in graphed(x * scale)]
            want = vae.moments(x * scale)
            for a, b in zip(got, want):
                torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-2)
    assert len(graphed.graphs) == 1


def test_eager_gpu_audio_encoder_graphs_the_mel_too_and_matches_plain_eager(tmp_path):
    """Clips: AudioLDM's mel is captured in the encoder's graph (one graph for a short last batch too, padded), and
    the latents are those of the mel and encoder run eagerly, step by step."""
    from latent_helpers import build_audio_vae

    from common.vae import load_vae
    from dataprep.latents.encode import LatentEncoder
    from dataprep.sources.base import AudioSpec, Chunk

    vae = load_vae(build_audio_vae(tmp_path / "audio"), "cuda")
    spec = AudioSpec(sample_rate=16000, clip_seconds=0.64, channels=1)
    waves = (0.1 * np.random.default_rng(0).standard_normal((6, spec.num_samples))).astype(np.float32)
    chunk = Chunk(waves, np.zeros(6, np.int64))
    enc = LatentEncoder(vae, "audio", waves.shape[1:], spec, batch_size=4, precision="bf16")
    graphed = enc.encode(chunk).x
    assert list(enc._graphed.graphs) == [(((4, spec.num_samples), torch.float32, (spec.num_samples, 1)),)]
    assert None not in enc._graphed.graphs.values()  # captured, not fallen back to eager
    enc._graphed = None
    eager = enc.encode(chunk).x
    assert graphed.shape == eager.shape == (6, 1, 2, 8, 16, 16)
    np.testing.assert_allclose(graphed.astype(np.float32), eager.astype(np.float32), rtol=2e-2, atol=2e-2)


def test_compiled_encoding_compiles_once_and_matches_eager(sd_vae, tmp_path):
    """--compile with a short last batch (200 images, batches of 64) compiles the encoder for one shape only and
    stores the eager encoding's means to bf16 accuracy."""
    from dataprep.formats import module

    eager = _convert(tmp_path / "eager", sd_vae, "cuda", ("hdf5",), limit=200)
    torch._dynamo.reset()
    with torch._dynamo.config.patch(error_on_recompile=True):  # a second shape would compile again: an error here
        compiled = _convert(tmp_path / "compiled", sd_vae, "cuda", ("hdf5",), limit=200, compile=True)
    a, b = (
        np.concatenate([c.x for c in module("hdf5").read_chunks(tmp_path / n, m, 1024)]).astype(np.float32)
        for n, m in (("eager", eager), ("compiled", compiled))
    )
    assert a.shape == b.shape == (200, 2, 2, 4, 4, 4)
    assert np.abs(a[:, :, 0] - b[:, :, 0]).max() <= 0.05 * np.abs(a[:, :, 0]).max()


def test_dit_b2_compiled_trains_on_cached_latents_and_online(sd_vae, tmp_path):
    """dit_b2, bf16, torch.compile with CUDA graphs: finite, falling-free losses on cached latents (gpu and ffcv
    loaders) and with the SD-shaped encoder in the step."""
    from training.config import TrainConfig
    from training.loop import main

    _convert(tmp_path / "lat", sd_vae, "cuda")
    _convert_pixels(tmp_path / "px")
    common = dict(
        model="dit_b2",
        batch_size=64,
        steps=8,
        precision="bf16",
        compile=True,
        device="cuda",
        workers=2,
        timing_warmup=2,
        ckpt_every=0,
        sample_every=0,
        log_every=8,
        progress=False,
    )
    for name, extra in {"gpu": {}, "ffcv": {}, "online": {"vae": str(sd_vae)}}.items():
        data = tmp_path / ("px" if extra else "lat")
        loader = "hdf5" if extra else name
        summary = main(TrainConfig(data=data, loader=loader, out=tmp_path / f"run-{name}", **common, **extra))
        assert summary.steps == 8 and all(np.isfinite(summary.losses)), name
        assert summary.config["model"] == "dit_b2"
    assert torch.cuda.max_memory_allocated() > 0


def _convert_pixels(out):
    from dataprep.convert import ConvertConfig, convert

    convert(ConvertConfig(output=out, source="synthetic-images", limit=256, formats=("hdf5",), progress=False))
