"""`train --grad-sync auto`, the default: the step graph where it can capture the step (compiled, CUDA, several
ranks), DDP elsewhere; the run says which it took and why, and its summary records it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from ranks_helpers import REPO, TORCHRUN, env

from training.grad_sync import choose

SEVERAL_GPUS = dict(compiled=True, device="cuda:0", world_size=4, vae=False)


@pytest.mark.parametrize(
    "change, way",
    [
        ({}, "step-graph"),
        ({"world_size": 2}, "step-graph"),
        ({"device": "cpu"}, "ddp"),
        ({"compiled": False}, "ddp"),
        ({"vae": True}, "ddp"),
        ({"world_size": 1}, "ddp"),
    ],
)
def test_auto_takes_the_step_graph_only_where_it_applies(change, way):
    """auto: the step graph for a compiled step on several GPUs; DDP on a CPU, eager, with --vae, and
    on one GPU (where torch.compile's own CUDA graphs measured faster); a reason every time."""
    taken, why = choose("auto", **(SEVERAL_GPUS | change))
    assert taken == way and why


def test_a_named_way_is_taken_as_named():
    """A way the user names is taken even where auto would choose another."""
    assert choose("ddp", **SEVERAL_GPUS) == ("ddp", "as --grad-sync asks")


@pytest.mark.slow
def test_two_cpu_ranks_without_grad_sync_take_ddp_and_say_so(synthetic_images, tmp_path):
    """Two gloo ranks under torchrun with no --grad-sync: DDP, one line saying so and why, and the summary records
    the way taken, not "auto"."""
    out = tmp_path / "run"
    opts = "--loader hdf5 --model tiny --batch-size 8 --steps 2 --precision fp32 --device cpu --workers 0"
    opts += " --no-pin-memory --sample-every 0 --ckpt-every 0 --timing-warmup 1 --no-progress"
    args = ["-m", "training", "--data", str(synthetic_images(64)), "--out", str(out), *opts.split()]
    cmd = [*TORCHRUN, "--standalone", "--nproc_per_node", "2", *args]
    done = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    said = [line for line in done.stderr.splitlines() if line.startswith("grad sync:")]
    assert said == ["grad sync: ddp (on the CPU: the step graph is a CUDA graph)"], done.stderr[-3000:]
    assert json.loads(Path(out / "summary.json").read_text())["config"]["grad_sync"] == "ddp"
