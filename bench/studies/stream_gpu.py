"""Finding 8: starvation when the data streams from object storage. A SeaweedFS server on 127.0.0.1, a shaped link in
front of it (bandwidth cap and added delay, bench.objectstore.throttle: `tc netem` is not allowed on the GPU machine),
the `stream` loader through it, in gpufeed's real training loop. Per model and core count one process pinned to
those cores runs every link condition: for each, a fresh loader with an empty cache runs two epochs, epoch 1 from the
store (cold) and epoch 2 from its cache (warm), and the data-free rate of the same model in the same process (a
resident batch) is measured first. bf16, eager or `--compile` (CUDA graphs; every cell compiles its model anew, from
the compile cache after the first); the bandwidth a GPU needs scales with its rate, so the table gives bytes per
sample and the rate too. The loader gets one worker fewer than the cores: the training process needs one to drive the
GPU (`--spare-cores 0` gives the loader a worker per core, for a model whose host work per step is small).

    python -m bench.studies.stream_gpu --out OUT --models ddpm_cifar10,dit_b2 --cores 2,4 --compile  # the GPU machine
    python -m bench.studies.stream_gpu --out OUT --models dit_b2 --cores 2 --compile --grad-sync step-graph
    python -m bench.studies.stream_gpu --out OUT --models tiny,none --cores 2 --images 2000 --device cpu   # CPU
    (--models none or none-latents: the loader alone, each batch fetched and nothing else)

Datasets: synthetic 32x32 images (3,072 bytes each) and synthetic latent moments of DiT-B/2's input at 256 px
(2 views x mean/std x 4x32x32 float16, 32 KiB each; random values: the loader and the model see shapes and bytes).
Every cell's raw JSON goes to OUT/, and OUT/stream_gpu.tar holds them all."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from training.config import GRAD_SYNC_WAYS

from .stream_data import download_manifest, prepare

DATA_OF = {"ddpm_cifar10": "images", "tiny": "images", "dit_b2": "latents", "dit_tiny": "latents"}
DATA_OF |= {"none": "images", "none-latents": "latents"}  # the loader alone, no model


def cell(job: dict) -> dict:
    """One link condition in this (pinned) process: a fresh loader, epoch 1 cold, epoch 2 warm."""
    from bench.objectstore.throttle import ShapedLink
    from loaders import build_loader

    link = ShapedLink(job["server_port"], job["rate"] or None, job["delay"], cpus=job["link_cpus"]).start()
    os.environ["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{link.port}"
    try:
        loader = build_loader(
            "stream",
            job["url"],
            batch_size=job["batch_size"],
            workers=job["workers"],
            pin_memory=job["device"].startswith("cuda"),
            device=job["device"],
            seed=0,
            prefetch=job["prefetch"],
        )
        n = len(loader)
        result = run_alone(loader, 2 * n) if job["model"].startswith("none") else run_model(loader, job, 2 * n)
        loader.close()
        result["link_bytes"] = link.bytes_down  # about 2x shard_bytes: epoch 2 read the store again, not its cache
        manifest = json.loads((Path(job["local_manifest"]) / "manifest.json").read_text())
        result["shard_bytes"] = sum(f["bytes"] for f in manifest["formats"]["stream"]["files"])
    finally:
        link.stop()
    from training.step_graph import WARMUP_STEPS

    timer = result.pop("timer")
    # start-up; compiled, CUDA graphs are recorded on the 2nd and 3rd call too; the step graph captures after its
    # eager warm-up steps
    first = WARMUP_STEPS + 1 if job["grad_sync"] == "step-graph" else 3 if job["compile"] else 1
    for epoch, (a, b) in (("cold", (first, n)), ("warm", (n, 2 * n))):
        s = timer.summary(skip=a, stop=b)
        result[epoch] = {"samples_per_s": job["batch_size"] * s.steps / s.wall_s, **s.to_dict()}
    return result | {"steps_per_epoch": n}


def run_model(loader, job: dict, steps: int) -> dict:
    from training.config import measuring_run
    from training.loop import main
    from training.starvation import latest_timer

    with tempfile.TemporaryDirectory() as run:
        cfg = measuring_run(
            run,
            steps,
            data=job["url"],
            loader="stream",
            model=job["model"],
            batch_size=job["batch_size"],
            precision=job["precision"],
            device=job["device"],
            compile=job["compile"],
            grad_sync=job["grad_sync"],
            timing_warmup=1,
        )
        summary = main(cfg, loader=loader)
    return {"timer": latest_timer(), "samples_per_s_total": summary.samples_per_s}


def run_alone(loader, steps: int) -> dict:
    """--model none: each batch fetched and reduced, nothing else: the loader's ceiling through the link."""
    import torch

    from training.data import EpochStream
    from training.starvation import StepTimer

    timer, stream = StepTimer(loader.opts.device), EpochStream(loader)
    sink = torch.zeros((), device=loader.opts.device)
    for _ in range(steps):
        batch = timer.fetch(stream)
        timer.step_begin()
        sink += batch.x.float().mean()
        timer.step_end()
    return {"timer": timer}


def data_free(job: dict) -> dict:
    """The same loop on a resident batch: the rate each cell is compared with."""
    import torch

    from bench.grid.run_one import ResidentLoader
    from loaders.base import Batch

    shape = {"images": (3, 32, 32), "latents": (4, 32, 32)}[job["data"]]
    x = torch.randn(job["batch_size"], *shape, device=job["device"])
    y = torch.zeros(job["batch_size"], dtype=torch.int64, device=job["device"])
    steps = job["steps"]
    result = run_model(ResidentLoader(Batch(x, y), steps), job | {"url": job["local_manifest"]}, steps)
    s = result.pop("timer").summary(skip=steps // 3)  # compile, cuDNN's autotuning, CUDA graphs' recording
    return {"samples_per_s": job["batch_size"] * s.steps / s.wall_s}


def group(job: dict) -> list[dict]:
    """Every cell of one (model, cores), in this process, pinned to its cores."""
    os.sched_setaffinity(0, job["cpus"])
    out = []
    if not job["model"].startswith("none"):
        out.append({"kind": "data_free", **data_free(job)})
    for rate in job["rates"]:
        for delay in job["delays"]:
            t0 = time.perf_counter()
            r = cell(job | {"rate": rate, "delay": delay})
            out.append({"kind": "stream", "rate": rate, "delay": delay, "wall_s": time.perf_counter() - t0, **r})
            print(json.dumps(out[-1]), flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--models", default="ddpm_cifar10,dit_b2")
    p.add_argument("--cores", default="2,4")
    p.add_argument("--rates", default="100e6,1e9,0", help="bytes/s; 0: no cap")
    p.add_argument("--delays", default="0,0.01,0.05", help="seconds added each way")
    p.add_argument("--images", type=int, default=16384)
    p.add_argument("--latents", type=int, default=4096)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--prefetch", type=int, default=2)
    p.add_argument(
        "--spare-cores",
        type=int,
        default=1,
        help="cores left to the training process: the loader gets the rest as workers (at least 1); 0 for a model "
        "whose host work per step is small",
    )
    p.add_argument("--device", default="cuda")
    p.add_argument("--compile", action="store_true", help="torch.compile with CUDA graphs, as bench --compile")
    p.add_argument(
        "--grad-sync",
        choices=GRAD_SYNC_WAYS,
        default="ddp",
        help="train --grad-sync: step-graph makes the whole step one CUDA graph, one launch a step for the host",
    )
    p.add_argument("--group", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.group:
        job = json.loads(a.group)
        (a.out / job["name"]).write_text(json.dumps({"job": job, "cells": group(job)}, indent=1))
        return
    run_all(a)


def run_all(a) -> None:
    import signal

    from bench.objectstore.seaweed import SeaweedServer
    from common.run_record import run_record

    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a timeout's SIGTERM still stops the server
    a.out.mkdir(parents=True, exist_ok=True)
    every = sorted(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory(prefix="stream-gpu-") as tmp, SeaweedServer(Path(tmp) / "s3") as server:
        tmp = Path(tmp)
        os.environ.update(server.env())
        import boto3

        boto3.client("s3").create_bucket(Bucket="study")
        t0 = time.perf_counter()
        prepare(server, "study", a.images, a.latents, tmp)
        for data in ("images", "latents"):  # the manifest only: data_spec of the data-free runs reads it
            (tmp / f"{data}-manifest").mkdir()
            (tmp / f"{data}-manifest" / "manifest.json").write_text(
                json.dumps(json.loads(download_manifest(f"s3://study/{data}")))
            )
        print(f"prepared in {time.perf_counter() - t0:.1f} s", flush=True)
        for model in a.models.split(","):
            for cores in map(int, a.cores.split(",")):
                data = DATA_OF[model]
                cpus, link = every[:cores], every[cores:] or every
                workers = max(1, cores - a.spare_cores)
                job = {
                    "name": f"{model}-{cores}cores"
                    + ("" if a.spare_cores == 1 else f"-{workers}workers")
                    + ("" if a.grad_sync == "ddp" else f"-{a.grad_sync}")
                    + ".json",
                    "model": model,
                    "cpus": cpus,
                    "link_cpus": link,
                    "data": data,
                    "url": f"s3://study/{data}",
                    "local_manifest": str(tmp / f"{data}-manifest"),
                    "server_port": server.port,
                    "workers": workers,
                    "batch_size": a.batch_size,
                    "prefetch": a.prefetch,
                    "device": a.device,
                    "steps": 150,
                    "compile": a.compile,
                    "grad_sync": a.grad_sync,
                    "precision": "bf16" if a.device.startswith("cuda") else "fp32",
                    "rates": [float(r) for r in a.rates.split(",")],
                    "delays": [float(d) for d in a.delays.split(",")],
                }
                subprocess.run(
                    [sys.executable, "-m", "bench.studies.stream_gpu", "--out", str(a.out), "--group", json.dumps(job)],
                    check=False,
                )
    (a.out / "environment.json").write_text(
        json.dumps(run_record(a.device) | {"args": vars(a) | {"out": str(a.out)}}, indent=1, default=str)
    )
    with tarfile.open(a.out / "stream_gpu.tar", "w") as tar:
        for path in sorted(a.out.glob("*.json")):
            tar.add(path, arcname=path.name)


if __name__ == "__main__":
    main()
