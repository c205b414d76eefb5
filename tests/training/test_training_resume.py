"""Never lose progress: SIGTERM checkpoints, bad checkpoints fail loudly, and DDP ranks stay in lock step."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from training_helpers import tiny_cfg

from training.checkpoint import CKPT_NAME, CheckpointError
from training.config import TrainConfig
from training.loop import main

REPO = Path(__file__).resolve().parents[2]


def short_cfg(data, out, **kw):
    """Four steps of 8 images, a checkpoint every 2: enough to kill and resume between checkpoints."""
    base = dict(batch_size=8, steps=4, lr=2e-4, log_every=2, ckpt_every=2, timing_warmup=1)
    return tiny_cfg(data, out, **(base | kw))


def test_resume_without_checkpoint_fails(cifar_small, tmp_path):
    """--resume on a RUN_DIR without ckpt.pt is an error, not a silent fresh start."""
    with pytest.raises(CheckpointError, match="no checkpoint to resume from"):
        main(short_cfg(cifar_small, tmp_path / "empty", resume=True))


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupt_checkpoint_fails(cifar_small, tmp_path, damage):
    """A truncated or garbage ckpt.pt gives a CheckpointError naming the file."""
    cfg = short_cfg(cifar_small, tmp_path / "run", steps=2)
    main(cfg)
    path = tmp_path / "run" / CKPT_NAME
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncate" else b"not a checkpoint" * 100)
    with pytest.raises(CheckpointError, match=f"{path}: not a readable checkpoint"):
        main(TrainConfig(**(cfg.__dict__ | {"resume": True, "steps": 4})))


def test_mismatched_checkpoint_fails(cifar_small, tmp_path):
    """Resuming with another model, batch size, learning rate or precision names the mismatch instead of training on
    (a new --lr was silently replaced by the saved one)."""
    cfg = short_cfg(cifar_small, tmp_path / "run", steps=2)
    main(cfg)
    with pytest.raises(CheckpointError, match="saved for a different model"):
        main(TrainConfig(**(cfg.__dict__ | {"resume": True, "model": "ddpm_cifar10"})))
    with pytest.raises(CheckpointError, match="saved with batch_size=8, now 4"):
        main(TrainConfig(**(cfg.__dict__ | {"resume": True, "batch_size": 4})))
    with pytest.raises(CheckpointError, match="saved with lr=0.0002, now 0.0001; .*restore the saved one"):
        main(TrainConfig(**(cfg.__dict__ | {"resume": True, "lr": 1e-4})))
    with pytest.raises(CheckpointError, match="saved with precision=fp32, now bf16"):
        main(TrainConfig(**(cfg.__dict__ | {"resume": True, "precision": "bf16"})))
    assert not list((tmp_path / "run").glob(".*tmp*")), "no temporary checkpoint left behind"


@pytest.mark.slow  # make test-slow, for CI's budget
def test_a_resumed_dali_run_says_its_order_differs(tmp_path, capsys):
    """DALI draws its own shuffle, so a resume cannot replay it: the run says so instead of implying an exact resume."""
    from dataprep.convert import ConvertConfig, convert

    data = tmp_path / "data"
    convert(
        ConvertConfig(output=data, source="synthetic-images", limit=64, formats=("dali",), workers=1, progress=False)
    )
    cfg = short_cfg(data, tmp_path / "run", loader="dali", steps=2)
    main(cfg)
    assert "chooses its own shuffle" not in capsys.readouterr().err
    main(TrainConfig(**(cfg.__dict__ | {"resume": True, "steps": 4})))
    assert "resume: dali chooses its own shuffle" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize(
    "loader,workers,sig,to_group",
    [("gpu", 0, signal.SIGTERM, False), ("hdf5", 2, signal.SIGTERM, True), ("hdf5", 2, signal.SIGINT, True)],
    ids=["sigterm", "sigterm-to-group-with-workers", "ctrl-c-to-group-with-workers"],
)
def test_a_stop_signal_checkpoints_and_exits_cleanly(cifar_small, tmp_path, loader, workers, sig, to_group):
    """SIGTERM or Ctrl-C mid-run: the process saves ckpt.pt at the current step and exits 128+signal without a
    traceback, also when the signal reaches the whole process group (a terminal's Ctrl-C, a scheduler's SIGTERM) and
    DataLoader workers get it too."""
    out = tmp_path / "run"
    opts = f"--loader {loader} --model tiny --batch-size 8 --steps 100000 --precision fp32 --device cpu"
    opts += f" --workers {workers} --no-pin-memory --sample-every 0 --log-every 1 --ckpt-every 100000 --no-progress"
    args = ["--data", str(cifar_small), "--out", str(out), *opts.split()]
    # one thread: OpenMP's spinning threads on a loaded machine stretched a tiny step past the 4 s a stop may take
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "training", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=env,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        metrics = out / "metrics.jsonl"
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 3:
            break
        time.sleep(0.2)
    os.killpg(proc.pid, sig) if to_group else proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, stderr[-2000:]
    assert "Traceback" not in stderr and "continue with --resume" in stderr
    ckpt = torch.load(out / CKPT_NAME, weights_only=True)
    logged = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert ckpt["step"] >= 3 and ckpt["step"] == logged[-1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ddp_worker(rank: int, world: int, port: int, data: str, out: str, result_dir: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank)
    )
    torch.set_num_threads(1)
    summary = main(short_cfg(Path(data), Path(out), steps=6, log_every=3, ckpt_every=3))
    Path(result_dir, f"rank{rank}.json").write_text(json.dumps(summary.to_dict()))


@pytest.mark.slow
def test_ddp_two_gloo_ranks_stay_identical(cifar_small, tmp_path):
    """Two gloo ranks train on their own shards; their final weights match each other and rank 0's checkpoint."""
    import torch.multiprocessing as mp

    out = tmp_path / "run"
    mp.spawn(_ddp_worker, args=(2, _free_port(), str(cifar_small), str(out), str(tmp_path)), nprocs=2)
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["steps"] == r1["steps"] == 6 and r0["config"]["world_size"] == 2
    assert r0["param_checksum"] == r1["param_checksum"]
    assert r0["losses"] != r1["losses"], "each rank should see its own shard and noise"
    ckpt = torch.load(out / CKPT_NAME, weights_only=True)
    assert ckpt["step"] == 6 and len(ckpt["rng"]) == 2
    assert sum(p.double().sum().item() for p in ckpt["model"].values()) == pytest.approx(r0["param_checksum"])
