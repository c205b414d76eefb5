"""A non-finite number never reaches a checkpoint: one NaN in one stored latent stops `train` (resumed or fresh) within
a few steps, naming the step, with a non-zero exit, and the last good ckpt.pt stays byte for byte; under DDP every rank
stops, none hangs; a checkpoint that already holds NaN is refused; the weight check covers the EMA's weights."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from training_helpers import tiny_cfg

from common.stopping import StopOnSignal
from training.checkpoint import CKPT_NAME, DIGEST, CheckpointError
from training.cli import train
from training.ddp import Dist
from training.guard import Guard, NonFiniteError, nonfinite
from training.loop import main

REPO = Path(__file__).resolve().parents[2]
COUNT, BATCH = 32, 8  # four batches an epoch: the poisoned sample comes within four steps of any step


@pytest.fixture(scope="module")
def latents(image_vae, tmp_path_factory) -> Path:
    """32 synthetic images encoded by the tiny autoencoder, stored as .npy files and in HDF5."""
    from dataprep.convert import ConvertConfig, convert

    out = tmp_path_factory.mktemp("nonfinite") / "latents"
    convert(
        ConvertConfig(
            output=out,
            source="synthetic-images",
            limit=COUNT,
            formats=("files", "hdf5"),
            vae=str(image_vae),
            device="cpu",
            batch_size=32,
            workers=1,
            progress=False,
        )
    )
    return out


def poison(data: Path, fmt: str, index: int = 5, value: float = float("nan")) -> None:
    """Write `value` over one number of one stored latent, in place: the file keeps its size."""
    if fmt == "files":
        path = data / "files" / "00000" / f"{index:08d}.npy"
        size = path.stat().st_size
        stored = np.load(path, mmap_mode="r+")
        stored[0, 0, 0, 3, 3] = value
        stored.flush()
        del stored
        assert path.stat().st_size == size
    else:
        with h5py.File(data / "data.h5", "r+") as f:
            sample = f["x"][index]
            sample[0, 0, 0, 3, 3] = value
            f["x"][index] = sample


def args(data: Path, out: Path, loader: str, steps: int, *extra: str) -> list[str]:
    opts = f"--loader {loader} --model dit_tiny --batch-size {BATCH} --steps {steps} --precision fp32 --device cpu"
    opts += " --workers 0 --no-pin-memory --sample-every 0 --log-every 2 --ckpt-every 4 --no-progress --lr-warmup 0"
    return ["--data", str(data), "--out", str(out), *opts.split(), "--timing-warmup", "1", *extra]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


STOPPED = r"Error: step (\d+): the loss is nan; training stopped before writing it into a checkpoint: "
REFUSED = r"Error: .*(00000005\.npy: holds|sample 5 holds) NaN or Inf, which would make the loss NaN"


@pytest.mark.slow
@pytest.mark.parametrize(
    "loader,fmt,expected", [("hdf5", "hdf5", STOPPED), ("torch", "files", REFUSED), ("gpu", "hdf5", REFUSED)]
)
def test_one_nan_in_one_latent_stops_the_resume_and_keeps_the_checkpoint(latents, tmp_path, loader, fmt, expected):
    """The case as found: a run checkpointed at step 4, then one NaN written into one stored latent (size unchanged),
    then `train --resume`: it exits non-zero, ckpt.pt is the step-4 checkpoint, byte for byte, and no temporary file is
    left. The loaders that read each sample whole (torch's files, the resident set) refuse it naming the sample; the
    others deliver it, and the loss stops the run within an epoch, naming the step."""
    data, out = tmp_path / "data", tmp_path / "run"
    shutil.copytree(latents, data)
    runner = CliRunner()
    first = runner.invoke(train, args(data, out, loader, 4))
    assert first.exit_code == 0, first.output
    before = digest(out / CKPT_NAME)
    poison(data, fmt)
    resumed = runner.invoke(train, args(data, out, loader, 40, "--resume", "--ckpt-every", "1000"))
    assert resumed.exit_code == 1 and "Traceback" not in resumed.output, resumed.output
    found = re.search(expected, resumed.output)
    assert found, resumed.output
    if expected == STOPPED:
        assert f"{out / CKPT_NAME} (step 4) is as it was" in resumed.output
        assert 4 < int(found[1]) <= 4 + COUNT // BATCH + 1  # within an epoch (+1: the loss is read a step late)
    assert digest(out / CKPT_NAME) == before and torch.load(out / CKPT_NAME, weights_only=True)["step"] == 4
    assert not list(out.glob(".*tmp*"))


ON_GPU = {"device": "cuda", "precision": "bf16"}
RUNS = {
    "nan": (float("nan"), {}),
    "inf": (float("inf"), {}),
    "cuda": (float("nan"), ON_GPU),
    "cuda-compiled": (float("nan"), ON_GPU | {"compile": True}),
}


@pytest.mark.parametrize(
    "run", [p if not p.startswith("cuda") else pytest.param(p, marks=pytest.mark.gpu) for p in RUNS]
)
def test_a_fresh_run_writes_no_checkpoint_after_the_first_non_finite_loss(latents, tmp_path, run):
    """A checkpoint every step from the start: the ones written before the bad step are finite, none after it. On a
    GPU the loss comes through the pinned copy read a step late, also from CUDA graphs."""
    value, options = RUNS[run]
    data, out = tmp_path / "data", tmp_path / "run"
    shutil.copytree(latents, data)
    poison(data, "hdf5", index=0, value=value)
    cfg = tiny_cfg(
        data, out, model="dit_tiny", loader="hdf5", workers=0, batch_size=BATCH, steps=40, ckpt_every=1, log_every=1000
    )
    with pytest.raises(NonFiniteError, match=r"step \d+: the loss is (nan|inf)") as caught:
        main(dataclasses.replace(cfg, **options))
    bad = int(re.search(r"step (\d+)", str(caught.value))[1])
    assert bad <= COUNT // BATCH
    if (out / CKPT_NAME).exists():
        state = torch.load(out / CKPT_NAME, weights_only=True)
        assert state["step"] < bad and not nonfinite([(k, v) for k, v in state["model"].items()])
    assert not list(out.glob(".*tmp*"))


def test_a_checkpoint_holding_nan_is_refused(synthetic_images, tmp_path):
    """A ckpt.pt whose EMA weights hold a NaN (as a run before this check could write) is refused at --resume, naming
    the tensor, rather than trained on into NaN."""
    data, out = synthetic_images(64), tmp_path / "run"
    cfg = tiny_cfg(data, out, steps=2, ckpt_every=2, log_every=2)
    main(cfg)
    state = torch.load(out / CKPT_NAME, weights_only=True)
    name = next(iter(state["ema"]))
    state["ema"][name].view(-1)[0] = float("nan")
    del state[DIGEST]  # as such a run left it: without the checksum, which came later
    torch.save(state, out / CKPT_NAME)
    with pytest.raises(CheckpointError, match=rf"holds non-finite values \(ema {re.escape(name)}\)"):
        main(dataclasses.replace(cfg, resume=True, steps=4))


def test_the_weight_check_names_the_tensors_ema_included():
    """NaN, inf and -inf are found in any tensor, bf16 included; the Guard's check covers the EMA copy and names it;
    the step it names is the one checked."""
    good, bad = torch.ones(4), torch.ones(4, dtype=torch.bfloat16)
    bad[1] = float("nan")
    tensors = [("a", good), ("b", bad), ("c", torch.tensor([float("inf")])), ("d", torch.tensor([-float("inf")]))]
    assert nonfinite(tensors) == ["b", "c", "d"]
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.GroupNorm(1, 3))
    ema = copy.deepcopy(model)
    with StopOnSignal() as stop:
        guard = Guard(Dist(), stop, model, ema, torch.optim.Adam(model.parameters()))
        guard.check_weights(6)
        assert guard.poll() is False
        with torch.no_grad():
            ema[1].bias[2] = float("inf")
        guard.check_weights(7)
        with pytest.raises(NonFiniteError, match=r"^step 7: non-finite values in EMA 1\.bias; .*start it again"):
            guard.poll()


@pytest.mark.slow
def test_under_ddp_a_nan_on_one_rank_stops_every_rank(latents, tmp_path):
    """Two gloo ranks under torchrun; the poisoned sample lies in one rank's shard only, and log steps (where ranks
    used to agree) are never reached: both ranks stop at the same step with the same error, torchrun exits non-zero
    and nothing hangs; no checkpoint is written."""
    data, out = tmp_path / "data", tmp_path / "run"
    shutil.copytree(latents, data)
    poison(data, "hdf5")
    extra = ["--log-every", "1000", "--ckpt-every", "1000", "--batch-size", "4"]
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "training",
        *args(data, out, "hdf5", 40),
        *extra,
    ]
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    errors = re.findall(r"Error: (step \d+: the loss is nan on rank \d)", done.stderr)
    assert errors and set(errors) == {errors[0]}, done.stderr[-3000:]  # the same step and rank, said by each rank
    assert not (out / CKPT_NAME).exists() and not list(out.glob(".*tmp*"))
