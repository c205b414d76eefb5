"""One bench configuration in a fresh process: `python -m bench.grid.run_one --job JSON --out FILE` (the runner's
child).

The process pins itself to `job.cpus` cores before importing torch (its thread pools size themselves then, and
DataLoader workers, FFCV and DALI threads inherit the affinity), builds the loader, and runs the real training loop
(`training.loop.main` with the loader injected) or, for `--model none`, a trivial consumer timed by the same
StepTimer. A data-free job injects a loader that yields one batch already on the device, again and again.
The record is written to FILE atomically, so an interrupted run leaves either a complete JSON or none."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import psutil

from common.atomic import write_json

from .job import Job
from .ranks import local_rank, rank_cores, rank_path


def pin_cpus(n: int, rank: int = 0) -> list[int]:
    """Restrict this process (and every child it starts) to n cores it may use: the first n, or under torchrun the
    rank's own n (bench.grid.ranks.rank_cores)."""
    allowed = sorted(os.sched_getaffinity(0))
    if n > len(allowed):
        raise ValueError(f"--cpus {n}: only {len(allowed)} cores are available to this process")
    cores = rank_cores(allowed, n, rank)
    os.sched_setaffinity(0, cores)
    return cores


class ResidentLoader:
    """The data-free baseline: one batch already on the device, handed out `length` times per epoch."""

    def __init__(self, batch, length: int, empty_text=None) -> None:
        self.batch, self.length, self.empty_text = batch, length, empty_text

    def text(self, captions: list[str]):
        """The empty caption's `text`, taken from the real loader (a text model's caption dropout needs no other)."""
        if list(captions) != [""]:
            raise ValueError("the data-free loader holds the empty caption's text alone")
        return self.empty_text

    def __iter__(self):
        return (self.batch for _ in range(self.length))

    def __len__(self) -> int:
        return self.length

    def set_epoch(self, epoch: int) -> None:
        pass

    def close(self) -> None:
        pass


# where a data-free run takes its one real batch: the first backend whose format the data has, those reading without
# workers first; s3:// data has the stream backend alone
DATA_FREE_SOURCES = (("hdf5", "hdf5"), ("gpu", "files"), ("ffcv", "ffcv"), ("dali", "dali"), ("stream", "stream"))


def build(job: Job):
    """(loader, seconds to build it). A data-free job takes one real batch, so its shape is the loaders' own."""
    from loaders import build_loader

    opts = dict(batch_size=job.batch_size, device=job.device, seed=job.seed)
    if job.vae:  # clips reach `train --vae` as waves: it computes AudioLDM's mel itself
        opts["representation"] = "wave"
    t0 = time.perf_counter()
    if job.kind == "loader":  # under torchrun each rank reads its own shard, as training does
        opts |= {"rank": int(os.environ.get("RANK", "0")), "world_size": int(os.environ.get("WORLD_SIZE", "1"))}
        loader = build_loader(job.backend, job.data, workers=job.workers or 0, pin_memory=bool(job.pin_memory), **opts)
        return loader, time.perf_counter() - t0
    from dataprep.remote import is_remote

    formats = data_manifest(job.data)["formats"]  # any format gives the batch: data converted to ffcv alone too
    source = "stream" if is_remote(job.data) else next((b for b, f in DATA_FREE_SOURCES if f in formats), "hdf5")
    with build_loader(source, job.data, workers=int(source in ("ffcv", "dali")), pin_memory=False, **opts) as real:
        first = next(iter(real))
        batch = type(first)(first.x.clone(), first.y.clone(), first.text)  # a text model's steps need the text
        empty = real.text([""]) if first.text is not None else None
    return ResidentLoader(batch, max(1, len(real)), empty), time.perf_counter() - t0


def consume(loader, job: Job) -> dict:
    """--model none: fetch, one trivial reduction on the device per batch. The loader's ceiling."""
    import torch

    from training.data import EpochStream
    from training.starvation import StepTimer

    timer, stream = StepTimer(job.device), EpochStream(loader)
    sink = torch.zeros((), device=job.device)
    t0, first = time.perf_counter(), None
    for _ in range(job.warmup + job.steps):
        batch = timer.fetch(stream)
        first = first if first is not None else time.perf_counter() - t0
        timer.step_begin()
        sink += batch.x.float().mean()
        timer.step_end()
    s = timer.summary(skip=job.warmup)
    return {"samples_per_s": job.batch_size * s.steps / s.wall_s, "starvation": s.to_dict(), "first_batch_s": first}


def train(loader, job: Job) -> dict:
    """The real training loop with the loader injected; checkpoints, samples and log lines off."""
    from training.config import measuring_run
    from training.loop import main

    with tempfile.TemporaryDirectory(prefix="gpufeed-bench-") as run_dir:
        cfg = measuring_run(
            run_dir,
            job.warmup + job.steps,
            data=job.data,  # TrainConfig keeps an s3:// URL as text, makes a Path of a directory
            loader=job.backend or "gpu",
            model=job.model,
            batch_size=job.batch_size,
            precision=job.precision,
            compile=job.compile,
            workers=job.workers or 0,
            pin_memory=bool(job.pin_memory),
            device=job.device,
            seed=job.seed,
            timing_warmup=job.warmup,
            vae=job.vae,
            grad_sync=job.grad_sync,
        )
        summary = main(cfg, loader=loader).to_dict()
    if summary["stopped_by"]:  # Ctrl-C or SIGTERM cut the run short: its figures are not a measurement
        raise KeyboardInterrupt(summary["stopped_by"])
    kept = {k: v for k, v in summary.items() if k not in ("losses", "config", "backend")}
    own = summary["ranks"][int(os.environ.get("RANK", "0"))]["samples_per_s"]  # the loop's rate is all ranks'
    return kept | {"samples_per_s": own, "compile_mode": "reduce-overhead" if job.compile else None}


def measure(job: Job, trace_path: Path) -> dict:
    """Every figure of one configuration: rates and starvation, resources over the measured steps, cross-check."""
    import torch

    from common.run_record import hardware
    from training.starvation import latest_timer

    from .crosscheck import ProfiledLoader
    from .monitor import ResourceMonitor

    cuda = job.device.startswith("cuda")
    with ResourceMonitor(gpu_uuid=hardware(job.device).get("gpu_uuid")) as monitor:  # the GPU the record names
        loader, build_s = build(job)
        fed = ProfiledLoader(loader, job.warmup, trace_path) if job.crosscheck else loader
        try:
            figures = consume(fed, job) if job.model == "none" else train(fed, job)
            trace = fed.finish() if job.crosscheck else None
        finally:
            loader.close()
    timer = latest_timer()
    figures |= {"build_s": build_s, "first_batch_s": build_s + figures["first_batch_s"]}  # worker start included
    figures["warmup_s"] = timer.window(0, job.warmup)[1] - timer.window(0, job.warmup)[0] if job.warmup else 0.0
    figures |= monitor.figures(*timer.window(job.warmup))
    if figures.get("other_cores") is not None:  # other programs' share of the cores this run may use
        figures["other_share"] = figures["other_cores"] / len(os.sched_getaffinity(0))
    if figures.get("cpu_cores") is not None:
        figures["cpu_s_per_1k_samples"] = 1000 * figures["cpu_cores"] / figures["samples_per_s"]
    if cuda:
        figures["torch_peak_memory_mib"] = torch.cuda.max_memory_allocated(job.device) / 2**20
    if "nvml_gpu_util_pct" in figures:  # NVML's busy share counts gaps inside steps as busy: a loose bound
        figures["nvml_idle"] = 1.0 - figures["nvml_gpu_util_pct"] / 100.0
    if trace is not None:
        figures["crosscheck"] = crosscheck(trace, timer, job.warmup)
    return figures


def crosscheck(trace: Path, timer, warmup: int) -> dict:
    """Trace-derived starvation next to the CUDA-event figure over exactly the same steps."""
    from .crosscheck import load_trace, trace_starvation

    try:
        tr = trace_starvation(load_trace(trace))
    except (ValueError, KeyError, OSError) as e:  # a trace this torch writes differently: say so, keep the run
        return {"trace": trace.name, "error": f"{type(e).__name__}: {e}"}
    a = warmup + tr["first_fetch"]
    same = timer.summary(skip=a, stop=a + tr["steps"])
    diff = 100 * (tr["starvation"] - same.starvation)
    return tr | {"trace": trace.name, "events_starvation": same.starvation, "difference_pp": diff}


def data_manifest(data: str) -> dict:
    """The manifest, checked: a directory's, or an s3:// prefix's through dataprep.remote."""
    from dataprep.manifest import load_manifest
    from dataprep.remote import is_remote, load_remote_manifest

    return load_remote_manifest(data) if is_remote(data) else load_manifest(data)


def record(job: Job, out: Path) -> dict:
    from common.run_record import run_record
    from dataprep.remote import is_remote

    manifest = data_manifest(job.data)
    rec = {"name": job.name, "job": job.to_dict()}
    rec["data"] = {
        "path": job.data if is_remote(job.data) else str(Path(job.data).resolve()),  # a URL as given
        "digest": manifest["digest"]["total"],
        "kind": manifest["kind"],
        "count": manifest["count"],
    }
    rec["run"] = run_record(job.device) | {
        "command": os.environ.get("GPUFEED_BENCH_COMMAND", " ".join(sys.argv)),
        "cpus_pinned": sorted(os.sched_getaffinity(0)),
    }
    rec["compile_cache"] = compile_cache() if job.compile else None
    rec["figures"] = measure(job, out.parent / "traces" / f"{job.name}.trace.json.gz")
    # interpreter start to here: what a configuration costs beyond its steps (imports, compile, workers)
    rec["figures"]["process_s"] = time.time() - psutil.Process().create_time()
    return rec


def compile_cache() -> dict:
    """Where torch.compile's warm-up went: a persistent inductor cache shared by the grid (set by bench.grid.runner)."""
    from common.torch_private import compile_caches_on

    return {
        "kind": "persistent inductor FX graph and AOT autograd caches",
        "dir": os.environ.get("TORCHINDUCTOR_CACHE_DIR"),
    } | compile_caches_on()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--job", required=True, help="a bench.grid.job.Job as JSON")
    p.add_argument("--out", required=True, type=Path, help="the result JSON to write")
    args = p.parse_args(argv)
    job = Job.from_dict(json.loads(args.job))
    rank, world = local_rank()
    out = rank_path(args.out, rank) if world > 1 else args.out  # bench.grid.ranks merges the ranks' records
    out.parent.mkdir(parents=True, exist_ok=True)
    if job.cpus:
        pin_cpus(job.cpus, rank)  # before torch is imported: its thread pools size themselves to the affinity
    if world > 1 and job.device.startswith("cuda"):  # one GPU per rank, as training.ddp.setup places them
        job = dataclasses.replace(job, device=f"cuda:{rank}")
    if job.compile:  # as `train --compile` does, before torch is imported (training.bytecode)
        from training.bytecode import keep_bytecode
        from training.config import default_compile_cache

        keep_bytecode(default_compile_cache())
    import torch

    if job.cpus:
        torch.set_num_threads(job.cpus)
    if job.device.startswith("cuda:") and torch.cuda.is_available():  # plain "cuda" is already the current device
        torch.cuda.set_device(torch.device(job.device))  # the step timer's events record on the current device
    try:
        rec = record(job, out)
    except Exception as e:  # recorded, so the grid goes on and the report shows which configuration failed
        import traceback

        rec = {"name": job.name, "job": job.to_dict(), "error": f"{type(e).__name__}: {e}"}
        traceback.print_exc()
    write_json(out, rec)
    return 1 if "error" in rec else 0


if __name__ == "__main__":
    sys.exit(main())
