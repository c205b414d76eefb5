"""Kills: `train` SIGKILLed at random steps resumes with the losses of an uninterrupted run, and a DataLoader worker
that dies stops the training process within a bounded time with one message naming the loader."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

from training.checkpoint import CKPT_NAME

REPO = Path(__file__).resolve().parents[2]
STEPS, CKPT_EVERY = 24, 4


def train_cmd(data: Path, out: Path, loader: str, workers: int, steps: int, *extra: str) -> list[str]:
    opts = f"--loader {loader} --model tiny --batch-size 8 --steps {steps} --precision fp32 --device cpu --lr 1e-3"
    opts += f" --lr-warmup 0 --workers {workers} --no-pin-memory --sample-every 0 --log-every 1"
    opts += f" --ckpt-every {CKPT_EVERY} --no-progress --timing-warmup 1"
    return [sys.executable, "-m", "training", "--data", str(data), "--out", str(out), *opts.split(), *extra]


def start(cmd: list[str]) -> subprocess.Popen:
    env = os.environ | {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}  # equal arithmetic in every process
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def logged(out: Path) -> list[dict]:
    path = out / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def wait_for_step(proc: subprocess.Popen, out: Path, step: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if any(r["step"] >= step for r in logged(out)):
            return
        time.sleep(0.05)
    raise AssertionError(f"step {step} not reached (exit {proc.poll()}): {proc.stderr.read()[-2000:]}")


def no_orphans(pids: list[int], timeout: float = 30) -> list[int]:
    """Processes of `pids` still alive after `timeout` (DataLoader workers notice a dead parent within seconds)."""
    deadline = time.monotonic() + timeout
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.2)
    return alive


@pytest.mark.slow
def test_sigkill_at_random_steps_then_resume_matches_an_uninterrupted_run(cifar_small, tmp_path):
    """Three SIGKILLs of one run at random steps (hdf5 with two worker processes): each --resume continues from the
    last checkpoint, every logged loss (the lost steps and their reruns alike) equals the uninterrupted run's loss
    of that step, and no worker outlives its killed parent."""
    reference = start(train_cmd(cifar_small, tmp_path / "ref", "hdf5", 2, STEPS))
    assert reference.wait(timeout=300) == 0, reference.stderr.read()[-2000:]
    expected = {r["step"]: r["loss"] for r in logged(tmp_path / "ref")}
    assert sorted(expected) == list(range(1, STEPS + 1))

    out, rng = tmp_path / "run", random.Random(18)
    kills = sorted(rng.sample(range(2, STEPS - 1), 3))
    for i, at in enumerate(kills):
        proc = start(train_cmd(cifar_small, out, "hdf5", 2, STEPS, *(["--resume"] if i else [])))
        wait_for_step(proc, out, at)
        workers = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        saved = torch.load(out / CKPT_NAME, weights_only=True)["step"]
        assert saved % CKPT_EVERY == 0 and saved <= max(r["step"] for r in logged(out))
        assert not no_orphans(workers), "a DataLoader worker outlived its killed parent"
    final = start(train_cmd(cifar_small, out, "hdf5", 2, STEPS, "--resume"))
    assert final.wait(timeout=300) == 0, final.stderr.read()[-2000:]
    records = logged(out)
    assert {r["step"] for r in records} == set(expected)
    reran = len(records) - STEPS
    assert reran >= 0
    mismatched = [(r["step"], r["loss"], expected[r["step"]]) for r in records if r["loss"] != expected[r["step"]]]
    assert not mismatched, f"killed at steps {kills}: losses differ from the uninterrupted run: {mismatched[:5]}"
    print(f"killed at steps {kills}; {reran} lost steps rerun; all {len(records)} logged losses match")


@pytest.mark.slow
@pytest.mark.parametrize("loader", ["hdf5", "torch"])
def test_a_dead_worker_stops_training_with_the_loader_named(cifar_small, tmp_path, loader):
    """SIGKILL one DataLoader worker mid-run: `train` exits 1 within 30 s with one line naming the loader (no hang,
    no traceback), and its other workers end too."""
    data = cifar_small
    if loader == "torch":  # the files format for the DataLoader-over-files baseline
        from dataprep.convert import ConvertConfig, convert

        data = tmp_path / "files"
        convert(
            ConvertConfig(
                output=data, source="synthetic-images", limit=256, formats=("files",), workers=1, progress=False
            )
        )
    out = tmp_path / "run"
    proc = start(train_cmd(data, out, loader, 2, 100_000))
    wait_for_step(proc, out, 3)
    workers = psutil.Process(proc.pid).children(recursive=True)
    assert len(workers) >= 2, [w.cmdline() for w in workers]
    t0 = time.monotonic()
    workers[0].send_signal(signal.SIGKILL)
    try:
        _, stderr = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"train still running 30 s after its {loader} worker died")
    took = time.monotonic() - t0
    assert proc.returncode == 1, stderr[-2000:]
    assert f"the {loader} loader's worker process died" in stderr and "Traceback" not in stderr, stderr[-2000:]
    assert not no_orphans([w.pid for w in workers[1:]]), "the other workers outlived the run"
    print(f"{loader}: train exited {took:.1f} s after the worker's SIGKILL")
