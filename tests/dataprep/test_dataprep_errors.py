"""Bad input gives a clear error naming the file, a non-zero exit and no complete-looking output."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from dataprep_helpers import make_audio, make_imagefolder, make_kaggle, read_all

from dataprep.cli import cli


def run(*args: str):
    return CliRunner().invoke(cli, ["convert", "--quiet", "--workers", "1", *args])


def _no_output(out: Path) -> None:
    assert not (out / "manifest.json").exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.tmp")], "temporary dir left"


def test_truncated_image_is_named(tmp_path):
    """A truncated JPEG fails the conversion with its path and 'truncated' in the message."""
    make_imagefolder(tmp_path / "in")
    victim = sorted((tmp_path / "in" / "cat").glob("*.jpg"))[1]
    victim.write_bytes(victim.read_bytes()[:200])
    r = run("--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"))
    assert r.exit_code == 1 and victim.name in r.output and "truncated" in r.output
    _no_output(tmp_path / "out")


def test_skip_lists_bad_files_in_manifest(tmp_path):
    """--on-bad-file skip leaves out a corrupt and a non-image file and lists both in the manifest."""
    make_imagefolder(tmp_path / "in")
    (tmp_path / "in" / "cat" / "0002.jpg").write_bytes(b"\xff\xd8\xff garbage")
    (tmp_path / "in" / "bird" / "notes.txt").write_text("hello")
    r = run("--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"), "--on-bad-file", "skip")
    assert r.exit_code == 0, r.output
    import json

    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["count"] == 15
    assert sorted(Path(s["path"]).name for s in manifest["skipped"]) == ["0002.jpg", "notes.txt"]


def test_not_an_image(tmp_path):
    """A .png that holds text is reported as not an image."""
    make_imagefolder(tmp_path / "in")
    (tmp_path / "in" / "bird" / "0099.png").write_text("not a picture")
    r = run("--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"))
    assert r.exit_code == 1 and "0099.png" in r.output and "not an image" in r.output


def test_inconsistent_image_sizes(tmp_path):
    """An image of another size names the file, its shape and the shape of the first image."""
    from PIL import Image

    make_imagefolder(tmp_path / "in")
    Image.fromarray(np.zeros((28, 28, 3), np.uint8)).save(tmp_path / "in" / "cat" / "9999.png")
    r = run("--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"))
    assert r.exit_code == 1 and "9999.png" in r.output and "(28, 28, 3)" in r.output


def test_empty_folder_and_unknown_layout(tmp_path):
    """An empty folder and a folder of unrelated files each get a message; unknown layout lists the known ones."""
    (tmp_path / "empty").mkdir()
    r = run("--input", str(tmp_path / "empty"), "--output", str(tmp_path / "o1"))
    assert r.exit_code == 1 and "empty folder" in r.output
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "a.csv").write_text("1,2")
    r = run("--input", str(tmp_path / "odd"), "--output", str(tmp_path / "o2"))
    assert r.exit_code == 1 and "unknown layout" in r.output and "kaggle" in r.output


def test_missing_kaggle_label(tmp_path):
    """A Kaggle PNG without a trainLabels.csv row is named; with skip it is listed and the rest converts."""
    make_kaggle(tmp_path / "k", n=10)
    lines = (tmp_path / "k" / "trainLabels.csv").read_text().splitlines()
    (tmp_path / "k" / "trainLabels.csv").write_text("\n".join(lines[:5] + lines[6:]) + "\n")  # drops id 5
    r = run("--input", str(tmp_path / "k"), "--output", str(tmp_path / "o"))
    assert r.exit_code == 1 and "5.png" in r.output and "trainLabels.csv" in r.output
    r = run("--input", str(tmp_path / "k"), "--output", str(tmp_path / "o"), "--on-bad-file", "skip")
    assert r.exit_code == 0 and read_all(tmp_path / "o", "hdf5")[0].shape[0] == 9


def test_corrupt_audio_and_non_audio(tmp_path):
    """A truncated WAV header and a non-audio file in an audio folder are named."""
    clips = make_audio(tmp_path / "a")
    clips[0].write_bytes(clips[0].read_bytes()[:30])
    r = run("--input", str(tmp_path / "a"), "--output", str(tmp_path / "o"))
    assert r.exit_code == 1 and clips[0].name in r.output and "audio" in r.output
    clips[0].unlink()
    (tmp_path / "a" / "3_x_1.txt").write_text("words")
    r = run("--input", str(tmp_path / "a"), "--output", str(tmp_path / "o"))
    assert r.exit_code == 1 and "3_x_1.txt" in r.output and "not an audio file" in r.output


def test_unlabelled_clip_is_named_and_can_be_skipped(tmp_path):
    """A clip whose name carries no label is named with the fix; --on-bad-file skip converts the rest."""
    clips = make_audio(tmp_path / "a")
    clips[0].rename(tmp_path / "a" / "noise.wav")
    r = run("--input", str(tmp_path / "a"), "--output", str(tmp_path / "o"))
    assert r.exit_code == 1 and "noise.wav" in r.output and "no label" in r.output
    r = run("--input", str(tmp_path / "a"), "--output", str(tmp_path / "o"), "--on-bad-file", "skip")
    assert r.exit_code == 0 and read_all(tmp_path / "o", "hdf5")[0].shape[0] == len(clips) - 1


def test_unwritable_output(tmp_path):
    """An output below a regular file cannot be created: the message names it and nothing is written."""
    (tmp_path / "file").write_text("x")
    r = run("--source", "synthetic-images", "--limit", "10", "--output", str(tmp_path / "file" / "out"))
    assert r.exit_code == 1 and "cannot write" in r.output


@pytest.mark.parametrize("fmt,library", [("ffcv", "ffcv"), ("stream", "litdata")])
def test_a_format_whose_library_is_missing_is_refused_with_the_fix(tmp_path, monkeypatch, fmt, library):
    """Without the format's library (a None in sys.modules is how Python marks a module unimportable), the conversion
    stops before any work with the library and the extra to install named, and leaves nothing; FFCV's writer, which
    imports it in a process of its own, had said only "Connection reset by peer"."""
    monkeypatch.setitem(sys.modules, library, None)
    out = tmp_path / "out"
    r = run("--source", "synthetic-images", "--limit", "10", "--format", f"hdf5,{fmt}", "--output", str(out))
    assert r.exit_code == 1, r.output
    assert f"--format {fmt} needs {library}, which is not installed" in r.output and f"gpufeed[{fmt}]" in r.output
    assert not out.exists()
    _no_output(out)


def test_an_ffcv_that_cannot_be_imported_is_named_not_a_broken_pipe(tmp_path):
    """An installed FFCV whose import fails (its compiled part, a library it links) is reported with the import's own
    error and the fix, before the input is read through, from the helper process that imports it."""
    fake = tmp_path / "site" / "ffcv"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise ImportError("libopencv_imgproc.so.406: cannot open shared object file")\n')
    out = tmp_path / "out"
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(fake.parent), str(Path(__file__).resolve().parents[2])])}
    args = ["--source", "synthetic-images", "--limit", "4000", "--format", "hdf5,ffcv", "--output", str(out)]
    r = subprocess.run(
        [sys.executable, "-m", "dataprep", "convert", "--quiet", *args], env=env, capture_output=True, text=True
    )
    assert r.returncode == 1, r.stderr
    assert "FFCV cannot be imported (ImportError: libopencv_imgproc.so.406" in r.stderr and "gpufeed[ffcv]" in r.stderr
    assert "Traceback" not in r.stderr
    _no_output(out)


def test_a_killed_ffcv_helper_is_reported_as_a_dead_worker():
    """FFCV's helper process killed while the input is read (the OOM killer's SIGKILL): the writer's next check says
    so as a dead worker, which the CLI reports in one line, not a traceback or an EOFError."""
    from dataprep.formats.ffcv_writer import Helper
    from dataprep.parallel import WorkerDied

    helper = Helper()
    try:
        helper.process.kill()
        helper.process.join(30)
        with pytest.raises(WorkerDied, match="FFCV's writer process ended without a word: killed by SIGKILL"):
            helper.check()
    finally:
        helper.close()


def test_existing_output_needs_overwrite(tmp_path):
    """A second conversion into a finished directory refuses without --overwrite and replaces it with it."""
    args = ["--source", "synthetic-images", "--limit", "10", "--format", "hdf5", "--output", str(tmp_path / "o")]
    assert run(*args).exit_code == 0
    r = run(*args)
    assert r.exit_code == 1 and "--overwrite" in r.output
    assert run(*args, "--overwrite").exit_code == 0


@pytest.mark.slow
def test_interrupt_in_process_leaves_nothing(tmp_path, monkeypatch):
    """A KeyboardInterrupt mid-conversion removes the temporary directory; a rerun succeeds."""
    from dataprep.convert import ConvertConfig, convert
    from dataprep.sources.synthetic import SyntheticImages

    real = SyntheticImages.chunks

    def interrupted(self, *a):
        for i, chunk in enumerate(real(self, *a)):
            if i == 2:
                raise KeyboardInterrupt
            yield chunk

    monkeypatch.setattr(SyntheticImages, "chunks", interrupted)
    cfg = ConvertConfig(output=tmp_path / "o", source="synthetic-images", limit=3000, progress=False)
    with pytest.raises(KeyboardInterrupt):
        convert(cfg)
    _no_output(tmp_path / "o")
    monkeypatch.setattr(SyntheticImages, "chunks", real)
    assert convert(cfg)["count"] == 3000


@pytest.mark.slow
def test_sigint_to_cli_process(tmp_path):
    """Ctrl-C (SIGINT) to a running `dataprep convert` exits non-zero and leaves no output or temporary dir."""
    out = tmp_path / "o"
    cmd = [
        sys.executable,
        "-m",
        "dataprep",
        "convert",
        "--source",
        "synthetic-images",
        "--limit",
        "300000",
        "--format",
        "hdf5",
        "--output",
        str(out),
        "--quiet",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while not list(tmp_path.glob(".o.tmp-*/data.h5")) and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    os.kill(proc.pid, signal.SIGINT)
    proc.wait(timeout=60)
    assert proc.returncode != 0
    _no_output(out)


def test_killed_process_leftovers_are_cleared_on_rerun(tmp_path):
    """SIGKILL mid-conversion leaves no manifest; the rerun removes the dead run's temporary dir and succeeds."""
    out = tmp_path / "o"
    args = ["--source", "synthetic-images", "--limit", "300000", "--format", "hdf5", "--output", str(out), "--quiet"]
    proc = subprocess.Popen([sys.executable, "-m", "dataprep", "convert", *args], stdout=subprocess.DEVNULL)
    deadline = time.time() + 60
    while not list(tmp_path.glob(".o.tmp-*/data.h5")) and time.time() < deadline:
        time.sleep(0.1)
    proc.kill()
    proc.wait(timeout=30)
    assert [p.name for p in tmp_path.iterdir()] == [f".o.tmp-{proc.pid}"]  # a leftover, but not a dataset
    assert not out.exists()
    r = run(*args[:3], "20", *args[4:])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"] and (out / "manifest.json").is_file()
