"""The autoencoder's configuration values, weights and identity, checked wherever gpufeed loads one: a value it
cannot use is named with its file and key, damaged weights are refused before any encoding, and latents are decoded
only through the autoencoder that encoded them. Real tiny AutoencoderKLs (latent_helpers), edited as a user or a
damaged download would leave them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from latent_helpers import SCALING

from common.vae import VaeError, check_vae_identity, load_vae
from dataprep.cli import cli


def edited_vae(image_vae: Path, tmp_path: Path, **values) -> Path:
    """A copy of the tiny image autoencoder whose config.json has `values` (a value `...` removes the key)."""
    vae = Path(shutil.copytree(image_vae, tmp_path / "vae"))
    config = json.loads((vae / "config.json").read_text())
    for key, value in values.items():
        config.pop(key) if value is ... else config.__setitem__(key, value)
    (vae / "config.json").write_text(json.dumps(config))  # NaN and Infinity written as Python's json writes them
    return vae


def reweighted(vae: Path, change) -> None:
    """Load the autoencoder in `vae`, apply `change(model)` and save it back in place."""
    from diffusers import AutoencoderKL

    model = AutoencoderKL.from_pretrained(vae)
    with torch.no_grad():
        change(model)
    model.save_pretrained(vae)


def convert_cli(*args: str):
    return CliRunner().invoke(cli, ["convert", "--quiet", "--workers", "1", "--device", "cpu", *args])


def nothing_written(out: Path) -> bool:
    return not out.exists() and not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.tmp")]


# --- configuration values ------------------------------------------------------------------------------------------

BAD = [float("nan"), float("inf"), float("-inf"), None, [0.5], "abc", "0.5", True, {"value": 0.5}]
SCALING_BAD = [*BAD, 0, 0.0, -0.0]
SHIFT_BAD = [v for v in BAD if v is not None]  # null is no shift: SD's autoencoders have none
COUNT_BAD = [0, -3, 3.0, "3", True, None, [3]]
WIDTHS_BAD = [[], [8, "16"], [8, 0], [8, 16.0], 8, "8,16", None]


@pytest.mark.parametrize(
    ("key", "value", "must"),
    [("scaling_factor", v, "a finite non-zero number") for v in SCALING_BAD]
    + [("shift_factor", v, "a finite number, or null for none") for v in SHIFT_BAD]
    + [(k, v, "a positive integer") for k in ("in_channels", "latent_channels") for v in COUNT_BAD]
    + [("block_out_channels", v, "a non-empty list of positive integers") for v in WIDTHS_BAD],
    ids=repr,
)
def test_config_value_gpufeed_cannot_use_is_named(image_vae, tmp_path, key, value, must):
    """Each value gpufeed reads from config.json, set to something it cannot use, is a VaeError naming the file,
    the key and what it must be: not a TypeError from inside diffusers, nor latents that are all NaN or zero."""
    vae = edited_vae(image_vae, tmp_path, **{key: value})
    with pytest.raises(VaeError) as e:
        load_vae(vae)
    assert str(e.value).startswith(f"{vae / 'config.json'}: {key} is "), e.value
    assert str(e.value).endswith(f"must be {must}"), e.value


def test_bad_scaling_factor_through_the_cli(image_vae, tmp_path):
    """`dataprep convert --vae` with scaling_factor NaN: exit 1, one line naming file and key, nothing written."""
    vae = edited_vae(image_vae, tmp_path, scaling_factor=float("nan"))
    out = tmp_path / "out"
    r = convert_cli("--source", "synthetic-images", "--limit", "8", "--output", str(out), "--vae", str(vae))
    assert r.exit_code == 1, r.output
    assert f"{vae / 'config.json'}: scaling_factor is nan; must be a finite non-zero number" in r.output
    assert "Traceback" not in r.output and nothing_written(out)


USABLE = [
    ({"shift_factor": None}, SCALING, 0.0),  # SD's autoencoders: no shift
    ({"shift_factor": ...}, SCALING, 0.0),  # an older config without the key
    ({"scaling_factor": ...}, 0.18215, 0.1),  # diffusers' default
    ({"scaling_factor": 2, "shift_factor": -1}, 2.0, -1.0),  # ints are numbers
]


@pytest.mark.parametrize(("values", "scaling", "shift"), USABLE)
def test_usable_config_values_are_accepted(image_vae, tmp_path, values, scaling, shift):
    """What diffusers' own autoencoders hold passes: no shift (null or absent), a default scaling, integers."""
    vae = load_vae(edited_vae(image_vae, tmp_path, **values))
    assert (vae.scaling_factor, vae.shift_factor) == (scaling, shift)


# --- weights ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_autoencoder_with_a_non_finite_weight_is_refused(image_vae, tmp_path, value):
    """One NaN (or Inf) weight made every latent NaN, and verify accepted them: now the autoencoder is refused at
    load, naming the weight, before any sample is read; nothing is written."""
    vae = Path(shutil.copytree(image_vae, tmp_path / "vae"))
    reweighted(vae, lambda m: m.encoder.conv_in.weight.view(-1)[5].fill_(value))
    out = tmp_path / "out"
    r = convert_cli("--source", "synthetic-images", "--limit", "8", "--output", str(out), "--vae", str(vae))
    assert r.exit_code == 1, r.output
    assert "weight encoder.conv_in.weight (1 of 216 values) holds NaN or Inf" in r.output, r.output
    assert "Traceback" not in r.output and nothing_written(out)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_latents_that_overflow_float16_are_refused_naming_the_file(image_vae, tmp_path, device):
    """An autoencoder whose means overflow float16 (beyond 65504: Inf once stored): the conversion stops at the
    first such sample, naming its index and its file, and writes nothing. On a GPU the check runs there, in the
    graphed bf16 path, and is read back with the latents."""
    from dataprep_helpers import random_images, stored_order
    from PIL import Image

    vae = Path(shutil.copytree(image_vae, tmp_path / "vae"))
    reweighted(vae, lambda m: m.quant_conv.bias[:4].fill_(1e6))
    folder = tmp_path / "in" / "cat"
    folder.mkdir(parents=True)
    for i, im in enumerate(random_images(6)):
        Image.fromarray(im).save(folder / f"{i}.png")
    out = tmp_path / "out"
    args = ["--input", str(tmp_path / "in"), "--output", str(out), "--vae", str(vae), "--batch-size", "4"]
    r = CliRunner().invoke(cli, ["convert", "--quiet", "--workers", "1", "--device", device, *args])
    assert r.exit_code == 1, r.output
    first = stored_order(list(folder.iterdir()))[0]
    assert f"sample 0 ({first}): the autoencoder's latent holds NaN or Inf (6 of the 6 samples" in r.output
    assert "Traceback" not in r.output and nothing_written(out)


# --- identity --------------------------------------------------------------------------------------------------------


def test_identity_check_passes_the_same_autoencoder_anywhere(image_vae, latent_images, tmp_path):
    """The autoencoder that encoded a dataset passes, from its own directory or a copy elsewhere (same sha256)."""
    latent = json.loads((latent_images / "manifest.json").read_text())["latent"]
    check_vae_identity(load_vae(image_vae), latent)
    check_vae_identity(load_vae(shutil.copytree(image_vae, tmp_path / "copy")), latent)


def test_identity_check_names_both_autoencoders(image_vae, latent_images, tmp_path):
    """Another autoencoder (one bias changed) is refused naming both names and both hashes; a manifest entry without
    an autoencoder is refused too."""
    latent = json.loads((latent_images / "manifest.json").read_text())["latent"]
    other = Path(shutil.copytree(image_vae, tmp_path / "other"))
    reweighted(other, lambda m: m.decoder.conv_out.bias.add_(0.01))
    vae = load_vae(other)
    with pytest.raises(VaeError) as e:
        check_vae_identity(vae, latent, "DATA")
    message = str(e.value)
    assert (
        f"{other.resolve()} (sha256 {vae.identity['sha256'][:16]}...) is not the autoencoder that encoded DATA: "
        in (message)
    )
    assert f"{latent['vae']['name']} (sha256 {latent['vae']['sha256'][:16]}...)" in message, message
    with pytest.raises(VaeError, match="encoded the data: None"):
        check_vae_identity(vae, {"of": "image"})


def test_sample_grid_refuses_another_autoencoder_of_the_same_name(image_vae, tmp_path, capsys):
    """The manifest names the autoencoder by path; another one saved there since (same shapes, other weights) would
    decode the grids into wrong images without a word. The grid shows the 16x16 latent channels and says why, once,
    naming both hashes; training goes on."""
    from PIL import Image
    from test_training_latent import dit_cfg

    from dataprep.convert import ConvertConfig, convert
    from training.loop import main

    vae = Path(shutil.copytree(image_vae, tmp_path / "vae"))
    config = dict(source="synthetic-images", limit=32, formats=("hdf5",), device="cpu", progress=False, workers=1)
    convert(ConvertConfig(output=tmp_path / "data", vae=str(vae), **config))
    reweighted(vae, lambda m: m.decoder.conv_out.bias.add_(0.5))
    main(dit_cfg(tmp_path / "data", tmp_path / "run", steps=4, sample_every=2, sample_count=4, sample_steps=3))
    with Image.open(tmp_path / "run" / "samples" / "step0000004.png") as im:
        assert im.size == (2 * 16 + 3 * 2, 2 * 16 + 3 * 2)
    err = capsys.readouterr().err
    assert err.count("samples: showing latent channels, not images") == 1, err
    assert "is not the autoencoder that encoded these latents" in err, err
