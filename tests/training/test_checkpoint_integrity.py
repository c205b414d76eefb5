"""A checkpoint is trusted only as far as it can be checked: its contents carry a sha256 that `train --resume`
checks, so bytes damaged on disk stop the run naming the file (older checkpoints, without one, still resume and say
so); a write that runs out of room (here the file size limit, EFBIG) leaves the previous checkpoint as it was and
ends the run with one line naming the file, the cause and the fix. Real CPU training runs, real files."""

from __future__ import annotations

import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from training.checkpoint import CKPT_NAME, DIGEST, contents_digest
from training.cli import train

REPO = Path(__file__).resolve().parents[2]
TRAIN = "--loader gpu --model tiny --batch-size 8 --precision fp32 --device cpu --workers 0 --no-pin-memory"
TRAIN += " --sample-every 0 --no-progress --log-every 1 --timing-warmup 0 --no-compile --ckpt-every 2"
NOTE = "was written before checkpoints carried a checksum"


def run_train(data: Path, out: Path, steps: int, *extra: str):
    args = ["--data", str(data), "--out", str(out), "--steps", str(steps), *TRAIN.split(), *extra]
    return CliRunner().invoke(train, args)


@pytest.fixture
def run(cifar_small, tmp_path) -> Path:
    """A run directory holding the checkpoint of step 2 of a real CPU run."""
    r = run_train(cifar_small, tmp_path / "run", 2)
    assert r.exit_code == 0, r.output
    return tmp_path / "run"


def zero_middle(path: Path, length: int = 64) -> None:
    """Zero `length` bytes from the middle of `path`, moving on past bytes that are zero already."""
    data = bytearray(path.read_bytes())
    at = len(data) // 2
    while not any(data[at : at + length]):
        at += length
    data[at : at + length] = bytes(length)
    path.write_bytes(bytes(data))


def test_a_checkpoint_with_64_bytes_zeroed_is_refused(cifar_small, run, tmp_path):
    """64 zeroed bytes in the middle of ckpt.pt stop `train --resume` with one line naming the file and what to do;
    the intact copy resumes without a word about its checksum."""
    intact = Path(shutil.copytree(run, tmp_path / "intact"))
    zero_middle(run / CKPT_NAME)
    r = run_train(cifar_small, run, 4, "--resume")
    assert r.exit_code == 1, r.output
    assert f"Error: {run / CKPT_NAME}: damaged" in r.output and "older copy" in r.output, r.output
    assert "Traceback" not in r.output and "step 4" not in r.output
    r = run_train(cifar_small, intact, 4, "--resume")
    assert r.exit_code == 0 and NOTE not in r.output, r.output
    assert torch.load(intact / CKPT_NAME, weights_only=True)["step"] == 4


def test_a_checkpoint_without_a_checksum_resumes_and_says_so(cifar_small, run):
    """A checkpoint written before checksums (no digest in it) still resumes, with one line saying its contents
    were not checked."""
    state = torch.load(run / CKPT_NAME, weights_only=True)
    state.pop(DIGEST, None)
    torch.save(state, run / CKPT_NAME)
    r = run_train(cifar_small, run, 4, "--resume")
    assert r.exit_code == 0, r.output
    assert r.output.count(NOTE) == 1 and f"resume: {run / CKPT_NAME} {NOTE}" in r.output, r.output


@pytest.mark.slow  # ~20 s on 2 cores: make test-slow, for CI's budget
def test_a_checkpoint_write_past_the_file_size_limit_keeps_the_previous_one(cifar_small, run):
    """A resumed run whose next checkpoint exceeds the file size limit (EFBIG, as a full disk gives ENOSPC) exits 1
    with one line naming the file, the cause and the fix; ckpt.pt still holds step 2, intact, and no temporary file
    is left."""
    ckpt = run / CKPT_NAME
    limit = ckpt.stat().st_size // 2  # the logs stay far below it; the checkpoint cannot fit

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    args = ["--data", str(cifar_small), "--out", str(run), "--steps", "4", "--resume", *TRAIN.split()]
    r = subprocess.run(
        [sys.executable, "-m", "training", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        preexec_fn=small_files,
        timeout=300,
    )
    assert r.returncode == 1, r.stderr[-3000:]
    error = r.stderr.strip().splitlines()[-1]
    assert error.startswith(f"Error: {ckpt}: checkpoint of step 4 not written"), r.stderr[-3000:]
    assert "EFBIG" in error and "ulimit -f" in error and "keeps the previous checkpoint" in error
    assert "Traceback" not in r.stderr
    state = torch.load(ckpt, weights_only=True)
    assert state["step"] == 2 and state[DIGEST] == contents_digest(state)
    assert not list(run.glob(".*tmp*")), "no temporary checkpoint left behind"
