"""`train --out`: a new or empty folder, or a run folder that train wrote (resumed as before); a folder holding anyone
else's files, or one that is, holds or lies inside the data directory, is refused in one line with the fix, and
nothing in it changes. Real runs of the tiny model on CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dataprep.convert import ConvertConfig, convert
from training.cli import train

OPTS = "--loader hdf5 --model tiny --batch-size 8 --precision fp32 --device cpu --workers 0 --no-pin-memory"
OPTS += " --sample-every 0 --no-progress --log-every 2 --timing-warmup 1 --no-compile-cache"


def _train(data: Path, out: Path, *extra: str):
    return CliRunner().invoke(train, ["--data", str(data), "--out", str(out), *OPTS.split(), *extra])


def _tree(root: Path) -> dict[str, bytes]:
    """Every file below root with its bytes: what a refused run must leave as it was."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def own_images(tmp_path) -> Path:
    """32 synthetic images in HDF5, a dataset of this test's own (a run into it must not touch a shared one)."""
    out = tmp_path / "data"
    cfg = ConvertConfig(output=out, source="synthetic-images", limit=32, formats=("hdf5",), workers=1, progress=False)
    convert(cfg)
    return out


@pytest.mark.parametrize("case", ["thesis", "summary", "metrics"])
def test_someone_elses_folder_is_refused(own_images, tmp_path, case):
    """--out a folder holding a user's thesis.tex, their own summary.json, or their own metrics.jsonl: exit 1 with
    one line saying why and what to do; the folder is byte for byte as it was (no summary overwritten, no line
    appended)."""
    out = tmp_path / "mine"
    out.mkdir()
    name, content = {
        "thesis": ("thesis.tex", "years of work"),
        "summary": ("summary.json", json.dumps({"title": "my experiment", "steps": 3})),
        "metrics": ("metrics.jsonl", json.dumps({"epoch": 1, "accuracy": 0.9}) + "\n"),
    }[case]
    (out / name).write_text(content)
    before = _tree(out)
    r = _train(own_images, out, "--steps", "2")
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1, r.output
    reason = f"it holds {name}, which train does not write" if case == "thesis" else f"its {name} is not one that"
    assert f"{out}: not a run folder: " in r.output and reason in r.output and "Choose another --out" in r.output
    assert _tree(out) == before


@pytest.mark.parametrize("where, how", [("data", "is"), ("data/run", "lies inside"), (".", "holds")])
def test_out_never_is_holds_or_lies_inside_the_data(own_images, tmp_path, where, how):
    """--out the data directory, a folder inside it, or the folder holding it: exit 1 naming both paths, the
    relation and the fix; the data is unchanged and no run folder was made."""
    out = tmp_path / where
    before = _tree(own_images)
    r = _train(own_images, out, "--steps", "2")
    assert r.exit_code == 1, r.output
    assert f"{out}: --out {how} the data directory ({own_images})" in r.output and "choose an --out outside" in r.output
    assert (
        _tree(own_images) == before and not (own_images / "run").exists() and not (tmp_path / "metrics.jsonl").exists()
    )


def test_a_run_folder_is_trains_own(own_images, tmp_path):
    """An empty folder takes a run; the run's folder (checkpoint, metrics, summary, sample grids, profiler tables,
    TensorBoard events) is taken again by --resume; a file of the user's put into it makes it someone else's."""
    out = tmp_path / "run"
    out.mkdir()
    extra = ["--ckpt-every", "2", "--sample-every", "2", "--sample-count", "4", "--sample-steps", "2"]
    r = _train(own_images, out, "--steps", "4", "--profile", "--tensorboard", *extra)
    assert r.exit_code == 0, r.output
    assert {"ckpt.pt", "metrics.jsonl", "summary.json", "samples", "profile", "tensorboard"} <= set(
        p.name for p in out.iterdir()
    )
    from bench.records.provenance import check

    assert check(json.loads((out / "summary.json").read_text()), "summary.json", tmp_path) == []  # where it ran
    r = _train(own_images, out, "--steps", "6", "--resume", "--tensorboard", *extra)
    assert r.exit_code == 0, r.output
    (out / "notes.txt").write_text("mine")
    before = _tree(out)
    r = _train(own_images, out, "--steps", "8", "--resume", *extra)
    assert r.exit_code == 1 and "it holds notes.txt, which train does not write" in r.output, r.output
    assert _tree(out) == before
