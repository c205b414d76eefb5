"""Running the probe (probe.py) in the real training loop, then its measurements as bench result records: one per
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
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from ..grid.job import Job
from ..records.env import hardware, run_record, write_json_atomic
from ..records.results import finalize
from .probe import Feed, Probe, ProbeConfig, ProbeDone


def job_of(data: Path, key: dict, grid: str, **kind):
    fixed = dict(batch_size=key["batch_size"], model=key["model"], device=key["device"], compile=key["compile"],
                 precision=key["precision"], cpus=None, grid_id=grid, data=str(data))  # fmt: skip
    return Job(**({"workers": None, "pin_memory": None, "steps": 0, "warmup": 0} | fixed | kind))


def write_records(probe: Probe, data: Path, manifest: dict, grid: str, out: Path) -> dict:
    """One bench record per window (data-free r0 and r1, each confirmed candidate), the summary, then finalize."""
    out.mkdir(parents=True, exist_ok=True)
    run = run_record(probe.key["device"]) | {"command": "train --loader fastest (in-process probe)"}
    data_rec = {"path": str(Path(data).resolve()), "digest": manifest["digest"]["total"], "kind": manifest["kind"],
                "count": manifest["count"]}  # fmt: skip
    for n, w in enumerate(probe.windows):
        a, b = w["steps"]
        backend, workers, pin = w.get("config", (None, None, None))
        repeat = sum(v["kind"] == w["kind"] and v.get("config") == w.get("config") for v in probe.windows[:n])
        job = job_of(data, probe.key, grid, kind=w["kind"], backend=backend, workers=workers, pin_memory=pin,
                   steps=b - a, warmup=a, repeat=repeat)  # fmt: skip
        s = probe.timer.summary(skip=a, stop=b)
        figures = {"samples_per_s": job.batch_size * s.steps / s.wall_s, "starvation": s.to_dict(),
                   "first_batch_s": w.get("first_batch_s", 0.0)}  # fmt: skip
        figures |= probe.monitor.figures(*probe.timer.window(a, b))
        if figures.get("cpu_cores") is not None:
            figures["cpu_s_per_1k_samples"] = 1000 * figures["cpu_cores"] / figures["samples_per_s"]
        rec = {"name": f"fastest{grid}-{job.name}", "job": job.to_dict(), "data": data_rec, "run": run,
               "figures": figures, "probe": f"fastest-probe-{grid}.json"}  # fmt: skip
        write_json_atomic(out / f"{rec['name']}.json", rec)
    probe.times["total_s"] = time.perf_counter() - probe.t0
    summary = {"grid_id": grid, "config": asdict(probe.cfg), "times": probe.times, "ceilings": probe.ceilings,
               "failed_in_loop": probe.failed,
               "confirmed": sum(w["kind"] == "loader" for w in probe.windows), "run": run}  # fmt: skip
    write_json_atomic(out / f"fastest-probe-{grid}.json", summary)
    finalize(out)
    return summary


@contextlib.contextmanager
def _alone() -> Iterator[None]:
    """Under torchrun rank 0 probes while the other ranks wait for its answer: its loop must not join their group."""
    saved = os.environ.pop("WORLD_SIZE", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["WORLD_SIZE"] = saved


def run_probe(data: Path, manifest: dict, key: dict, out: Path, cfg: ProbeConfig | None = None,
              echo: Callable[[str], None] = print) -> dict:  # fmt: skip
    """Probe in this process and write the records to `out` (see the module docstring); returns the summary."""
    from training.config import TrainConfig
    from training.loop import main

    from ..grid.monitor import ResourceMonitor
    from ..grid.run_one import build

    cfg = cfg or ProbeConfig.for_device(key["device"])
    grid = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    resident = build(job_of(data, key, grid, kind="data_free", backend=None))[0].batch
    gpu_uuid = hardware(key["device"]).get("gpu_uuid")
    with ResourceMonitor(interval=0.1, gpu_uuid=gpu_uuid) as monitor, _alone():
        probe = Probe(Path(data), manifest, key, cfg, monitor, echo)
        with tempfile.TemporaryDirectory(prefix="gpufeed-fastest-") as run_dir:
            train = TrainConfig(data=Path(data), loader="gpu", model=key["model"], batch_size=key["batch_size"],
                                steps=2**62, precision=key["precision"], compile=key["compile"], device=key["device"],
                                timing_warmup=0, ckpt_every=0, sample_every=0, log_every=2**62, progress=False,
                                out=Path(run_dir))  # fmt: skip
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    stopped = main(train, loader=Feed(probe.run(resident))).stopped_by
            except ProbeDone:
                stopped = None
    if stopped:
        raise KeyboardInterrupt(f"{stopped} while `fastest` measured; nothing was written")

    summary = write_records(probe, Path(data), manifest, grid, out)
    _release(key["device"])
    return summary


def _release(device: str) -> None:
    """Give the probe's model, optimizer and graphs back before the real run allocates its own."""
    import gc

    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
