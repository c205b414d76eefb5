"""Every manifest value that changes what the loaders deliver is covered by a digest recorded at conversion:
`dataprep verify` names the field that was edited, and every loader refuses to open the directory, pointing to
verify. Manifests written before the digests existed still load, and verify says what it cannot check. Real
conversions (latents of a tiny autoencoder, resized images, synthetic audio), edited as a user or a script would."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from dataprep.cli import cli
from dataprep.convert import ConvertConfig, convert
from dataprep.fields import field_digests
from loaders import BACKENDS, LoaderError, build_loader

QUIET = {"workers": 1, "progress": False}


@pytest.fixture(scope="module")
def resized_images(tmp_path_factory) -> Path:
    """12 random 24x24 images in two classes, converted with --size 16 (the manifest records the resize)."""
    from dataprep_helpers import random_images

    root = tmp_path_factory.mktemp("resized")
    for i, im in enumerate(random_images(12, size=24)):
        folder = root / "in" / ("cat" if i % 2 else "dog")
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(im).save(folder / f"{i}.png")
    convert(ConvertConfig(output=root / "out", input=root / "in", formats=("hdf5", "files"), size=16, **QUIET))
    return root / "out"


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("clips") / "out"
    convert(ConvertConfig(output=out, source="synthetic-audio", limit=8, formats=("hdf5",), **QUIET))
    return out


def copy(src: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(src, tmp_path / "data"))


def edit(data_dir: Path, change) -> dict:
    path = data_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))
    return manifest


def verify_cli(data_dir: Path):
    return CliRunner().invoke(cli, ["verify", str(data_dir)])


def refused_at_open(data_dir: Path, backend: str = "hdf5") -> str:
    with pytest.raises(LoaderError) as e:
        build_loader(backend, data_dir, batch_size=4, workers=0)
    return str(e.value)


def test_conversion_records_a_digest_per_field(latent_images, clips, resized_images):
    """The digests cover what the loaders read (count, classes, shape, dtype, kind, audio, resize, every latent
    value) and not where the autoencoder was loaded from; they equal those of the manifest as written."""
    for data_dir in (latent_images, clips, resized_images):
        manifest = json.loads((data_dir / "manifest.json").read_text())
        fields = manifest["digest"]["fields"]
        assert fields == field_digests(manifest)
        assert {"kind", "sample_shape", "dtype", "count", "classes"} <= set(fields)
    latent = json.loads((latent_images / "manifest.json").read_text())["digest"]["fields"]
    covered = ["latent.scaling_factor", "latent.shift_factor", "latent.views", "latent.shape", "latent.of"]
    assert {*covered, "latent.vae.sha256", "audio", "resize"} <= set(latent)  # null: a value of its own
    assert "latent.vae.name" not in latent
    audio = json.loads((clips / "manifest.json").read_text())["digest"]["fields"]
    assert {"audio.sample_rate", "audio.clip_seconds", "audio.channels"} <= set(audio)
    assert "resize.size" in json.loads((resized_images / "manifest.json").read_text())["digest"]["fields"]


LATENT_EDITS = [
    ("count", lambda m: m.__setitem__("count", 95), "count (now 95) differs"),
    ("classes", lambda m: m["classes"].__setitem__(0, "zebra"), "classes (now"),
    ("more classes", lambda m: m["classes"].append("zebra"), "classes (now"),
    ("kind", lambda m: m.__setitem__("kind", "image"), 'kind (now "image") differs'),
    ("scaling", lambda m: m["latent"].__setitem__("scaling_factor", 1000), "latent.scaling_factor (now 1000) differs"),
    ("shift", lambda m: m["latent"].__setitem__("shift_factor", 0.2), "latent.shift_factor (now 0.2) differs"),
    ("views", lambda m: m["latent"]["views"].reverse(), "latent.views (now"),
    ("of", lambda m: m["latent"].__setitem__("of", "audio"), 'latent.of (now "audio") differs'),
    ("vae", lambda m: m["latent"]["vae"].__setitem__("sha256", "0" * 64), "latent.vae.sha256 (now"),
    ("vae scaling", lambda m: m["latent"]["vae"].__setitem__("scaling_factor", 9.0), "latent.vae.scaling_factor"),
    ("input", lambda m: m["latent"]["input"].__setitem__("height", 64), "latent.input.height (now 64) differs"),
    ("added", lambda m: m["latent"].__setitem__("extra", 1), "latent.extra was not there at conversion"),
    ("removed", lambda m: m["latent"].pop("stored"), "latent.stored is missing (the conversion recorded it)"),
    ("audio", lambda m: m.__setitem__("audio", {"sample_rate": 8000}), "audio (now an object) differs"),
]


@pytest.mark.parametrize(("change", "said"), [e[1:] for e in LATENT_EDITS], ids=[e[0] for e in LATENT_EDITS])
def test_an_edited_latent_manifest_is_named_by_verify_and_refused_by_the_loaders(latent_images, tmp_path, change, said):
    """Each edit used to pass verify (the sample digest does not cover the manifest's values) while the loaders
    delivered other values (scaling 1000: values near 50,000) or refused with a hint to run verify, which passed.
    Now verify fails naming the field, and the loader refuses at open, naming it and pointing to verify."""
    data_dir = copy(latent_images, tmp_path)
    edit(data_dir, change)
    r = verify_cli(data_dir)
    assert r.exit_code == 1 and f"manifest.json: {said}" in r.output, r.output
    message = refused_at_open(data_dir)
    assert said in message and f"dataprep verify {data_dir}" in message, message


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_scaling_edited_to_1000_stops_every_loader(latent_images, tmp_path, backend):
    """The edit the loaders delivered silently (values 2,000 times too large): every backend refuses it at open."""
    data_dir = copy(latent_images, tmp_path)
    edit(data_dir, lambda m: m["latent"].__setitem__("scaling_factor", 1000.0))
    assert "latent.scaling_factor (now 1000.0) differs from what was converted" in refused_at_open(data_dir, backend)


OTHER_EDITS = [
    ("sample_rate", "clips", lambda m: m["audio"].__setitem__("sample_rate", 8000), "audio.sample_rate (now 8000)"),
    ("clip_seconds", "clips", lambda m: m["audio"].__setitem__("clip_seconds", 2.0), "audio.clip_seconds (now 2.0)"),
    ("resize", "resized_images", lambda m: m["resize"].__setitem__("size", 32), "resize.size (now 32) differs"),
    ("no resize", "resized_images", lambda m: m.__setitem__("resize", None), "resize (now null) differs"),
    ("dtype", "resized_images", lambda m: m.__setitem__("dtype", "float16"), 'dtype (now "float16") differs'),
    ("shape", "resized_images", lambda m: m.__setitem__("sample_shape", [16, 16, 4]), "sample_shape (now [16, 16, 4])"),
]


@pytest.mark.parametrize(("dataset", "change", "said"), [e[1:] for e in OTHER_EDITS], ids=[e[0] for e in OTHER_EDITS])
def test_edited_audio_resize_shape_and_dtype_are_named(request, tmp_path, dataset, change, said):
    """Audio's rate (the loaders' mel depends on it), the resize, the sample shape and dtype: named the same way."""
    data_dir = copy(request.getfixturevalue(dataset), tmp_path)
    edit(data_dir, change)
    r = verify_cli(data_dir)
    assert r.exit_code == 1 and said in r.output, r.output
    assert said in refused_at_open(data_dir)


def test_moved_autoencoder_may_be_renamed(latent_images, tmp_path):
    """latent.vae.name is where the autoencoder was loaded from; data moved to another machine may point it to the
    copy there (its sha256, covered, says it is the same one): verify passes, the loaders open."""
    data_dir = copy(latent_images, tmp_path)
    edit(data_dir, lambda m: m["latent"]["vae"].__setitem__("name", "/elsewhere/vae"))
    r = verify_cli(data_dir)
    assert r.exit_code == 0 and "warning" not in r.output, r.output
    build_loader("hdf5", data_dir, batch_size=4, workers=0).close()


def test_manifest_without_field_digests_still_loads_and_verify_says_so(latent_images, tmp_path):
    """A directory converted before the field digests existed: the loaders open it, verify passes with a warning
    that its fields cannot be checked and the advice to convert again (an edit there goes unnoticed, as before)."""
    data_dir = copy(latent_images, tmp_path)
    edit(data_dir, lambda m: m["digest"].pop("fields"))
    r = verify_cli(data_dir)
    assert r.exit_code == 0, r.output
    assert "warning: this manifest records no digests of its fields" in r.stderr, r.stderr
    assert "convert the data again to have them checked" in r.stderr
    with build_loader("hdf5", data_dir, batch_size=4, workers=0, shuffle=False, augment=False) as loader:
        assert np.isfinite(next(iter(loader)).x.numpy()).all()


def test_fresh_conversion_verifies_without_warning(latent_images):
    r = verify_cli(latent_images)
    assert r.exit_code == 0 and "matches the manifest" in r.output and not r.stderr, r.output


@pytest.mark.parametrize("fields", [[], "abc", {"count": 5}])
def test_damaged_field_digests_are_refused(latent_images, tmp_path, fields):
    """digest.fields that is not an object of digests fails verify and the loaders' open check."""
    data_dir = copy(latent_images, tmp_path)
    edit(data_dir, lambda m: m["digest"].__setitem__("fields", fields))
    r = verify_cli(data_dir)
    assert r.exit_code == 1 and "manifest.json: digest.fields is not an object of sha256 digests" in r.output
    assert "digest.fields is not an object" in refused_at_open(data_dir)


# --- values the loaders cannot use, whatever the digests say ---------------------------------------------------------


SCALING_SHOWN = [
    (float("nan"), "NaN"),
    (float("inf"), "Infinity"),
    (0, "0"),
    (0.0, "0.0"),
    (None, "null"),
    ("abc", '"abc"'),
    (True, "true"),
    ([1], "[1]"),
]
SHIFT_SHOWN = [(float("nan"), "NaN"), (float("-inf"), "-Infinity"), (None, "null"), ("0", '"0"')]


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [("scaling_factor", v, s) for v, s in SCALING_SHOWN] + [("shift_factor", v, s) for v, s in SHIFT_SHOWN],
)
def test_manifest_factor_the_loaders_cannot_use_is_named(latent_images, tmp_path, key, value, shown):
    """latent.scaling_factor NaN, Infinity, 0, null, "abc", true or a list (and shift_factor non-finite or null):
    `dataprep info` and every loader refuse the manifest naming the key, before any value is delivered."""
    data_dir = copy(latent_images, tmp_path)
    edit(data_dir, lambda m: m["latent"].__setitem__(key, value))
    must = "a finite non-zero number" if key == "scaling_factor" else "a finite number"
    said = f"latent.{key} is {shown}; must be {must}"
    r = CliRunner().invoke(cli, ["info", str(data_dir)])
    assert r.exit_code == 1 and said in r.output and "Traceback" not in r.output, r.output
    assert said in refused_at_open(data_dir)
