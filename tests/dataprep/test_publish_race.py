"""A conversion's publish never replaces what appeared at --output while it ran: a user's folder, another conversion's
output (without --overwrite), or with --overwrite anything dataprep did not write; the finished conversion is kept
beside it under a name the error gives. Real conversions, the folder made from inside the run (an audit hook that
fires as the manifest is written, just before the publish)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from common.noreplace import _renameat2, rename_locked, rename_new
from dataprep.cli import cli
from dataprep.manifest import load_manifest
from dataprep.verify import verify

REPO = Path(__file__).resolve().parents[2]

MEANWHILE = """
import os, subprocess, sys
out, what, args = sys.argv[1], sys.argv[2], sys.argv[3:]
done = []
def hook(event, hook_args):
    if event != "os.rename" or done:
        return
    dst = os.fspath(hook_args[1])
    if os.path.basename(dst) == "manifest.json" and os.path.basename(os.path.dirname(dst)).startswith("."):
        done.append(dst)  # the manifest written into the temporary output: the publish comes next
        if what == "folder":
            os.makedirs(out, exist_ok=True)
        if what in ("folder", "file-in-output"):
            with open(os.path.join(out, "thesis.tex"), "w") as f:
                f.write("years of work")
        if what == "conversion":
            more = ["--limit", "7", "--output", out, "--source", "synthetic-images", "--format", "hdf5", "--quiet"]
            subprocess.run([sys.executable, "-m", "dataprep", "convert", *more], check=True)
sys.addaudithook(hook)
from dataprep.cli import main
sys.argv = ["dataprep", "convert", *args]
main()
"""


def _convert_meanwhile(out: Path, what: str, *more: str) -> subprocess.CompletedProcess:
    """A real conversion of 20 synthetic images into `out`; as it finishes, `what` happens at `out`."""
    args = ["--source", "synthetic-images", "--limit", "20", "--format", "hdf5", "--workers", "1", "--quiet"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-c", MEANWHILE, str(out), what, *args, "--output", str(out), *more]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


def _kept(out: Path, r: subprocess.CompletedProcess) -> Path:
    """The finished conversion kept beside `out`, which the error names; it is whole."""
    kept = [p for p in out.parent.iterdir() if p.name.startswith(f"{out.name}.unpublished-")]
    assert len(kept) == 1 and f"the finished conversion is in {kept[0]}" in r.stderr, r.stderr
    assert load_manifest(kept[0])["count"] == 20 and verify(kept[0]) == []
    return kept[0]


@pytest.mark.parametrize("overwrite", [False, True], ids=["plain", "overwrite"])
def test_a_folder_made_during_the_run_is_never_replaced(tmp_path, overwrite):
    """A folder with a user's file created at a new --output while the conversion runs: exit 1 with one line naming
    it, the user's file unchanged, the finished conversion kept where the line says, no leftover."""
    out = tmp_path / "o"
    r = _convert_meanwhile(out, "folder", *(["--overwrite"] if overwrite else []))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert (out / "thesis.tex").read_text() == "years of work" and sorted(os.listdir(out)) == ["thesis.tex"]
    assert len(r.stderr.strip().splitlines()) == 1 and f"{out}: not replaced: " in r.stderr, r.stderr
    reason = "it has no manifest.json, so dataprep did not" if overwrite else "appeared while this conversion ran"
    assert reason in r.stderr, r.stderr
    kept = _kept(out, r)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o", kept.name]


def test_two_conversions_into_one_new_output(tmp_path):
    """A second conversion into the same new output finishes first: the first one does not replace it (no
    --overwrite); it exits 1 and keeps its own output aside, and the second one's output stands."""
    out = tmp_path / "o"
    r = _convert_meanwhile(out, "conversion")
    assert r.returncode == 1 and "appeared while this conversion ran" in r.stderr, r.stderr
    assert load_manifest(out)["count"] == 7 and verify(out) == []
    _kept(out, r)


def test_overwrite_checks_again_at_the_publish(tmp_path):
    """--overwrite of a dataprep output into which the user puts a file while the conversion runs: the check that it
    is dataprep's is made again at the publish, so the output with the user's file stays as it was."""
    out = tmp_path / "o"
    r = CliRunner().invoke(cli, ["convert", "--quiet", "--source", "synthetic-images", "--limit", "5", "--output", out])
    assert r.exit_code == 0, r.output
    r = _convert_meanwhile(out, "file-in-output", "--overwrite")
    assert r.returncode == 1 and "it holds thesis.tex, which its manifest does not list" in r.stderr, r.stderr
    assert (out / "thesis.tex").read_text() == "years of work" and load_manifest(out)["count"] == 5
    _kept(out, r)


@pytest.mark.parametrize("how", ["renameat2", "locked"])
def test_rename_never_replaces_a_folder_that_holds_something(tmp_path, how):
    """Both ways of the publish's rename (the kernel's RENAME_NOREPLACE, and the check under a lock where a filesystem
    refuses it) fail with FileExistsError on a folder holding a file and leave both sides as they were."""
    src, dst = tmp_path / "new", tmp_path / "theirs"
    src.mkdir()
    (src / "data").write_text("new")
    dst.mkdir()
    (dst / "thesis.tex").write_text("years of work")
    with pytest.raises(FileExistsError):
        _renameat2(str(src), str(dst)) if how == "renameat2" else rename_locked(str(src), str(dst))
    assert (dst / "thesis.tex").read_text() == "years of work" and (src / "data").read_text() == "new"
    (dst / "thesis.tex").unlink()
    rename_new(src, dst)  # an empty folder may be replaced: nothing is lost
    assert (dst / "data").read_text() == "new" and not src.exists()
