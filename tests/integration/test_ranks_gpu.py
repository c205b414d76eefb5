"""Several GPUs of one host, NCCL: `dataprep convert --vae` on 2 and 4 ranks writes what one GPU writes, each rank on
its own GPU with its CUDA graphs, and says how much faster; a rank killed mid-run stops the other within a minute and
the run resumes; every `--grad-sync` keeps compiled ranks (CUDA graphs) in step with DDP's losses.

With $GPUFEED_TEST_RECORDS set, each test also writes what it measured there as JSON (bench/studies/scaling.sh)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import torch
from ranks_helpers import TORCHRUN, Job, gone_within

pytestmark = [pytest.mark.gpu, pytest.mark.slow]
CONVERT_N = int(os.environ.get("GPUFEED_CONVERT_N", "4096"))  # CIFAR-10 images made 256 px: ~7 s on one H100


def needs(gpus: int) -> None:
    if torch.cuda.device_count() < gpus:
        pytest.skip(f"needs {gpus} GPUs, {torch.cuda.device_count()} here")


def record(name: str, what: dict) -> None:
    where = os.environ.get("GPUFEED_TEST_RECORDS")
    print(json.dumps({name: what}))
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        (Path(where) / f"{name}.json").write_text(json.dumps(what, indent=1))


def convert(nproc: int, cifar: Path, vae: Path, out: Path) -> tuple[dict, float, str]:
    """(manifest, wall seconds, stderr) of `dataprep convert --vae` on `nproc` GPUs (one plain process for 1)."""
    args = [
        "-m",
        "dataprep",
        "convert",
        "--input",
        str(cifar / "train"),
        "--size",
        "256",
        "--limit",
        str(CONVERT_N),
        "--format",
        "hdf5",
        "--vae",
        str(vae),
        "--batch-size",
        "64",
        "--output",
        str(out),
        "--quiet",
    ]
    cmd = [*TORCHRUN, "--standalone", "--nproc_per_node", str(nproc), *args] if nproc > 1 else [TORCHRUN[0], *args]
    t0 = time.perf_counter()
    job = Job(cmd)
    code = job.proc.wait(timeout=480)
    wall = time.perf_counter() - t0
    assert code == 0, job.stderr[-4000:]
    return json.loads((out / "manifest.json").read_text()), wall, job.stderr


@pytest.fixture(scope="module")
def one_gpu(cifar_jpg_root, sd_vae, tmp_path_factory):
    return convert(1, cifar_jpg_root, sd_vae, tmp_path_factory.mktemp("one") / "latents")


@pytest.mark.parametrize("nproc", [2, 4])
def test_convert_vae_on_several_gpus_writes_what_one_gpu_writes(cifar_jpg_root, sd_vae, one_gpu, tmp_path, nproc):
    """The conversion of CIFAR-10 to latents (256 px, the SD-shaped VAE, batch 64): every rank on its own GPU (no NCCL
    "Duplicate GPU"), every batch shape captured as a CUDA graph (no "encoding them eagerly"), the same dataset as
    one GPU's (equal digests), and faster: the encoding pace and the wall time against one GPU's are reported."""
    needs(nproc)
    one, one_wall, one_err = one_gpu
    many, wall, err = convert(nproc, cifar_jpg_root, sd_vae, tmp_path / "latents")
    for text in (one_err, err):
        assert "Duplicate GPU" not in text and "encoding them eagerly" not in text, text[-3000:]
    assert many["latent"]["encoded"]["processes"] == nproc
    assert many["digest"]["total"] == one["digest"]["total"]
    pace = many["timings"]["encoded_per_s"] / one["timings"]["encoded_per_s"]
    record(
        f"convert_vae_{nproc}gpus",
        {
            "images": CONVERT_N,
            "one_gpu_encoded_per_s": one["timings"]["encoded_per_s"],
            "encoded_per_s": many["timings"]["encoded_per_s"],
            "pace_ratio": pace,
            "one_gpu_wall_s": one_wall,
            "wall_s": wall,
            "wall_ratio": one_wall / wall,
            "goal_4gpus": 3.6,
        },
    )
    assert pace > 1.0, f"{nproc} GPUs encoded at {pace:.2f}x one GPU's pace"


def train_args(data: Path, out: Path, steps: int, *extra: str) -> list[str]:
    opts = f"--loader gpu --model tiny --batch-size 32 --steps {steps} --device cuda --sample-every 0 --log-every 1"
    opts += " --timing-warmup 2 --lr 1e-3 --warmup 0 --no-progress"
    return ["-m", "training", "--data", str(data), "--out", str(out), *opts.split(), *extra]


def test_a_killed_rank_stops_the_other_nccl_rank_within_a_minute(synthetic_images, tmp_path):
    """Two GPUs (NCCL), rank 1 SIGKILLed after a checkpoint: rank 0, its all-reduce never completing, ends within 60 s
    (torchrun's SIGTERM cannot interrupt a wait on the GPU; the heartbeat or torchrun's SIGKILL ends it), torchrun
    names rank 1, and `--resume` finishes the run from the checkpoint."""
    needs(2)
    data, out = synthetic_images(512), tmp_path / "run"
    two = [*TORCHRUN, "--standalone", "--nproc_per_node", "2", "--max-restarts", "0"]
    job = Job([*two, *train_args(data, out, 400, "--ckpt-every", "20")])
    try:
        victim, survivor = job.rank_pid(1), job.rank_pid(0)
        job.wait_for(r"step (4|6|8)0: checkpoint written", timeout=300)
        os.kill(victim, signal.SIGKILL)
        took = gone_within(survivor, 60)
        job.proc.wait(timeout=90)
        job.wait_for(r"rank\s*: 1 \(local_rank: 1\)")
    finally:
        job.kill_all()
    record("rank_kill_nccl", {"survivor_gone_s": took, "torchrun_exit": job.proc.returncode})
    assert took is not None, f"rank 0 still runs 60 s after rank 1 was killed: {job.stderr[-3000:]}"
    resumed = Job([*two, *train_args(data, out, 400, "--ckpt-every", "20", "--resume")])
    assert resumed.proc.wait(timeout=300) == 0, resumed.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["start_step"] >= 40 and summary["start_step"] % 20 == 0 and summary["steps"] > 0


EVERY_WAY = """
import json, sys
import torch, torch._dynamo, torch.distributed as dist
from training.config import TrainConfig
from training.loop import main
rank = int(__import__("os").environ["LOCAL_RANK"])
torch.cuda.set_device(rank)
dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
out = {}
for how in ["ddp", *sys.argv[3].split(",")]:
    torch._dynamo.reset()  # each way compiles its own graphs (one process, as the fresh processes of a bench would)
    s = main(TrainConfig(data=sys.argv[1], out=f"{sys.argv[2]}/{how}", loader="gpu", model="tiny", batch_size=32,
                         steps=40, device="cuda", compile=True, sample_every=0, ckpt_every=0, log_every=1, lr=1e-3,
                         warmup=0, timing_warmup=10, grad_sync=how, progress=False))
    out[how] = {"losses": s.losses, "checksums": [r["param_checksum"] for r in s.ranks], "rate": s.samples_per_s}
if dist.get_rank() == 0:
    print(json.dumps(out))
dist.destroy_process_group()
"""


WAY_GROUPS = ("step-graph",)  # with "ddp": every --grad-sync way (test_grad_sync.py)


@pytest.mark.parametrize("ways", WAY_GROUPS)
def test_every_grad_sync_compiled_with_cuda_graphs_trains_as_ddp(synthetic_images, tmp_path, ways):
    """`tiny` compiled with CUDA graphs (reduce-overhead, or the whole step's), bf16, on 2 GPUs, 40 steps of DDP and
    of each way: the ranks end with identical weights, and the losses follow DDP's (bf16 kernels are not bitwise
    reproducible run to run, so within 2% at every step). Each group of ways runs against a DDP run of its own, so
    that a group fits where GPU minutes are few."""
    nproc = 2
    needs(nproc)
    script = tmp_path / "every_way.py"
    script.write_text(EVERY_WAY)
    job = Job(
        [
            *TORCHRUN,
            "--standalone",
            "--nproc_per_node",
            str(nproc),
            str(script),
            str(synthetic_images(512)),
            str(tmp_path),
            ways,
        ]
    )
    assert job.proc.wait(timeout=900) == 0, job.stderr[-4000:]
    runs = json.loads("".join(job.out).strip().splitlines()[-1])
    record(f"grad_sync_compiled_{nproc}gpus_{ways}", runs)
    ddp = runs["ddp"]
    for how, run in runs.items():
        assert run["checksums"][0] == run["checksums"][1], f"{how}: the ranks' weights differ"
        assert run["losses"] == pytest.approx(ddp["losses"], rel=2e-2), how
