"""Conversions killed outright, or starved of disk: nothing complete-looking is left, nothing is left running, and
the next conversion cleans up after dead ones but never touches a live one's temporary output."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import psutil
import pytest
from click.testing import CliRunner
from PIL import Image

from dataprep.cli import cli
from dataprep.verify import verify

REPO = Path(__file__).resolve().parents[2]
KILLS = 10
SEED = 18  # the kill times are drawn from this seed: a failure is reproducible


def _start(out: Path, *args: str) -> tuple[subprocess.Popen, str]:
    """A real `dataprep convert` process; the marker in its environment finds every process it starts."""
    mark = uuid.uuid4().hex
    env = dict(os.environ, PYTHONPATH=str(REPO), GPUFEED_TEST_MARK=mark)
    cmd = [sys.executable, "-m", "dataprep", "convert", "--output", str(out), "--quiet", *args]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), mark


def _marked(mark: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("GPUFEED_TEST_MARK") == mark:
                found.append(p)
        except (psutil.Error, OSError):
            pass
    return found


def _wait_for(pattern: str, folder: Path, timeout: float = 60) -> Path:
    deadline = time.time() + timeout
    while time.time() < deadline:
        hits = list(folder.glob(pattern))
        if hits:
            return hits[0]
        time.sleep(0.05)
    raise AssertionError(f"{pattern} never appeared in {folder}")


def _rerun(out: Path):
    return CliRunner().invoke(
        cli,
        [
            "convert",
            "--source",
            "synthetic-images",
            "--limit",
            "20",
            "--format",
            "hdf5",
            "--workers",
            "1",
            "--quiet",
            "--overwrite",
            "--output",
            str(out),
        ],
    )


def test_dead_conversions_are_cleared_live_ones_kept(tmp_path):
    """Leftovers of a SIGKILLed conversion are removed by the next one, which says so; the temporary output of a
    conversion still running is untouched and that conversion goes on; a leftover whose pid now belongs to another
    live process (pid 1 here) is removed too, since its lock is free."""
    out = tmp_path / "o"
    args = ["--source", "synthetic-images", "--limit", "400000", "--format", "hdf5", "--workers", "1"]
    live, _ = _start(out, *args)
    live_tmp = _wait_for(f".o.tmp-{live.pid}/data.h5", tmp_path).parent
    dead, _ = _start(out, *args)  # starts beside the live one, which it leaves alone
    dead_tmp = _wait_for(f".o.tmp-{dead.pid}/data.h5", tmp_path).parent
    dead.kill()
    dead.wait()
    assert b"removed" not in dead.stderr.read()
    reused = tmp_path / ".o.tmp-1"
    reused.mkdir()
    (reused / ".lock").touch()
    try:
        r = _rerun(out)
        assert r.exit_code == 0, r.output
        assert f"removed {dead_tmp}: left by a conversion (process {dead.pid}) that has ended" in r.output
        assert f"removed {reused}" in r.output and not dead_tmp.exists() and not reused.exists()
        assert live_tmp.is_dir() and (live_tmp / "data.h5").is_file() and live.poll() is None
    finally:
        live.kill()
        live.wait()


@pytest.mark.slow
def test_sigkill_at_random_points(tmp_path):
    """SIGKILL a conversion to every format at KILLS random moments (start-up, decoding, the FFCV write, the rename):
    after each, no directory that looks complete except a finished one that verifies, no process of it left
    running, and a rerun succeeds and leaves only its output."""
    draw = random.Random(SEED)
    survived = []
    for k in range(KILLS):
        out = tmp_path / f"run{k}" / "o"
        out.parent.mkdir()
        proc, mark = _start(out, "--source", "synthetic-images", "--limit", "3000", "--workers", "2")
        delay = draw.uniform(0.2, 6.0)
        finished = proc.wait(timeout=delay) if _sleep_unless_done(proc, delay) else None
        if finished is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        complete = [p.parent for p in out.parent.rglob("manifest.json")]
        assert complete in ([], [out]), f"kill {k} at {delay:.2f} s left {complete}"
        if complete:
            assert verify(out) == []
        deadline = time.time() + 20
        while _marked(mark) and time.time() < deadline:
            time.sleep(0.2)
        assert not _marked(mark), f"kill {k}: processes of the killed conversion still running"
        r = _rerun(out)
        assert r.exit_code == 0, r.output
        assert [p.name for p in out.parent.iterdir()] == ["o"], f"kill {k}: {list(out.parent.iterdir())}"
        survived.append(f"{delay:.2f}s:{'finished' if complete else 'killed'}")
    print(f"conversions killed: {len(survived)} ({', '.join(survived)}); every rerun succeeded, nothing stale left")


def _sleep_unless_done(proc: subprocess.Popen, seconds: float) -> bool:
    """Sleep `seconds` or until the process ends; True if it ended by itself."""
    try:
        proc.wait(timeout=seconds)
        return True
    except subprocess.TimeoutExpired:
        return False


@pytest.fixture()
def small_disk(tmp_path):
    """A tmpfs of a given size (needs root and mount rights)."""
    mounted = []

    def make(size: str) -> Path:
        where = tmp_path / f"disk{len(mounted)}"
        where.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip()}); the kill tests still run")
        mounted.append(where)
        return where

    yield make
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.mark.parametrize(
    "formats, size",
    [("hdf5,dali,files", "2m"), pytest.param("ffcv", "9m", marks=pytest.mark.slow)],
    ids=["writers", "ffcv"],
)
def test_full_disk(small_disk, formats, size):
    """A disk that fills up during the conversion: exit 1 with the disk named as the problem, no output that looks
    complete, no temporary output left. `ffcv`: the staging file fits and FFCV's own writer processes hit the full
    disk (FFCV's parent would wait for them forever; the conversion must end with the error instead)."""
    disk = small_disk(size)
    proc, mark = _start(disk / "o", "--source", "synthetic-images", "--limit", "2000", "--format", formats)
    _, err = proc.communicate(timeout=180)
    message = err.decode()
    assert proc.returncode == 1 and f"{disk / 'o'}: No space left on device" in message, message
    assert "free space or choose another --output" in message
    assert "Traceback" not in message, message
    assert list(disk.iterdir()) == [], list(disk.iterdir())
    assert not _marked(mark)


@pytest.fixture(scope="module")
def pngs(tmp_path_factory) -> Path:
    """2000 random 32x32 PNGs in ROOT/cat (written fast: no compression)."""
    folder = tmp_path_factory.mktemp("pngs")
    (folder / "cat").mkdir()
    rng = np.random.default_rng(0)
    for i in range(2000):
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), np.uint8)).save(folder / "cat" / f"{i}.png", compress_level=0)
    return folder


def test_workers_of_a_killed_conversion_end_quietly(pngs, tmp_path):
    """SIGKILL of a conversion whose 2 decoding workers have answers on the way (it is stopped first, so they wait on
    its full pipes): the workers end without a word (each printed a BrokenPipeError traceback), none left running."""
    for k in range(2):
        out = tmp_path / f"o{k}"
        proc, mark = _start(out, "--input", str(pngs), "--format", "hdf5", "--workers", "2")
        _wait_for(f".{out.name}.tmp-{proc.pid}/data.h5", tmp_path)  # the first samples are decoded
        proc.send_signal(signal.SIGSTOP)
        time.sleep(1.0)  # the workers decode what they were given and wait to hand it over
        proc.kill()
        _, err = proc.communicate(timeout=60)  # until every process that shares its stderr has closed it
        assert "Traceback" not in err.decode(), f"kill {k}: {err.decode()}"
        deadline = time.time() + 20
        while _marked(mark) and time.time() < deadline:
            time.sleep(0.2)
        assert not _marked(mark), f"kill {k}: processes of the killed conversion still running"
