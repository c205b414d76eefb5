"""A loader worker count beyond what the host can run (8 a core, and what its open-files and process limits leave) is
refused before any worker starts, by `train` and `bench loaders`, in one line with the limit, why, and the fix."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from bench.cli import cli as bench_cli
from training.cli import train

REPO = Path(__file__).resolve().parents[2]
TRAIN = "--model tiny --batch-size 8 --precision fp32 --device cpu --no-pin-memory --sample-every 0 --no-progress"
TRAIN += " --log-every 1 --timing-warmup 0 --no-compile --steps 1"


def test_train_refuses_more_workers_than_the_cores_can_run(cifar_small, tmp_path):
    """`train --workers 100000` exits 2 naming the option, the limit of 8 a core and the fix; nothing is written."""
    cores = len(os.sched_getaffinity(0))
    args = ["--data", str(cifar_small), "--out", str(tmp_path / "run"), "--loader", "gpu", *TRAIN.split()]
    r = CliRunner().invoke(train, [*args, "--workers", "100000"])
    assert r.exit_code == 2, r.output
    assert "--workers 100000: more workers than this host can run, at most" in r.output, r.output
    assert f"8 a core on {cores} core" in r.output or "ulimit" in r.output, r.output
    assert "or fewer" in r.output and "Traceback" not in r.output and not (tmp_path / "run").exists()


def test_train_refuses_more_workers_than_the_open_files_limit_allows(cifar_small, tmp_path):
    """Under `ulimit -n 384` (room for 8 workers at 16 descriptors each, past the 256 kept for the run) `train
    --loader hdf5 --workers 9` exits 2 naming that limit, before any worker starts."""

    def few_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (384, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    args = ["--data", str(cifar_small), "--out", str(tmp_path / "run"), "--loader", "hdf5", "--workers", "9"]
    r = subprocess.run(
        [sys.executable, "-m", "training", *args, *TRAIN.split()],
        cwd=REPO,
        capture_output=True,
        text=True,
        preexec_fn=few_files,
        timeout=300,
    )
    assert r.returncode == 2, r.stderr[-3000:]
    assert "--workers 9: more workers than this host can run, at most 8 here" in r.stderr, r.stderr[-3000:]
    assert "ulimit -n 384" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_bench_loaders_refuses_the_same_worker_counts(tmp_path):
    """`bench loaders --workers 0,100000` exits 2 before the grid starts, with the limit and the fix."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "manifest.json").write_text(json.dumps({"kind": "image", "formats": {"hdf5": {}}}))
    args = ["loaders", "--data", str(data), "--device", "cpu", "--out", str(tmp_path / "out"), "--workers", "0,100000"]
    r = CliRunner().invoke(bench_cli, args)
    assert r.exit_code == 2, r.output
    assert "--workers 100000: more workers than this host can run, at most" in r.output and "or fewer" in r.output
    assert not (tmp_path / "out").exists()
