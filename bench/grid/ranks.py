"""`bench loaders --nproc N`: one configuration as N data-parallel ranks, a fresh torchrun per configuration.

Each rank is `bench.grid.run_one` as torchrun starts it: its own shard of the data, its own GPU (cuda:LOCAL_RANK), and
with `--cpus C` its own C cores (rank r takes cores [r*C, (r+1)*C) of those allowed), as N trainers share a host. Every
rank writes its own record under RESULTS/.ranks/; once torchrun has exited the grid merges them into the configuration's
one JSON: rates and host costs add up over ranks; starvation is the time every rank lost to some rank's input
(`starvation_any`: under DDP every step waits for the slowest rank) and host_behind the mean over ranks, each with the
mean and worst rank of the ranks' own figures beside it; `ranks` keeps each rank's own figures."""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

from common.atomic import write_json

from .job import Job

RANKS_DIR = ".ranks"  # hidden: load_records reads RESULTS/*.json only, and a rank's record is not a result
SUMMED = ("cpu_cores", "peak_mem_mib")  # host costs: every rank's process tree is its own
WORST = ("first_batch_s", "build_s", "warmup_s", "process_s", "torch_peak_memory_mib")  # the last rank to be ready
MEAN = ("nvml_gpu_util_pct", "nvml_power_w", "nvml_gpu_mem_mib", "nvml_idle")  # each rank samples its own GPU


def command(job: Job, out: Path) -> list[str]:
    """The torchrun command line that runs `job` on job.nproc ranks of this host (a free port of its own)."""
    run_one = ["-m", "bench.grid.run_one", "--job", json.dumps(job.to_dict()), "--out", str(out)]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        str(job.nproc),
        "--max-restarts",
        "0",
        *run_one,
    ]


def rank_path(out: Path, rank: int) -> Path:
    return out.parent / RANKS_DIR / f"{out.stem}.rank{rank}.json"


def rank_cores(allowed: list[int], cpus: int, rank: int) -> list[int]:
    """Rank `rank`'s own `cpus` cores of those allowed: disjoint sets, so ranks do not share cores."""
    if (rank + 1) * cpus > len(allowed):
        raise ValueError(
            f"--cpus {cpus} for rank {rank}: {(rank + 1) * cpus} cores needed, {len(allowed)} allowed; "
            f"--nproc x --cpus must not exceed the cores available"
        )
    return sorted(allowed)[rank * cpus : (rank + 1) * cpus]


def merge(job: Job, out: Path) -> None:
    """Write the configuration's record from its ranks' records (or an error naming the ranks that failed); the
    ranks' records are removed. Nothing is written when no rank wrote anything (the grid then says how it ended)."""
    paths = [rank_path(out, r) for r in range(job.nproc)]
    recs = [json.loads(p.read_text()) if p.exists() else None for p in paths]
    clean(job, out)
    if out.exists() or all(r is None for r in recs):
        return
    bad = [
        f"rank {r}: {rec['error'] if rec else 'wrote nothing'}"
        for r, rec in enumerate(recs)
        if rec is None or "error" in rec
    ]
    if bad:
        write_json(out, {"name": job.name, "job": job.to_dict(), "error": "; ".join(bad)})
        return
    merged = recs[0] | {"name": job.name, "job": job.to_dict(), "figures": merge_figures([r["figures"] for r in recs])}
    merged["run"] = recs[0]["run"] | {"cpus_pinned": [r["run"]["cpus_pinned"] for r in recs]}
    write_json(out, merged)


def clean(job: Job, out: Path) -> None:
    for r in range(job.nproc):
        rank_path(out, r).unlink(missing_ok=True)


def merge_figures(figs: list[dict]) -> dict:
    """One record's figures from every rank's own."""
    out = dict(figs[0])
    out["samples_per_s"] = sum(f["samples_per_s"] for f in figs)
    for keys, how in ((SUMMED, sum), (WORST, max), (MEAN, statistics.mean)):
        for k in keys:
            vals = [f[k] for f in figs if f.get(k) is not None]
            out[k] = how(vals) if vals else None
    if out.get("cpu_cores") is not None:
        out["cpu_s_per_1k_samples"] = 1000 * out["cpu_cores"] / out["samples_per_s"]
    # each rank's own starvation: under the training loop `starvation` is already the group's (starvation_any)
    own = [
        f["starvation"] | {"starvation": f["starvation"].get("starvation_own", f["starvation"]["starvation"])}
        for f in figs
    ]
    s = dict(own[0])
    for key in ("starvation", "host_behind"):
        have = [(r, o[key]) for r, o in enumerate(own) if o.get(key) is not None]
        worst = max(have, key=lambda rv: rv[1], default=(None, None))
        mean = statistics.mean(v for _, v in have) if have else None
        s |= {key: mean, f"{key}_mean": mean, f"{key}_max": worst[1], f"{key}_worst_rank": worst[0]}
    if s.get("starvation_any") is not None:  # every rank held at the all-reduce by the late one: the group's figure
        s["starvation"] = s["starvation_any"]
    s["wait_median_ms"] = statistics.mean(o["wait_median_ms"] for o in own)
    s |= {k: max(o[k] for o in own) for k in ("wait_p95_ms", "wait_max_ms")}
    out["starvation"] = s
    out["nproc"] = len(figs)
    out["ranks"] = [
        {
            "rank": r,
            "samples_per_s": f["samples_per_s"],
            "starvation": own[r]["starvation"],
            "host_behind": f["starvation"].get("host_behind"),
            "wait_median_ms": f["starvation"]["wait_median_ms"],
            "cpu_cores": f.get("cpu_cores"),
            "param_checksum": f.get("param_checksum"),
        }
        for r, f in enumerate(figs)
    ]
    return out


def local_rank() -> tuple[int, int]:
    """(local rank, world size) as torchrun set them; (0, 1) in a plain process."""
    return int(os.environ.get("LOCAL_RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
