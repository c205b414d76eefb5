"""`--overwrite` replaces only what dataprep wrote, and never the input; an interrupted publish (a real SIGKILL between
its two renames) is completed or rolled back by the next conversion, never deleted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from dataprep_helpers import make_imagefolder, random_images
from PIL import Image

from dataprep.cli import cli
from dataprep.manifest import load_manifest
from dataprep.verify import verify

REPO = Path(__file__).resolve().parents[2]


def _convert(*args: str):
    return CliRunner().invoke(cli, ["convert", "--quiet", "--workers", "1", "--format", "hdf5", *args])


def _synthetic(out: Path, n: int = 20, *more: str):
    r = _convert("--source", "synthetic-images", "--limit", str(n), "--output", str(out), *more)
    assert r.exit_code == 0, r.output
    return r


def _tree(root: Path) -> dict[str, bytes]:
    """Every file below root with its bytes: what must survive a refused command unchanged."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture()
def sand(tmp_path) -> Path:
    """sand/photos/<class>/*.png|jpg (the input) and sand/notes.txt, a file of the user's beside it."""
    make_imagefolder(tmp_path / "sand" / "photos", n_per_class=3)
    (tmp_path / "sand" / "notes.txt").write_text("mine")
    return tmp_path / "sand"


@pytest.mark.parametrize(
    "output, how",
    [
        ("sand", "holds"),
        ("sand/photos", "is"),
        ("sand/photos/bird", "lies inside"),
        ("sand/photos/new", "lies inside"),
        ("link-to-sand", "holds"),
        ("link-to-photos", "is"),
    ],
    ids=["parent", "input", "class-folder", "new-inside", "link-to-parent", "link-to-input"],
)
def test_output_never_is_holds_or_lies_inside_the_input(sand, tmp_path, output, how):
    """--output the input, its parent, a folder in it, a new name in it, or a symbolic link to any of them: refused
    with --overwrite, naming the relation and the fix; every file of the input and beside it is unchanged."""
    (tmp_path / "link-to-sand").symlink_to(sand)
    (tmp_path / "link-to-photos").symlink_to(sand / "photos")
    before = _tree(sand)
    r = _convert("--input", str(sand / "photos"), "--output", str(tmp_path / output), "--overwrite")
    assert r.exit_code == 1 and f"--output {how} the input" in r.output and "choose an --output outside" in r.output
    assert _tree(sand) == before, r.output
    assert not list(tmp_path.rglob(".*.tmp-*")), "a temporary output was made"


def test_input_through_links_is_still_the_input(sand, tmp_path):
    """--input given as a link to the photos, and a class folder that is a link to a folder holding the output: both
    resolved, both refused; nothing changes."""
    (tmp_path / "in").symlink_to(sand / "photos")
    r = _convert("--input", str(tmp_path / "in"), "--output", str(sand), "--overwrite")
    assert r.exit_code == 1 and "--output holds the input" in r.output
    elsewhere = tmp_path / "elsewhere"
    make_imagefolder(elsewhere, n_per_class=2, classes=("frog",))
    (sand / "photos" / "frog").symlink_to(elsewhere / "frog")  # a class folder that lies elsewhere
    before = _tree(elsewhere)
    r = _convert("--input", str(sand / "photos"), "--output", str(elsewhere / "frog" / "out"))
    assert r.exit_code == 1 and "--output lies inside the input" in r.output, r.output
    assert f"({elsewhere / 'frog'})" in r.output
    assert _tree(elsewhere) == before


@pytest.mark.parametrize("case", ["no-manifest", "foreign-manifest", "extra-file", "fifo-manifest", "dir-link"])
def test_overwrite_refuses_what_dataprep_did_not_write(tmp_path, case):
    """--overwrite of a folder without a manifest, with a manifest dataprep did not write, of a dataprep output
    holding a file of the user's, with a FIFO as its manifest (not waited on), or holding a link to a folder: exit 1
    with the reason and the fix, nothing deleted."""
    out = tmp_path / "out"
    if case == "no-manifest":
        out.mkdir()
        (out / "photo.jpg").write_bytes(b"not really")
    elif case == "foreign-manifest":
        out.mkdir()
        (out / "manifest.json").write_text(json.dumps({"name": "my web app", "formats": {}}))
    else:
        _synthetic(out)
        if case == "extra-file":
            (out / "thesis.tex").write_text("years of work")
        elif case == "fifo-manifest":
            (out / "manifest.json").unlink()
            os.mkfifo(out / "manifest.json")
        else:
            (tmp_path / "keep").mkdir()
            (out / "more").symlink_to(tmp_path / "keep")
    names = sorted(p.name for p in out.iterdir())
    r = _convert("--source", "synthetic-images", "--limit", "5", "--output", str(out), "--overwrite")
    reason = {
        "no-manifest": "it has no manifest.json",
        "foreign-manifest": "does not say dataprep wrote it",
        "extra-file": "it holds thesis.tex, which its manifest does not list",
        "fifo-manifest": "FIFO",
        "dir-link": "it holds a symbolic link, more",
    }[case]
    assert r.exit_code == 1 and reason in r.output and "--overwrite replaces only a directory" in r.output, r.output
    assert sorted(p.name for p in out.iterdir()) == names


def test_overwrite_replaces_dataprep_output_through_a_link(tmp_path):
    """An output of dataprep's is replaced by --overwrite; given as a link, the folder it leads to is replaced and
    the link kept. An empty existing folder is used without --overwrite; a file in the output's place is refused."""
    _synthetic(tmp_path / "real", 20)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    _synthetic(tmp_path / "link", 7, "--overwrite")
    assert (tmp_path / "link").is_symlink() and load_manifest(tmp_path / "real")["count"] == 7
    (tmp_path / "empty").mkdir()
    _synthetic(tmp_path / "empty", 3)
    assert load_manifest(tmp_path / "empty")["count"] == 3
    (tmp_path / "afile").write_text("x")
    r = _convert("--source", "synthetic-images", "--limit", "3", "--output", str(tmp_path / "afile"), "--overwrite")
    assert r.exit_code == 1 and "exists and is not a directory" in r.output
    assert (tmp_path / "afile").read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "empty", "link", "real"]


KILLER = """
import os, signal, sys
out = sys.argv[1]
where = sys.argv[2]
def hook(event, args):
    if event == "os.rename":
        src, dst = os.fspath(args[0]), os.fspath(args[1])
        if (where == "first" and src == out) or (where == "between" and dst == out and ".tmp-" in src):
            os.kill(os.getpid(), signal.SIGKILL)
    if event == "shutil.rmtree" and where == "removing" and ".old-" in os.fspath(args[0]):
        os.kill(os.getpid(), signal.SIGKILL)
sys.addaudithook(hook)
from dataprep.cli import cli
cli(sys.argv[3:])
"""


def _killed_publish(out: Path, where: str, n: int) -> int:
    """A real conversion of n synthetic images replacing `out` (--overwrite), SIGKILLed by itself at `where`: before
    the first rename, between the two, or as it starts removing the old output. Returns its pid."""
    args = [
        "convert",
        "--quiet",
        "--workers",
        "1",
        "--format",
        "hdf5",
        "--source",
        "synthetic-images",
        "--limit",
        str(n),
        "--output",
        str(out),
        "--overwrite",
    ]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", KILLER, str(out), where, *args], env=env, stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == -9, err.decode()
    return proc.pid


def _bad_input(tmp_path: Path) -> Path:
    """A folder of two images, the second truncated: a conversion of it fails on it."""
    folder = tmp_path / "bad" / "cat"
    folder.mkdir(parents=True)
    for i, img in enumerate(random_images(2)):
        Image.fromarray(img).save(folder / f"{i}.png")
    (folder / "1.png").write_bytes((folder / "1.png").read_bytes()[:60])
    return tmp_path / "bad"


def test_kill_between_the_renames_completes_the_publish(tmp_path):
    """SIGKILL between the two renames leaves the old data and the complete new data, no output; the next conversion
    (which then fails on a bad image) completes the publish first: the new data is the output and verifies, the old
    is removed as the killed conversion would have, and the failure deletes nothing else."""
    out = tmp_path / "o"
    _synthetic(out, 20)
    pid = _killed_publish(out, "between", 30)
    assert not out.exists() and (tmp_path / f".o.old-{pid}").is_dir() and (tmp_path / f".o.tmp-{pid}").is_dir()
    r = _convert("--input", str(_bad_input(tmp_path)), "--output", str(out), "--overwrite")
    assert r.exit_code == 1 and "bad input file" in r.output and "1.png" in r.output, r.output
    assert f"completed the publish of {out}, interrupted in a conversion (process {pid}) that has ended" in r.output
    assert load_manifest(out)["count"] == 30 and verify(out) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad", "o"]


def test_kill_between_the_renames_rolls_back_an_incomplete_publish(tmp_path):
    """The same kill, with the new data then found incomplete (its manifest gone): the next conversion renames the old
    output back, and it verifies with its old count."""
    out = tmp_path / "o"
    _synthetic(out, 20)
    pid = _killed_publish(out, "between", 30)
    (tmp_path / f".o.tmp-{pid}" / "manifest.json").unlink()
    r = _convert("--input", str(_bad_input(tmp_path)), "--output", str(out), "--overwrite")
    assert r.exit_code == 1 and f"rolled back the publish of {out}" in r.output, r.output
    assert load_manifest(out)["count"] == 20 and verify(out) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad", "o"]


@pytest.mark.parametrize("where", ["first", "removing"])
def test_kill_before_or_after_the_renames(tmp_path, where):
    """Killed before the first rename: the old output stands and the next conversion removes the unpublished one.
    Killed as it removes the old output: the new one stands and the next conversion removes the old one."""
    out = tmp_path / "o"
    _synthetic(out, 20)
    pid = _killed_publish(out, where, 30)
    r = _synthetic(tmp_path / "o", 5, "--overwrite")
    kept = {"first": f".o.tmp-{pid}", "removing": f".o.old-{pid}"}[where]
    assert f"removed {tmp_path / kept}" in r.output, r.output
    assert load_manifest(out)["count"] == 5 and sorted(p.name for p in tmp_path.iterdir()) == ["o"]


def test_leftover_that_is_the_input_is_left_alone(tmp_path):
    """After a kill between the renames, a conversion that reads the old data (--input .o.old-PID) into the output
    leaves both leftovers alone and says so."""
    out = tmp_path / "o"
    r = _convert("--source", "synthetic-images", "--limit", "6", "--output", str(out), "--format", "files")
    assert r.exit_code == 0, r.output
    pid = _killed_publish(out, "between", 9)
    old = tmp_path / f".o.old-{pid}"
    r = _convert("--input", str(old / "files"), "--output", str(out), "--on-bad-file", "skip")
    assert r.exit_code == 0 and f"left {old} alone: it is part of the input" in r.output, r.output
    assert (old / "manifest.json").is_file() and (tmp_path / f".o.tmp-{pid}" / "manifest.json").is_file()
    assert load_manifest(out)["count"] == 6


@pytest.mark.slow
def test_overwrite_replaces_bench_results_with_the_data(tmp_path, monkeypatch):
    """A dataset holding the .gpufeed-bench/ that bench's probe wrote (`train --loader fastest`) is replaced by
    --overwrite, bench's results with it; the same folder holding a file of the user's is still refused, untouched."""
    from bench.fastest.choice import choose
    from bench.fastest.probe_plan import ProbeConfig

    out = tmp_path / "o"
    _synthetic(out, 128)
    quick = ProbeConfig(segment_s=0.0, min_steps=2, warmup=1, loader_warmup=1, workers_cpu=(0,))
    monkeypatch.setattr(ProbeConfig, "for_device", classmethod(lambda cls, device: quick))
    monkeypatch.delenv("GPUFEED_BENCH_RESULTS", raising=False)
    choose(out, device="cpu", model="tiny", batch_size=16, precision="fp32")
    assert list((out / ".gpufeed-bench").glob("fastest-probe-*.json"))
    theirs = tmp_path / "theirs"
    shutil.copytree(out, theirs)
    (theirs / ".gpufeed-bench" / "notes.txt").write_text("mine")
    before = _tree(theirs)
    r = _convert("--source", "synthetic-images", "--limit", "5", "--output", str(theirs), "--overwrite")
    assert r.exit_code == 1 and "it holds .gpufeed-bench/notes.txt, which bench does not write" in r.output, r.output
    assert _tree(theirs) == before
    r = _synthetic(out, 5, "--overwrite")
    assert load_manifest(out)["count"] == 5 and sorted(p.name for p in out.iterdir()) == ["data.h5", "manifest.json"]
