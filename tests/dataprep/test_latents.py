"""`dataprep convert --vae`: latents stored exactly in every format, equal to diffusers' own encoding, drawn and
mirrored by the loaders as documented, and every wrong autoencoder or input refused with the fix. The order, epoch
and shard properties of the loaders on latents are in test_loaders_conformance.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from dataprep_helpers import FORMATS, random_images
from latent_helpers import SCALING, SHIFT, read_stored
from PIL import Image

from common.vae import VaeError, load_vae
from dataprep.cli import cli
from dataprep.latents.encode import LatentEncoder
from dataprep.manifest import load_manifest
from dataprep.sources.base import AudioSpec, Chunk
from dataprep.verify import verify
from loaders import BACKENDS, build_loader

REPO = Path(__file__).resolve().parents[2]
ALL = list(BACKENDS)


def pixels(data_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """A pixel dataset's uint8 NHWC images and labels, read with h5py."""
    with h5py.File(data_dir / "data.h5", "r") as f:
        return f["x"][:], f["y"][:]


def encoder(vae_dir: Path, batch_size: int = 32) -> LatentEncoder:
    return LatentEncoder(load_vae(vae_dir, "cpu"), "image", (32, 32, 3), AudioSpec(), batch_size=batch_size)


def convert_cli(*args: str):
    return CliRunner().invoke(cli, ["convert", "--quiet", "--workers", "1", *args])


def nothing_written(out: Path) -> bool:
    return not out.exists() and not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.tmp")]


# --- what is stored ---------------------------------------------------------------------------------------------


def test_every_format_stores_the_encoding_exactly(latent_images, latent_pixels, image_vae):
    """Every format reads back bitwise the float16 moments the encoder computes from the same pixels; verify finds
    nothing; the manifest names the layout, the autoencoder's factors and its hash."""
    x, y = pixels(latent_pixels)
    computed = encoder(image_vae).encode(Chunk(x, y)).x
    assert computed.dtype == np.float16 and computed.shape == (len(x), 2, 2, 4, 16, 16)
    for fmt in FORMATS:
        stored, labels = read_stored(latent_images, fmt)
        assert stored.dtype == np.float16, fmt
        assert np.array_equal(stored.view(np.uint16), computed.view(np.uint16)), f"{fmt}: not the encoded bits"
        assert np.array_equal(labels, y), fmt
    assert verify(latent_images) == []
    m = load_manifest(latent_images)
    config = json.loads((image_vae / "config.json").read_text())
    lat = m["latent"]
    assert m["kind"] == "latent" and m["dtype"] == lat["dtype"] == "float16" and m["count"] == len(x)
    assert m["sample_shape"] == [2, 2, 4, 16, 16] and lat["shape"] == [4, 16, 16]
    assert lat["of"] == "image" and lat["views"] == ["image", "mirrored"] and lat["stored"] == ["mean", "std"]
    assert lat["scaling_factor"] == config["scaling_factor"] == SCALING
    assert lat["shift_factor"] == config["shift_factor"] == SHIFT
    assert lat["input"] == {"kind": "image", "height": 32, "width": 32, "range": "[-1, 1]"}
    assert lat["encoded"] == {"device": "cpu", "precision": "fp32", "processes": 1}
    assert lat["vae"]["sha256"] == load_vae(image_vae).identity["sha256"] == load_vae(image_vae).identity["sha256"]
    assert lat["vae"]["name"] == str(image_vae.resolve()) and lat["vae"]["downsample"] == 2


def test_vae_hash_tells_autoencoders_apart(image_vae, tmp_path):
    """The manifest's sha256 changes when one weight of the autoencoder changes, and not when it is saved again."""
    from diffusers import AutoencoderKL

    model = AutoencoderKL.from_pretrained(image_vae)
    model.save_pretrained(tmp_path / "same")
    with torch.no_grad():
        model.encoder.conv_in.bias[0] += 1e-3
    model.save_pretrained(tmp_path / "changed")
    original = load_vae(image_vae).identity["sha256"]
    assert load_vae(tmp_path / "same").identity["sha256"] == original
    assert load_vae(tmp_path / "changed").identity["sha256"] != original


def test_stored_moments_equal_diffusers_encoding(latent_images, latent_pixels, image_vae):
    """Ground truth: AutoencoderKL.from_pretrained in fp32 on x / 127.5 - 1 and on its mirror gives the stored mean
    and std of each view, within float16 rounding."""
    from diffusers import AutoencoderKL

    x, _ = pixels(latent_pixels)
    vae = AutoencoderKL.from_pretrained(image_vae).eval()
    image = torch.from_numpy(x).permute(0, 3, 1, 2).double().div(127.5).sub(1).float()
    stored, _ = read_stored(latent_images, "hdf5")
    stored = stored.astype(np.float32)
    with torch.no_grad():
        for view, pix in enumerate([image, image.flip(3)]):
            dist = vae.encode(pix).latent_dist
            np.testing.assert_allclose(stored[:, view, 0], dist.mean.numpy(), rtol=1e-3, atol=1e-3)
            np.testing.assert_allclose(stored[:, view, 1], dist.std.numpy(), rtol=1e-3, atol=1e-3)
    # the views are two encodings, not one latent stored twice or mirrored as a tensor
    assert not np.allclose(stored[:, 1, 0], stored[:, 0, 0], atol=1e-2)
    assert not np.allclose(stored[:, 1, 0], stored[:, 0, 0, ..., ::-1], atol=1e-2)


# --- what the loaders draw --------------------------------------------------------------------------------------


def residuals(x: torch.Tensor, stored: np.ndarray) -> np.ndarray:
    """(N, V): mean square of (z - mean_v) / std_v per sample and view, z the delivered latent unscaled. For the view
    the sample was drawn from it is about 1 (standard normal noise); for the other view far more."""
    z = x.double().cpu().numpy()[:, None] / SCALING + SHIFT
    s = stored.astype(np.float64)
    return (((z - s[:, :, 0]) / s[:, :, 1]) ** 2).mean(axis=(2, 3, 4))


def noise(x: torch.Tensor, stored: np.ndarray, view: np.ndarray) -> np.ndarray:
    """The standard normal draws behind delivered latents x, given the view each sample came from."""
    s = stored[np.arange(len(x)), view].astype(np.float64)
    return (x.double().cpu().numpy() / SCALING + SHIFT - s[:, 0]) / s[:, 1]


def augmented_epoch(backend: str, data_dir: Path, e: int, seed: int = 0) -> torch.Tensor:
    with build_loader(
        backend, data_dir, batch_size=16, workers=1, shuffle=False, augment=True, drop_last=False, seed=seed
    ) as loader:
        for skipped in range(e):  # DALI cannot jump to an epoch
            loader.set_epoch(skipped)
            list(loader)
        loader.set_epoch(e)
        return torch.cat([b.x for b in loader])


@pytest.mark.parametrize("backend", ALL)
def test_augment_draws_from_a_view_about_half_mirrored(latent_images, backend):
    """augment=True: each delivered latent is mean + std * standard normal noise of one stored view (then shifted and
    scaled), the mirrored view for about half the samples; the noise is fresh each epoch and the same for the same
    seed and epoch, and another seed draws otherwise."""
    stored, _ = read_stored(latent_images, "hdf5")
    x0 = augmented_epoch(backend, latent_images, 0)
    r = residuals(x0, stored)
    picked = r.argmin(axis=1)
    right, wrong = r.min(axis=1), r.max(axis=1)
    assert np.all((right > 0.8) & (right < 1.2)), f"{backend}: residuals of the drawn view are not N(0, 1): {right}"
    assert np.all(wrong > 1.5), "the fixture's two views must be told apart under the noise"
    assert 0.3 < picked.mean() < 0.7, f"{backend}: {picked.mean():.2f} of the samples mirrored"
    eps0 = noise(x0, stored, picked)
    assert abs(eps0.mean()) < 0.02 and abs(eps0.std() - 1) < 0.02
    batches = eps0.reshape(6, -1)  # 16 samples each: every batch draws its own noise, not the first batch's again
    assert np.abs(np.corrcoef(batches) - np.eye(6)).max() < 0.1, f"{backend}: batches share their noise"
    x1 = augmented_epoch(backend, latent_images, 1)
    r1 = residuals(x1, stored)
    assert (r1.min(axis=1) < 1.2).all()
    same_view = picked == r1.argmin(axis=1)
    eps1 = noise(x1, stored, r1.argmin(axis=1))
    assert np.abs(np.corrcoef(eps0[same_view].ravel(), eps1[same_view].ravel())[0, 1]) < 0.1, "noise repeats"
    assert torch.equal(augmented_epoch(backend, latent_images, 1), x1), f"{backend}: epoch 1 drawn differently"
    assert not torch.equal(augmented_epoch(backend, latent_images, 1, seed=5), x1)


DRAW = """
import sys, torch
from loaders import build_loader
with build_loader(sys.argv[1], sys.argv[2], batch_size=16, workers=0, shuffle=False, augment=True, drop_last=False,
                  seed=7) as loader:
    loader.set_epoch(1)
    torch.save(torch.cat([b.x for b in loader]), sys.argv[3])
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["hdf5", "gpu"])
def test_draws_are_the_same_in_another_process(latent_images, backend, tmp_path):
    """The flips and noise of (seed, epoch) do not depend on the process: two interpreters with different string
    hashing (PYTHONHASHSEED) draw the same epoch, as a run resumed in a new process must."""
    draws = []
    for hash_seed in ("1", "2"):
        path = tmp_path / f"draw{hash_seed}.pt"
        env = os.environ | {"PYTHONHASHSEED": hash_seed}
        subprocess.run(
            [sys.executable, "-c", DRAW, backend, str(latent_images), str(path)],
            cwd=REPO,
            env=env,
            check=True,
            timeout=120,
        )
        draws.append(torch.load(path, weights_only=True))
    assert draws[0].shape == (96, 4, 16, 16)
    assert torch.equal(draws[0], draws[1]), f"{backend}: the draws depend on the interpreter's hash seed"


# --- bad autoencoders and inputs ----------------------------------------------------------------------------------


def test_missing_vae_directory_is_named(tmp_path):
    """A --vae path that does not exist fails before any work (exit 2, a bad option), naming it and the fix, and
    writes nothing."""
    out = tmp_path / "out"
    missing = tmp_path / "no-such-vae"
    r = convert_cli("--source", "synthetic-images", "--limit", "8", "--output", str(out), "--vae", str(missing))
    assert r.exit_code == 2 and str(missing) in r.output and "pass a local directory" in r.output, r.output
    assert nothing_written(out)


def test_a_unet_directory_is_not_an_autoencoder(tmp_path):
    """A diffusers model directory of another class (a UNet2DModel) is refused, naming what it describes."""
    from diffusers import UNet2DModel

    unet = UNet2DModel(
        sample_size=8,
        block_out_channels=(4, 8),
        norm_num_groups=4,
        layers_per_block=1,
        down_block_types=("DownBlock2D",) * 2,
        up_block_types=("UpBlock2D",) * 2,
    )
    unet.save_pretrained(tmp_path / "unet")
    out = tmp_path / "out"
    r = convert_cli(
        "--source", "synthetic-images", "--limit", "8", "--output", str(out), "--vae", str(tmp_path / "unet")
    )
    assert r.exit_code == 2 and "describes a UNet2DModel, not an AutoencoderKL" in r.output, r.output
    assert nothing_written(out)


def test_rgb_images_into_a_mel_autoencoder(audio_vae, tmp_path):
    """RGB images given to a 1-channel (log-mel) autoencoder: the channels are named, nothing is published."""
    out = tmp_path / "out"
    r = convert_cli("--source", "synthetic-images", "--limit", "8", "--output", str(out), "--vae", str(audio_vae))
    assert r.exit_code == 1 and "takes 1-channel input" in r.output and "has 3 channel(s)" in r.output, r.output
    assert nothing_written(out)


def test_image_size_the_autoencoder_cannot_halve(image_vae, tmp_path):
    """31x31 images (--size 31) into an autoencoder that downsamples by 2: the message names both and the fix."""
    root = tmp_path / "in" / "cat"
    root.mkdir(parents=True)
    for i, img in enumerate(random_images(4)):
        Image.fromarray(img).save(root / f"{i}.png")
    out = tmp_path / "out"
    r = convert_cli("--input", str(tmp_path / "in"), "--size", "31", "--output", str(out), "--vae", str(image_vae))
    assert r.exit_code == 1 and "downsamples by 2" in r.output and "31x31" in r.output, r.output
    assert "--size" in r.output
    assert nothing_written(out)


def test_hub_id_without_network_fails_fast(tmp_path):
    """A hub id that is neither cached nor reachable fails within seconds, saying to pass a local directory."""
    out = tmp_path / "out"
    t0 = time.monotonic()
    r = convert_cli("--source", "synthetic-images", "--limit", "8", "--output", str(out), "--vae", "someone/some-vae")
    elapsed = time.monotonic() - t0
    assert r.exit_code == 1 and "someone/some-vae" in r.output and "pass a local directory" in r.output, r.output
    assert elapsed < 10, f"took {elapsed:.1f} s"
    assert nothing_written(out)


def test_device_without_vae_is_refused(tmp_path):
    """--device only means something with --vae: without it the command exits 2 and says so."""
    r = convert_cli("--source", "synthetic-images", "--limit", "8", "--output", str(tmp_path / "o"), "--device", "cpu")
    assert r.exit_code == 2 and "only --vae and --text-encoder run on a device" in r.output
    assert nothing_written(tmp_path / "o")


def test_audio_latents_of_the_audioldm_mel(audio_vae, tmp_path):
    """Clips through an AudioLDM-shaped autoencoder: one view of (8, frames/4, 64/4), equal to diffusers' encoding of
    dataprep.features.audioldm_mel of the same clips; a clip length whose frames do not divide by 4 is refused."""
    from diffusers import AutoencoderKL

    from dataprep.features import audioldm_mel

    common = ["--source", "synthetic-audio", "--limit", "8", "--sample-rate", "16000", "--format", "hdf5"]
    r = convert_cli(*common, "--clip-seconds", "0.64", "--output", str(tmp_path / "lat"), "--vae", str(audio_vae))
    assert r.exit_code == 0, r.output
    m = load_manifest(tmp_path / "lat")
    assert m["sample_shape"] == [1, 2, 8, 16, 16] and m["latent"]["views"] == ["clip"] and m["audio"] is None
    assert m["latent"]["input"]["frames"] == 64 and verify(tmp_path / "lat") == []
    assert convert_cli(*common, "--clip-seconds", "0.64", "--output", str(tmp_path / "wav")).exit_code == 0
    with h5py.File(tmp_path / "wav" / "data.h5", "r") as f:
        wave = torch.from_numpy(f["x"][:])
    with torch.no_grad():
        dist = AutoencoderKL.from_pretrained(audio_vae).encode(audioldm_mel(wave)[:, None]).latent_dist
    stored = read_stored(tmp_path / "lat", "hdf5")[0].astype(np.float32)
    np.testing.assert_allclose(stored[:, 0, 0], dist.mean.numpy(), rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(stored[:, 0, 1], dist.std.numpy(), rtol=1e-3, atol=1e-3)
    r = convert_cli(*common, "--clip-seconds", "0.512", "--output", str(tmp_path / "odd"), "--vae", str(audio_vae))
    assert r.exit_code == 1 and "downsamples by 4" in r.output and "51x64" in r.output, r.output
    assert "--clip-seconds" in r.output and nothing_written(tmp_path / "odd")


def test_clips_of_ten_seconds_and_more_in_bounded_chunks(audio_vae, tmp_path, monkeypatch):
    """10.24 s and 12 s clips convert to AudioLDM's 1,024 and 1,200 frames; the conversion reads them in chunks of at
    most CHUNK_BYTES, each a whole number of autoencoder batches."""
    import dataprep.convert as conversion
    import dataprep.convert_input as conversion_input

    monkeypatch.setattr(conversion_input, "CHUNK_BYTES", 4 << 20)
    sizes = []
    real = conversion.usable
    monkeypatch.setattr(conversion, "usable", lambda chunks, *a: real((sizes.append(len(c)) or c for c in chunks), *a))
    common = ["--source", "synthetic-audio", "--limit", "7", "--sample-rate", "16000", "--format", "hdf5"]
    for seconds, frames in (("10.24", 1024), ("12", 1200)):
        out = tmp_path / seconds
        r = convert_cli(
            *common, "--clip-seconds", seconds, "--vae", str(audio_vae), "--batch-size", "2", "--output", str(out)
        )
        assert r.exit_code == 0, r.output
        m = load_manifest(out)
        assert m["latent"]["input"]["frames"] == frames and m["sample_shape"] == [1, 2, 8, frames // 4, 16]
        assert m["count"] == 7 and verify(out) == []
        stages = {name: v["seconds"] for name, v in m["timings"]["stages"].items()}
        waited, span = (
            stages["encode: waiting for the GPU (a thread)"],
            stages["encode: the first result to the last (a thread)"],
        )
        assert 0 <= waited <= span
    assert sizes == [6, 1, 4, 3]  # 4 MiB holds 6 clips of 640 KiB, 5 of 750 KiB: 6 and 4 in batches of 2


def test_a_chunk_holds_as_many_autoencoder_batches_for_every_rank(tmp_path, monkeypatch):
    """Under torchrun the ranks take turns at a chunk's autoencoder batches, so a chunk holds a whole number of them
    for every rank: 320 images of 256 px (5 batches of 64) kept one of 4 ranks at 2 batches a chunk while the others
    waited with 1, and 4 GPUs encoded 2.7x as fast as one. One process keeps its 320."""
    from types import SimpleNamespace

    from dataprep.convert_config import ConvertConfig
    from dataprep.convert_input import chunk_size

    cfg = ConvertConfig(output=tmp_path, size=256, vae="any", batch_size=64)
    images = SimpleNamespace(kind="image")
    sizes = {}
    for world in (1, 2, 3, 4, 8):
        monkeypatch.setenv("WORLD_SIZE", str(world))
        sizes[world] = chunk_size(cfg, images, None)
    assert sizes == {1: 320, 2: 256, 3: 192, 4: 256, 8: 512}
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert chunk_size(ConvertConfig(output=tmp_path, size=256), images, None) == 341  # no autoencoder: no turns


# --- out of memory ------------------------------------------------------------------------------------------------


def fails_above(enc: LatentEncoder, k: int) -> list[int]:
    """Make the real encoder raise torch.OutOfMemoryError on more than k inputs, as a full GPU would; returns the
    input sizes it was called with."""
    real, calls = enc._moments, []

    def moments(x: torch.Tensor):
        calls.append(len(x))
        if len(x) > k:
            raise torch.OutOfMemoryError("CUDA out of memory (injected by the test)")
        return real(x)

    enc._moments = moments
    return calls


def test_out_of_memory_halves_the_pieces(latent_pixels, image_vae, capsys):
    """On an out-of-memory error the encoder retries in halves, says at each halving which --batch-size avoids it,
    and stores the same latents as an encoding that never failed."""
    x, y = pixels(latent_pixels)
    x, y = x[:40], y[:40]
    expected = encoder(image_vae, batch_size=16).encode(Chunk(x, y)).x
    enc = encoder(image_vae, batch_size=16)
    calls = fails_above(enc, 8)  # 8 inputs: 4 images and their mirrors
    got = enc.encode(Chunk(x, y)).x
    np.testing.assert_allclose(got.astype(np.float32), expected.astype(np.float32), rtol=1e-3, atol=1e-4)
    assert calls[:3] == [32, 16, 8] and max(calls[3:]) == 8 and enc.piece == 4
    err = capsys.readouterr().err
    assert err.count("out of GPU memory") == 2 and err.strip().splitlines()[-1].endswith(
        "(--batch-size 4 avoids the retry)"
    )


def test_compiled_encoding_keeps_one_shape(latent_pixels, image_vae):
    """Compiled or on a GPU, every call of the autoencoder has the same batch shape (a short last piece is padded, so
    nothing is compiled or captured twice), and the padding leaves the stored latents as an unpadded encoding."""
    x, y = pixels(latent_pixels)
    x, y = x[:21], y[:21]
    expected = encoder(image_vae, batch_size=8).encode(Chunk(x, y)).x
    enc = encoder(image_vae, batch_size=8)
    enc.one_shape = True  # as compiled or on a GPU; torch.compile and the CUDA graphs are exercised by the GPU tests
    calls = fails_above(enc, 10**6)
    got = enc.encode(Chunk(x, y)).x
    assert calls == [16, 16, 16] and got.shape == expected.shape
    np.testing.assert_allclose(got.astype(np.float32), expected.astype(np.float32), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("sizes", [[], [7], [8, 5], [8, 8, 3], [8, 8, 8, 8, 1]])
def test_stream_gives_every_chunk_in_order(latent_pixels, image_vae, sizes):
    """The stream, which queues a chunk before collecting the one before it, gives each chunk's latents once, in
    order, as one chunk encoded alone; it times every chunk, and the pace leaves the first out."""
    x, y = pixels(latent_pixels)
    cuts = np.cumsum([0, *sizes])
    chunks = [Chunk(x[a:b], y[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]
    expected = [encoder(image_vae, batch_size=4).encode(c).x for c in chunks]
    enc = encoder(image_vae, batch_size=4)
    got = list(enc.stream(iter(chunks)))
    assert [len(c) for c in got] == sizes and len(enc.chunks) == len(sizes)
    for g, e, c in zip(got, expected, chunks):
        np.testing.assert_allclose(g.x.astype(np.float32), e.astype(np.float32), rtol=1e-3, atol=1e-4)
        assert np.array_equal(g.y, c.y)
    assert [n for n, *_ in enc.chunks] == sizes and all(s > 0 and 0 <= w <= s for _, s, w in enc.chunks)
    assert (enc.pace() is None) == (len(sizes) < 2)


def test_out_of_memory_on_one_sample_is_a_vae_error(latent_pixels, image_vae):
    """When even one sample does not fit, the encoder stops with a VaeError suggesting another device."""
    x, y = pixels(latent_pixels)
    enc = encoder(image_vae, batch_size=8)
    fails_above(enc, 0)
    with pytest.raises(VaeError, match="single sample.*--device cpu"):
        enc.encode(Chunk(x[:8], y[:8]))


def test_convert_with_vae_api_matches_cli(latent_images, image_vae, tmp_path):
    """The CLI and ConvertConfig write the same latents (the CLI passes --vae, --batch-size and --device through)."""
    out = tmp_path / "cli"
    r = convert_cli(
        "--source",
        "synthetic-images",
        "--limit",
        "96",
        "--format",
        "hdf5",
        "--output",
        str(out),
        "--vae",
        str(image_vae),
        "--device",
        "cpu",
        "--batch-size",
        "32",
    )
    assert r.exit_code == 0, r.output
    assert load_manifest(out)["digest"]["total"] == load_manifest(latent_images)["digest"]["total"]


RANKS_CONVERT = """
import sys, torch
from dataprep.cli import cli
cli(sys.argv[1:], standalone_mode=False)  # the command as typed under torchrun, in this process
if torch.distributed.is_initialized():  # left to the interpreter's shutdown, a gloo group can abort the rank there
    raise SystemExit("convert joined a process group and did not leave it")
"""


@pytest.mark.slow
def test_torchrun_ranks_write_the_same_dataset(image_vae, tmp_path):
    """Under torchrun with 2 ranks (gloo on the CPU) each rank encodes every other batch and rank 0 writes one
    dataset whose digest equals one process's; the other rank writes nothing, and each leaves the group it joined."""
    args = [
        "convert",
        "--source",
        "synthetic-images",
        "--limit",
        "100",
        "--vae",
        str(image_vae),
        "--batch-size",
        "16",
        "--format",
        "hdf5",
        "--device",
        "cpu",
        "--quiet",
    ]
    # one thread in every process: the CPU's convolutions round differently with another thread count, and a last
    # bit of one latent in fp16 differed between a 2-thread process and 1-thread ranks
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[2]), "OMP_NUM_THREADS": "1"}
    single = subprocess.run(
        [sys.executable, "-m", "dataprep", *args, "--output", str(tmp_path / "one")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert single.returncode == 0, single.stderr
    script = tmp_path / "ranks.py"
    script.write_text(RANKS_CONVERT)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            str(script),
            *args,
            "--output",
            str(tmp_path / "two"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    one, two = (json.loads((tmp_path / d / "manifest.json").read_text()) for d in ("one", "two"))
    assert two["latent"]["encoded"]["processes"] == 2 and one["latent"]["encoded"]["processes"] == 1
    assert two["digest"]["total"] == one["digest"]["total"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "ranks.py", "two"]


@pytest.mark.slow  # 8 s of CPU: diffusers' import twice and a conversion
def test_make_vae_gives_an_offline_autoencoder_and_a_cpu_conversion_says_its_time_first(tmp_path):
    """`dataprep make-vae PATH --shape tiny` writes an autoencoder `convert --vae PATH` loads with no network; on a CPU
    the conversion says its estimated time, from the first batch, before the rest is encoded; PATH is never replaced."""
    vae = tmp_path / "vae"
    made = CliRunner().invoke(cli, ["make-vae", str(vae), "--shape", "tiny"])
    assert made.exit_code == 0 and "random weights" in made.output and (vae / "config.json").is_file(), made.output
    again = CliRunner().invoke(cli, ["make-vae", str(vae)])
    assert again.exit_code == 2 and "already exists" in again.output
    args = [
        "convert",
        "--source",
        "synthetic-images",
        "--limit",
        "40",
        "--format",
        "hdf5",
        "--vae",
        str(vae),
        "--quiet",
    ]
    r = CliRunner().invoke(cli, [*args, "--device", "cpu", "--batch-size", "8", "--output", str(tmp_path / "d")])
    assert r.exit_code == 0, r.output
    said = [line for line in r.stderr.splitlines() if line.startswith("encode on a CPU: ")]
    assert len(said) == 1 and "over the first batch of 8: about" in said[0] and "for 40 samples" in said[0], r.stderr
