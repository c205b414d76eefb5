"""Conversion uses the cores it may use, and its output does not depend on how many it uses."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from click.testing import CliRunner
from dataprep_helpers import FORMATS, random_images, read_all
from PIL import Image

from dataprep.cli import cli
from dataprep.convert import ConvertConfig


def test_workers_default_to_the_cores_available(tmp_path):
    """--workers defaults to the cores this process may run on (its affinity), not the machine's count."""
    assert ConvertConfig(output=tmp_path).workers == len(os.sched_getaffinity(0))
    r = CliRunner().invoke(cli, ["convert", "--help"])
    assert "the cores this process may use" in r.output


@pytest.mark.slow
def test_output_is_the_same_for_1_and_3_workers(tmp_path):
    """700 images (several decoding and encoding tasks, a partial last one) converted with 1 and with 3 workers:
    files, HDF5 and DALI are byte-identical (same sha256 per file), FFCV holds the same samples (its writer places
    pages in the order its processes finish, so only its bytes may differ), and the sample digests agree."""
    x = random_images(700, seed=11, size=8)
    for i, img in enumerate(x):
        (tmp_path / "in" / f"c{i % 3}").mkdir(parents=True, exist_ok=True)
        Image.fromarray(img).save(tmp_path / "in" / f"c{i % 3}" / f"{i:04d}.png")
    manifests = {}
    for workers in (1, 3):
        out = tmp_path / f"o{workers}"
        r = CliRunner().invoke(
            cli,
            ["convert", "--input", str(tmp_path / "in"), "--output", str(out), "--quiet", "--workers", str(workers)],
        )
        assert r.exit_code == 0, r.output
        manifests[workers] = json.loads((out / "manifest.json").read_text())
    one, three = manifests[1], manifests[3]
    assert one["digest"] == three["digest"] and one["count"] == 700
    for fmt in ("files", "hdf5", "dali"):
        assert one["formats"][fmt] == three["formats"][fmt], fmt
    for fmt in FORMATS:
        a, b = read_all(tmp_path / "o1", fmt), read_all(tmp_path / "o3", fmt)
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]), fmt


def _folder(root, n: int, size: int = 8):
    for i, img in enumerate(random_images(n, seed=3, size=size)):
        (root / f"c{i % 2}").mkdir(parents=True, exist_ok=True)
        Image.fromarray(img).save(root / f"c{i % 2}" / f"{i:04d}.png")
    return root


@pytest.mark.slow
def test_timings_say_where_the_time_went(tmp_path):
    """--timings prints the stages; the manifest keeps them: decoding and encoding as CPU seconds of the workers, FFCV's
    import and writer as seconds of its helper. The PNG files sit in one folder per 256 samples (one per encoding
    task), so worker processes do not create files in one directory together."""
    out = tmp_path / "out"
    r = CliRunner().invoke(
        cli,
        [
            "convert",
            "--input",
            str(_folder(tmp_path / "in", 300)),
            "--output",
            str(out),
            "--quiet",
            "--workers",
            "2",
            "--timings",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "import FFCV" in r.stderr and "total" in r.stderr
    timings = json.loads((out / "manifest.json").read_text())["timings"]
    stages = timings["stages"]
    assert timings["workers"] == 2 and timings["wall_s"] > 0
    for name, kind in [
        ("decode (CPU-s over the workers)", "cpu"),
        ("files: encode (CPU-s over the workers)", "cpu"),
        ("ffcv: import FFCV", "wall"),
        ("ffcv: FFCV's writer", "wall"),
    ]:
        assert stages[name]["kind"] == kind and stages[name]["seconds"] > 0, name
    folders = sorted(p.name for p in (out / "files").iterdir() if p.is_dir())
    assert folders == ["00000", "00001"] and len(list((out / "files" / "00001").iterdir())) == 300 - 256


def test_a_failed_conversion_leaves_no_helper_running(tmp_path):
    """FFCV's helper starts before the input is read; a conversion that then fails (a corrupt file) ends it."""
    import multiprocessing as mp

    src = _folder(tmp_path / "in", 20)
    (src / "c0" / "0002.png").write_bytes(b"not a png")
    r = CliRunner().invoke(
        cli,
        [
            "convert",
            "--input",
            str(src),
            "--output",
            str(tmp_path / "out"),
            "--quiet",
            "--workers",
            "2",
            "--format",
            "ffcv",
        ],
    )
    assert r.exit_code != 0 and "0002.png" in r.output
    assert not [p for p in mp.active_children() if p.name == "gpufeed-ffcv-writer"]
    assert not (tmp_path / "out").exists()
