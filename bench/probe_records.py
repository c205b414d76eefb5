"""The probe's measurements as bench result records: one per window (data-free r0 and r1, each confirmed candidate),
named `fastestGRID-<job name>` so they never replace a grid's own, and `fastest-probe-GRID.json` with the ceilings,
the candidates that failed and where the time went (no `job` key: bench reads it as no result)."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .probe import Probe


def job_of(data: Path, key: dict, grid: str, **kind):
    from .grid.job import Job

    fixed = dict(batch_size=key["batch_size"], model=key["model"], device=key["device"], compile=key["compile"],
                 precision=key["precision"], cpus=None, grid_id=grid, data=str(data))  # fmt: skip
    return Job(**({"workers": None, "pin_memory": None, "steps": 0, "warmup": 0} | fixed | kind))


def write_records(probe: Probe, data: Path, manifest: dict, grid: str, out: Path) -> dict:
    """One bench record per window (data-free r0 and r1, each confirmed candidate), the summary, then finalize."""
    from .records.env import run_record, write_json_atomic
    from .records.results import finalize

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
