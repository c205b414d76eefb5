"""Running the probe (probe_feed.py) in the real training loop, then its measurements as bench result records: one per
window (data-free r0 and r1, each confirmed candidate), named `fastestGRID-<job name>` so they never replace a grid's
own, and `fastest-probe-GRID.json` with the ceilings, the candidates that failed and where the time went (no `job`
key: bench reads it as no result)."""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from common.atomic import write_json
from common.run_record import hardware, run_record

from ..grid.job import Job
from ..records.results import finalize
from .probe_feed import Feed, Probe, ProbeDone
from .probe_plan import ProbeConfig

# the key's fields that make the run `fastest` measures, as the records and the training loop take them
SHAPE = ("batch_size", "model", "device", "compile", "precision")


def job_of(data: Path, key: dict, grid: str, **kind):
    fixed = {k: key[k] for k in SHAPE} | dict(cpus=None, grid_id=grid, data=str(data))
    return Job(**({"workers": None, "pin_memory": None, "steps": 0, "warmup": 0} | fixed | kind))


def write_records(
    probe: Probe, data: Path, manifest: dict, grid: str, out: Path, figures: list[dict] | None = None, nproc: int = 1
) -> dict:
    """One bench record per window (data-free r0 and r1, each confirmed candidate), the summary, then finalize.
    `figures`: each window's, merged over the ranks under several (else this process's own)."""
    out.mkdir(parents=True, exist_ok=True)
    run = run_record(probe.key["device"]) | {"command": "train --loader fastest (in-process probe)"}
    data_rec = {
        "path": str(Path(data).resolve()),
        "digest": manifest["digest"]["total"],
        "kind": manifest["kind"],
        "count": manifest["count"],
    }
    figures = figures or probe.figures(probe.timer, probe.monitor, probe.windows)
    for n, (w, fig) in enumerate(zip(probe.windows, figures)):
        a, b = w["steps"]
        backend, workers, pin = w.get("config", (None, None, None))
        repeat = sum(v["kind"] == w["kind"] and v.get("config") == w.get("config") for v in probe.windows[:n])
        job = job_of(
            data,
            probe.key,
            grid,
            kind=w["kind"],
            backend=backend,
            workers=workers,
            pin_memory=pin,
            steps=b - a,
            warmup=a,
            repeat=repeat,
            nproc=nproc,
        )
        rec = {
            "name": f"fastest{grid}-{job.name}",
            "job": job.to_dict(),
            "data": data_rec,
            "run": run,
            "figures": fig,
            "probe": f"fastest-probe-{grid}.json",
        }
        write_json(out / f"{rec['name']}.json", rec)
    probe.times["total_s"] = time.perf_counter() - probe.t0
    summary = {
        "grid_id": grid,
        "config": asdict(probe.cfg),
        "times": probe.times,
        "ceilings": probe.ceilings,
        "failed_in_loop": probe.failed,
        "nproc": nproc,
        "confirmed": sum(w["kind"] == "loader" for w in probe.windows),
        "run": run,
    }
    write_json(out / f"fastest-probe-{grid}.json", summary)
    finalize(out)
    return summary


@contextlib.contextmanager
def _alone() -> Iterator[None]:
    """Without a group of its own, the probe's loop must not join the ranks of a training that waits for it."""
    saved = os.environ.pop("WORLD_SIZE", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["WORLD_SIZE"] = saved


def run_probe(
    data: Path,
    manifest: dict,
    key: dict,
    out: Path,
    cfg: ProbeConfig | None = None,
    echo: Callable[[str], None] = print,
) -> dict | None:
    """Probe in this process and write the records to `out` (see the module docstring); returns the summary. In a
    process group of several ranks (together.py) every rank calls this: rank 0 probes and writes, returning the
    summary, the others follow its steps and return None."""
    import torch.distributed as dist

    from training.config import measuring_run
    from training.loop import main

    from ..grid.monitor import ResourceMonitor
    from ..grid.run_one import build
    from . import together

    cfg = cfg or ProbeConfig.for_device(key["device"])
    ranks = dist.get_world_size() if dist.is_initialized() else 1
    grid = together.same(datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ"))
    resident = build(job_of(data, key, grid, kind="data_free", backend=None))[0].batch
    gpu_uuid = hardware(key["device"]).get("gpu_uuid")
    with ResourceMonitor(interval=0.1, gpu_uuid=gpu_uuid) as monitor, _alone() if ranks == 1 else nullcontext():
        probe = Probe(Path(data), manifest, key, cfg, monitor, echo)
        feed = Feed(probe.run(resident)) if ranks == 1 else together.feed(probe, resident)
        with tempfile.TemporaryDirectory(prefix="gpufeed-fastest-") as run_dir:
            train = measuring_run(
                run_dir,
                2**62,
                data=Path(data),
                loader="gpu",
                timing_warmup=0,
                **{k: key[k] for k in SHAPE},
            )
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    stopped = main(train, loader=feed).stopped_by
            except ProbeDone:
                stopped = None
        figures = None if ranks == 1 else together.merged_figures(probe, monitor)
    if stopped:
        raise KeyboardInterrupt(f"{stopped} while `fastest` measured; nothing was written")

    summary = None
    if figures is not None or ranks == 1:  # rank 0 writes (under several ranks, the figures merged on it)
        summary = write_records(probe, Path(data), manifest, grid, out, figures, ranks)
    _release(key["device"])
    return summary


def _release(device: str) -> None:
    """Give the probe's model, optimizer and graphs back before the real run allocates its own."""
    import gc

    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
