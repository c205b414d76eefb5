"""Threads: `train` gives its process the cores its rank can use less one for each loader worker (OMP_NUM_THREADS,
where set, wins) and says so; every DataLoader worker runs one thread."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from loaders.workers import start_worker, training_threads

REPO = Path(__file__).resolve().parents[2]
TRAIN = "--model tiny --batch-size 8 --precision fp32 --device cpu --no-pin-memory --sample-every 0 --no-progress"
TRAIN += " --log-every 1 --timing-warmup 0 --steps 2 --loader hdf5 --workers 1"


@pytest.mark.slow  # 7-16 s: a training process of its own
def test_train_sets_its_threads_and_says_so(synthetic_images, tmp_path):
    """A real `train` subprocess with one loader worker runs on the cores less one thread, said in one line and
    recorded as the run's torch.get_num_threads()."""
    data, out = synthetic_images(64), tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"} | {"PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "training", "--data", str(data), "--out", str(out), *TRAIN.split()]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    want = max(1, len(os.sched_getaffinity(0)) - 1)
    assert r.stderr.count(f"threads: {want} for training (") == 1, r.stderr
    assert json.loads((out / "summary.json").read_text())["config"]["threads"] == want


def test_omp_num_threads_wins(monkeypatch):
    """A user's OMP_NUM_THREADS is the training process's thread count, whatever the cores and workers."""
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert training_threads(workers=8, ranks=4) == (3, "as OMP_NUM_THREADS says")
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert training_threads(workers=0, ranks=1)[0] == len(os.sched_getaffinity(0))


class _Threads(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 1

    def __getitem__(self, i: int):
        return torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")


def test_a_loader_worker_runs_one_thread():
    """Read inside a worker started with the backends' worker_init_fn: one torch thread, OMP_NUM_THREADS=1."""
    dl = torch.utils.data.DataLoader(_Threads(), num_workers=1, worker_init_fn=start_worker, collate_fn=lambda b: b)
    assert next(iter(dl)) == [(1, "1")]
