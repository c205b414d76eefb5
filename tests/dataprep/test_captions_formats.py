"""Captions stored in every format (files, hdf5, ffcv, dali, stream), read back equal, checked by `verify` against
their own digest, and their length distribution shown by `dataprep info`."""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import pytest
from click.testing import CliRunner
from dataprep_helpers import stored_order

from common.atomic import write_json
from dataprep.cli import cli
from dataprep.formats import module
from dataprep.manifest import load_manifest
from dataprep.sources.files import list_files
from dataprep.verify import verify

FORMATS = ("files", "hdf5", "ffcv", "dali", "stream")
# what captions hold in the wild: commas and quotes (CSV), non-ASCII, a newline, an empty one (a zero-byte field)
CAPTIONS = ['a cat, "sitting"', "un chat à Paris ☕", "two\nlines", "", "x" * 300, "a dog"]


def convert(src: Path, out: Path, *extra: str):
    args = ["convert", "--input", str(src), "--output", str(out), "--format", ",".join(FORMATS), "--quiet"]
    return CliRunner().invoke(cli, [*args, "--workers", "1", *extra])


def captions_in(out: Path, fmt: str) -> list[str]:
    chunks = module(fmt).read_chunks(out, load_manifest(out), 5)  # 5: chunks that cut across the samples
    return [t for c in chunks for t in c.text]


@pytest.fixture(scope="module")
def captioned(cifar_jpg_root, tmp_path_factory) -> tuple[Path, list[str]]:
    """12 real JPEGs with caption files, converted into every format; the captions in stored order."""
    root = tmp_path_factory.mktemp("captioned")
    (root / "in").mkdir()
    images = [Path(shutil.copy(p, root / "in")) for p in list_files(cifar_jpg_root / "train" / "dog")[:12]]
    for k, p in enumerate(images):
        p.with_suffix(".txt").write_text(CAPTIONS[k % len(CAPTIONS)])
    r = convert(root / "in", root / "out")
    assert r.exit_code == 0, r.output
    truth = {p: CAPTIONS[k % len(CAPTIONS)].strip() for k, p in enumerate(images)}
    return root / "out", [truth[p] for p in stored_order(images)]


@pytest.mark.parametrize("fmt", FORMATS)
def test_captions_round_trip(captioned, fmt):
    """Each format gives back every caption, byte for byte, in the stored order."""
    out, truth = captioned
    assert captions_in(out, fmt) == truth


def test_verify_passes_and_info_shows_lengths(captioned):
    """verify finds nothing wrong; the manifest lists txt in the schema and info the captions' length spread."""
    out, truth = captioned
    assert verify(out) == []
    m = load_manifest(out)
    assert "txt" in m["schema"] and m["captions"]["empty"] == truth.count("")
    assert m["captions"]["chars"]["max"] == max(map(len, truth)) == 300
    r = CliRunner().invoke(cli, ["info", str(out)])
    assert r.exit_code == 0 and "captions: min / median / p95 / max: 0 / " in r.output, r.output


def test_verify_names_an_edited_caption(captioned, tmp_path):
    """A caption changed in data.h5 after conversion: verify names hdf5 and the samples whose captions differ."""
    out = tmp_path / "copy"
    shutil.copytree(captioned[0], out)
    with h5py.File(out / "data.h5", "r+") as f:
        f["txt"][3] = "an edited caption"
    problems = verify(out)
    assert "hdf5: captions of samples 0..11 differ from the manifest digest" in problems, problems


def test_verify_names_an_edited_caption_statistic(captioned, tmp_path):
    """The manifest's caption statistics edited: verify names the field, as for every other field."""
    out = tmp_path / "copy"
    shutil.copytree(captioned[0], out)
    m = load_manifest(out)
    m["captions"]["chars"]["max"] = 3
    write_json(out / "manifest.json", m)
    assert any(p.startswith("manifest.json: captions.chars.max") for p in verify(out)), verify(out)


@pytest.mark.slow  # ~10 s: a second conversion into every format, FFCV's included
def test_clips_with_templates_in_every_format(fsdd_root, tmp_path):
    """Spoken digits captioned from their labels: every format gives back the same captions (audio's index.csv
    holds the length before the caption), and verify passes."""
    (tmp_path / "in").mkdir()
    for p in list_files(fsdd_root / "recordings")[:10]:
        shutil.copy(p, tmp_path / "in")
    r = convert(tmp_path / "in", tmp_path / "out", "--caption-template", "someone says {label}")
    assert r.exit_code == 0, r.output
    m = load_manifest(tmp_path / "out")
    y = [int(v) for c in module("hdf5").read_chunks(tmp_path / "out", m, 64) for v in c.y]
    truth = [f"someone says {m['classes'][k]}" for k in y]
    assert all(captions_in(tmp_path / "out", fmt) == truth for fmt in FORMATS)
    assert verify(tmp_path / "out") == []


def test_open_checks_accept_captioned_layouts(captioned):
    """The layout checks the loaders run at open pass on captioned data (hdf5's txt, the .beton's text field, the
    DALI index's txt members of differing sizes)."""
    from dataprep.formats import dali, ffcv_tables, hdf5

    out, m = captioned[0], load_manifest(captioned[0])
    assert [hdf5.check_layout(out, m), ffcv_tables.check_tables(out, m), dali.check_shards(out, m)] == [None] * 3
