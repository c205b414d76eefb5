"""No NaN or infinity crosses the conversion boundary unnoticed: a clip holding one is a bad sample named with its file
and the time of the first bad frame; what is stored anyway (an older conversion, an edit) is named by `dataprep
verify` in every format, refused by the gpu loader at open and by the torch loader at the sample. Real spoken-digit
clips, real conversions, values written into the real files. (The autoencoder's side, weights and overflowing
latents, is in test_vae_checks.py.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from click.testing import CliRunner
from dataprep_helpers import FORMATS, read_all

from dataprep.cli import cli
from dataprep.digest import SampleDigest, file_sha256
from dataprep.finite import first_non_finite, non_finite
from loaders import LoaderError, build_loader

HALF_NAN = np.array([np.nan], np.float16).tobytes()


def convert_cli(*args: str):
    return CliRunner().invoke(cli, ["convert", "--quiet", "--workers", "1", *args])


def real_clips(fsdd_root: Path, folder: Path, n: int = 6) -> list[Path]:
    """The first n real spoken-digit clips, copied as float WAVs (a float WAV can hold NaN; PCM cannot)."""
    folder.mkdir(parents=True)
    out = []
    for src in sorted((fsdd_root / "recordings").glob("*.wav"))[:n]:
        x, rate = sf.read(src, dtype="float32")
        sf.write(folder / src.name, x, rate, subtype="FLOAT")
        out.append(folder / src.name)
    return out


def poison_clip(path: Path, value: float, at: int, channels: int = 1) -> None:
    x, rate = sf.read(path, dtype="float32", always_2d=True)
    x = np.repeat(x[:, :1], channels, axis=1)
    x[at] = value
    sf.write(path, x, rate, subtype="FLOAT")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_clip_holding_a_non_finite_sample_is_named(fsdd_root, tmp_path, value):
    """A float WAV with one NaN or infinite frame used to be converted, the NaN reaching the model's loss. Now it is a
    bad input file, named with the time and index of the frame; nothing is written."""
    clips = real_clips(fsdd_root, tmp_path / "in")
    poison_clip(clips[2], value, at=800)
    out = tmp_path / "out"
    r = convert_cli("--input", str(tmp_path / "in"), "--output", str(out), "--format", "hdf5")
    assert r.exit_code == 1, r.output
    said = f"bad input file {clips[2].name}: holds NaN or infinite values (a float WAV can hold them): 1 frame(s), "
    assert said in r.output and "the first at 0.100 s (frame 800)" in r.output, r.output
    assert not out.exists()


def test_clip_that_overflows_when_downmixed_is_named(fsdd_root, tmp_path):
    """Finite but huge stereo frames (3e38 in both channels) overflow to Inf when averaged to mono: named too."""
    clips = real_clips(fsdd_root, tmp_path / "in")
    poison_clip(clips[0], 3e38, at=40, channels=2)
    r = convert_cli("--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"), "--format", "hdf5")
    assert r.exit_code == 1 and "values so large that downmixing or resampling overflows" in r.output, r.output
    assert clips[0].name in r.output


def test_skip_leaves_the_non_finite_clip_out(fsdd_root, tmp_path):
    """--on-bad-file skip converts the other clips, lists the bad one in the manifest, and the result verifies."""
    clips = real_clips(fsdd_root, tmp_path / "in")
    poison_clip(clips[4], float("nan"), at=0)
    out = tmp_path / "out"
    args = ["--input", str(tmp_path / "in"), "--output", str(out), "--format", "hdf5,files", "--on-bad-file", "skip"]
    r = convert_cli(*args)
    assert r.exit_code == 0, r.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["count"] == 5 and [s["path"] for s in manifest["skipped"]] == [clips[4].name]
    assert "holds NaN" in manifest["skipped"][0]["error"]
    assert CliRunner().invoke(cli, ["verify", str(out)]).exit_code == 0


def test_encoder_names_the_sample_whose_latent_is_not_finite(audio_vae):
    """Through the encoder's API (no decoding check before it), a clip with one NaN frame gives a NaN latent: the
    stream of chunks stops at it, naming its index in the output (70: the second chunk's seventh) and its file."""
    from common.vae import VaeError, load_vae
    from dataprep.latents.encode import LatentEncoder
    from dataprep.sources import AudioSpec, build_source
    from dataprep.sources.base import Chunk

    spec = AudioSpec(clip_seconds=0.64)  # 64 mel frames: the autoencoder halves them twice
    source = build_source("synthetic-audio", None, split="train", limit=96, audio=spec)
    chunks = list(source.chunks(64, "error", 1))
    assert [len(c) for c in chunks] == [64, 32]
    chunks[1].x[6, 100] = np.nan
    named = [[Path(f"clip-{i + 64 * k}.wav") for i in range(len(c))] for k, c in enumerate(chunks)]
    chunks = [Chunk(c.x, c.y, c.length, names=names) for c, names in zip(chunks, named)]
    encoder = LatentEncoder(load_vae(audio_vae), "audio", (spec.num_samples,), spec, batch_size=32)
    stream = encoder.stream(iter(chunks))
    assert np.isfinite(next(stream).x).all()
    with pytest.raises(VaeError, match=r"^sample 70 \(clip-70.wav\): the autoencoder's latent holds NaN or Inf \(1 of"):
        next(stream)


# --- stored values -----------------------------------------------------------------------------------------------


STORED = [*FORMATS, "stream"]  # the formats the latent_images fixture writes


def poison_stored(data_dir: Path, fmt: str, k: int) -> None:
    """Write a float16 NaN over the first value of sample k where the format stores it, the file's size unchanged."""
    x, _, _ = read_all(data_dir, fmt)
    raw = x[k].tobytes()
    pattern = {
        "files": "files/**/*.npy",
        "hdf5": "data.h5",
        "ffcv": "data.beton",
        "dali": "dali/*.tar",
        "stream": "stream/*.bin",
    }[fmt]
    for path in sorted(data_dir.glob(pattern)):
        blob = bytearray(path.read_bytes())
        at = blob.find(raw)
        if at >= 0 and blob.find(raw, at + 1) < 0:
            blob[at : at + 2] = HALF_NAN
            path.write_bytes(bytes(blob))
            return
    raise AssertionError(f"sample {k} not found once, raw, in {fmt}")


def as_converted(data_dir: Path) -> None:
    """Make the manifest agree with the files as they are now (sizes, sha256, sample digest): what a conversion
    that stored the values as they are, before conversions refused non-finite latents, would have written."""
    path = data_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    for info in manifest["formats"].values():
        for f in info["files"]:
            f["bytes"], f["sha256"] = (data_dir / f["path"]).stat().st_size, file_sha256(data_dir / f["path"])
    digest = SampleDigest(manifest["digest"]["chunk_size"])
    x, y, _ = read_all(data_dir, next(iter(manifest["formats"])))
    from dataprep.sources.base import Chunk

    digest.update(Chunk(x, y))
    manifest["digest"] |= {k: v for k, v in digest.result().items() if k in ("total", "chunks")}
    path.write_text(json.dumps(manifest))


@pytest.mark.parametrize("fmt", STORED)
def test_verify_names_a_stored_nan_in_every_format(latent_images, tmp_path, fmt):
    """One NaN written into sample 5 of a format (file size unchanged): verify names the format and sample 5 as
    holding NaN, besides the hash mismatch."""
    data_dir = Path(shutil.copytree(latent_images, tmp_path / "data"))
    poison_stored(data_dir, fmt, 5)
    r = CliRunner().invoke(cli, ["verify", str(data_dir)])
    assert r.exit_code == 1 and f"{fmt}: sample 5 holds NaN or Inf" in r.output, r.output
    assert f"{fmt}: first mismatch: sample 5 differs" in r.output


def test_verify_refuses_nan_a_conversion_stored(latent_images, tmp_path):
    """A NaN the manifest agrees with (stored by a conversion before they were refused): every hash matches, and
    verify still fails, naming the sample in each format."""
    data_dir = Path(shutil.copytree(latent_images, tmp_path / "data"))
    for fmt in STORED:
        poison_stored(data_dir, fmt, 7)
    as_converted(data_dir)
    r = CliRunner().invoke(cli, ["verify", str(data_dir)])
    assert r.exit_code == 1, r.output
    assert "mismatch" not in r.output and "sha256" not in r.output, r.output
    for fmt in STORED:
        assert f"{fmt}: sample 7 holds NaN or Inf" in r.output, r.output


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_gpu_loader_refuses_a_stored_nan_at_open(latent_images, tmp_path, device):
    """The gpu loader has every sample on the device once: it finds the NaN there and names the sample."""
    data_dir = Path(shutil.copytree(latent_images, tmp_path / "data"))
    poison_stored(data_dir, "hdf5", 9)
    as_converted(data_dir)
    with pytest.raises(LoaderError, match="sample 9 holds NaN or Inf, which would make the loss NaN; run `dataprep"):
        build_loader("gpu", data_dir, batch_size=4, device=device)


@pytest.mark.parametrize("workers", [0, 1])
def test_torch_loader_names_the_file_holding_nan(latent_images, tmp_path, workers):
    """The torch loader reads each sample's .npy on the host: a NaN in one is named with its file."""
    data_dir = Path(shutil.copytree(latent_images, tmp_path / "data"))
    poison_stored(data_dir, "files", 3)
    as_converted(data_dir)
    loader = build_loader("torch", data_dir, batch_size=8, workers=workers, shuffle=False)
    with pytest.raises(LoaderError, match=r"files/00000/00000003\.npy: holds NaN or Inf"):
        for _ in loader:
            pass


def test_non_finite_finds_nan_and_inf_in_every_float_dtype():
    """The vectorized check: float16 by its exponent bits, other floats by isfinite, integers never."""
    for dtype in (np.float16, np.float32, np.float64):
        x = np.zeros((6, 3, 4), dtype)
        assert first_non_finite(x) is None
        x[4, 2, 3], x[5, 0, 0] = np.inf, -np.inf
        assert first_non_finite(x) == 4 and non_finite(x).tolist() == [False] * 4 + [True, True]
        x[1, 1, 1] = np.nan
        assert first_non_finite(x) == 1
        x[:] = np.finfo(dtype).max  # the largest finite value is finite
        assert first_non_finite(x) is None
    assert first_non_finite(np.full((3, 2), 255, np.uint8)) is None
