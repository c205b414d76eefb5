"""`train` under real torchrun: ranks merge their figures on rank 0, a stopped 2-rank run resumes with the losses of an
uninterrupted one, two "nodes" meet through torchrun's c10d rendezvous, and (on 2 GPUs) the compiled step with CUDA
graphs keeps the ranks in step. Gloo on the CPU here, one thread per rank."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import torch
from ranks_helpers import TORCHRUN, node_command

from training.checkpoint import CKPT_NAME

REPO = Path(__file__).resolve().parents[2]


def train_args(data: Path, out: Path, steps: int, device: str = "cpu", *extra: str, precision="fp32") -> list[str]:
    """A tiny model, batch 8 per rank, a loss record every step (the resume compares them)."""
    opts = f"--loader hdf5 --model tiny --batch-size 8 --steps {steps} --precision {precision} --device {device}"
    opts += " --workers 0"
    opts += " --no-pin-memory --sample-every 0 --log-every 1 --timing-warmup 1 --lr 1e-3 --lr-warmup 0 --no-progress"
    return ["-m", "training", "--data", str(data), "--out", str(out), *opts.split(), *extra]


def env() -> dict[str, str]:
    # faulthandler: a rank that aborts prints every thread's Python stack, not just "Signal 6"
    return os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "PYTHONFAULTHANDLER": "1"}


def run(args: list[str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=REPO, env=env(), capture_output=True, text=True, timeout=timeout)


def losses(out: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


LEAVE_THE_GROUP = """
import gc, sys
from torch.nn.parallel import DistributedDataParallel
from training.config import TrainConfig
from training.loop import main
def check():
    if any(isinstance(o, DistributedDataParallel) for o in gc.get_objects()):
        raise SystemExit("a DDP wrapper outlived the run: the interpreter's shutdown could free it and its group")
gc.disable()  # an automatic collection must not do teardown's work in its place
try:
    main(TrainConfig(data=sys.argv[1], out=sys.argv[2], loader="hdf5", model="tiny", batch_size=int(sys.argv[3]),
                     steps=2, device="cpu", precision="fp32", workers=0, pin_memory=False, sample_every=0,
                     ckpt_every=0, progress=False))
except ValueError as e:  # batch 64: no batch for a rank of 32 images, an error once the wrapper exists
    check()  # the error still alive (as an uncaught one is, until the shutdown): its traceback must not hold DDP
    print(f"failed as expected: {e}")
check()
"""


@pytest.mark.slow
@pytest.mark.parametrize("batch", [8, 64])
def test_a_rank_frees_ddp_before_leaving_the_group(images64, tmp_path, batch):
    """DDP's wrapper is in a reference cycle with its reducer, which holds the gloo group: freed at the interpreter's
    shutdown instead, it aborted ranks after they had finished. The loop frees it before it leaves, on every rank,
    whether the run finished (batch 8) or failed (batch 64)."""
    script = tmp_path / "leave.py"
    script.write_text(LEAVE_THE_GROUP)
    done = run(
        [*TORCHRUN, "--standalone", "--nproc_per_node", "2", str(script), str(images64), str(tmp_path), str(batch)]
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert ("failed as expected" in done.stdout) == (batch == 64), done.stdout


@pytest.mark.slow
def test_torchrun_stopped_and_resumed_matches_an_uninterrupted_run(images64, tmp_path):
    """Two ranks under torchrun, stopped by SIGTERM to torchrun mid-run (it passes the signal to its workers, which
    agree on a step and checkpoint), then `--resume`d: every step's loss (the mean over ranks) equals the uninterrupted
    run's, and rank 0's summary merges both ranks' figures."""
    steps, two = 16, [*TORCHRUN, "--standalone", "--nproc_per_node", "2"]
    whole = run([*two, *train_args(images64, tmp_path / "whole", steps)])
    assert whole.returncode == 0, whole.stderr[-3000:]

    out = tmp_path / "stopped"
    proc = subprocess.Popen(
        [*two, *train_args(images64, out, steps, "cpu", "--ckpt-every", "1000")],
        cwd=REPO,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if (out / "metrics.jsonl").exists() and len((out / "metrics.jsonl").read_text().splitlines()) >= 3:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0, "the run should have been stopped, not finished"
    stopped_at = torch.load(out / CKPT_NAME, weights_only=True)["step"]
    assert 3 <= stopped_at < steps and "continue with --resume" in err, err[-3000:]

    resumed = run([*two, *train_args(images64, out, steps, "cpu", "--ckpt-every", "1000", "--resume")])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert losses(out) == losses(tmp_path / "whole") and len(losses(out)) == steps
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["world_size"] == 2 and summary["start_step"] == stopped_at
    ranks = summary["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and ranks[0]["param_checksum"] == ranks[1]["param_checksum"]
    s = summary["starvation"]
    assert s["starvation_mean"] == pytest.approx(sum(r["starvation"] for r in ranks) / 2)
    assert s["starvation_max"] == max(r["starvation"] for r in ranks) == ranks[s["starvation_worst_rank"]]["starvation"]
    assert summary["samples_per_s"] == pytest.approx(sum(r["samples_per_s"] for r in ranks))
    assert "mean over 2 ranks" in resumed.stdout and "worst rank" in resumed.stdout


@pytest.mark.slow
def test_two_nodes_meet_through_c10d_rendezvous(images64, tmp_path):
    """Two torchrun launchers, `--nnodes 2`, one process each, meeting at a c10d rendezvous endpoint as two hosts
    would: both finish as ranks 0 and 1 of world size 2 (so their loaders take disjoint shards, which
    test_loaders_conformance checks per backend), the ranks stay in step (equal parameters), and rank 0's checkpoint
    holds both ranks' RNG states."""
    port, out = free_port(), tmp_path / "run"  # --out on a file system both nodes see, as a shared one would be
    procs = [
        subprocess.Popen(
            [*node_command(port, i), *train_args(images64, out, 6)],
            cwd=REPO,
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in (0, 1)
    ]
    results = [p.communicate(timeout=240) for p in procs]
    for p, (_, err) in zip(procs, results):
        assert p.returncode == 0, err[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["world_size"] == 2 and summary["steps"] == 6
    ranks = summary["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and ranks[0]["param_checksum"] == ranks[1]["param_checksum"]
    ckpt = torch.load(out / CKPT_NAME, weights_only=True)
    assert ckpt["step"] == 6 and len(ckpt["rng"]) == 2


@pytest.mark.gpu
def test_two_gpus_compiled_with_cuda_graphs_stay_in_step(images64, tmp_path):
    """The compiled step (reduce-overhead: CUDA graphs) under DDP on 2 GPUs with NCCL: it completes and both ranks end
    with the same parameters."""
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 GPUs, {torch.cuda.device_count()} here")
    out = tmp_path / "run"
    extra = ("--compile", "--grad-sync", "ddp", "--ckpt-every", "0")
    args = train_args(images64, out, 30, "cuda", *extra, precision="bf16")
    done = run([*TORCHRUN, "--standalone", "--nproc_per_node", "2", *args], timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads((out / "summary.json").read_text())
    ranks = summary["ranks"]
    assert summary["config"]["world_size"] == 2 and summary["steps"] == 30 and summary["config"]["compile"]
    assert ranks[0]["param_checksum"] == ranks[1]["param_checksum"], ranks
    assert summary["starvation"]["host_behind_mean"] is not None, "CUDA events should time every rank"
