"""Reading a results directory: the per-run JSONs, grouped into configurations (median and range over repeats),
each loader run set against the data-free rate of its model and batch size, and a verdict in words (verdicts.py).
Profiled cross-check runs are kept out of the headline figures (the profiler slows the host) and reported on
their own."""

from __future__ import annotations

import json
import statistics
import warnings
from collections import defaultdict
from pathlib import Path

from common.atomic import write_json
from common.paths import RESULTS, inside, open_regular
from common.text import printable

from .rows import KNOBS, SCENARIO, WAITS, flat, write_csv
from .verdicts import explained, verdict


class ResultWarning(UserWarning):
    """A result file that cannot be used: skipped, and named."""


def load_records(results_dir: Path) -> list[dict]:
    """Every run record in the directory. Files that are not bench records are ignored; a damaged one (not JSON, or a
    record whose fields cannot be read) is skipped with a ResultWarning naming it, so one bad file never stops a
    report or `train --loader fastest`."""
    out = []
    for path in sorted(Path(results_dir).glob("*.json")):
        inside(results_dir, path.name, source=results_dir, **RESULTS)  # a link out is refused, not skipped
        try:
            with open_regular(path) as f:  # a FIFO named .json is skipped as unreadable, not waited on
                rec = json.loads(f.read())
            if isinstance(rec, dict) and "job" in rec:
                flat(rec)  # every reader of a record goes through flat: a record it cannot read is damaged
                rec["_path"] = str(path)
                out.append(rec)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            message = printable(f"{path}: skipped, not a readable bench result ({type(e).__name__}: {e})")
            warnings.warn(message, ResultWarning, stacklevel=2)
    return out


def group(rows: list[dict]) -> list[dict]:
    """One row per configuration (loader runs, no cross-check copies): medians, with min/max of the rate."""
    by = defaultdict(list)
    for r in rows:
        if r["kind"] == "loader" and not r.get("crosscheck") and not r["error"]:
            by[tuple(r[k] for k in SCENARIO + KNOBS)].append(r)
    out = []
    for runs in by.values():
        latest = max(r.get("grid_id") or "" for r in runs)
        runs = [r for r in runs if (r.get("grid_id") or "") == latest]  # a rerun's repeats replace an older grid's
        g = {k: runs[0][k] for k in SCENARIO + KNOBS} | {"repeats": len(runs), "names": [r["name"] for r in runs]}
        for k in (
            "samples_per_s",
            "starvation",
            *WAITS,
            "waited_on_share",
            "data_free_host_behind",
            "first_batch_s",
            "cpu_cores",
            "cpu_s_per_1k_samples",
            "peak_mem_mib",
            "nvml_gpu_util_pct",
            "nvml_power_w",
            "data_free_rate",
            "vs_data_free",
            "headroom",
        ):
            vals = [r[k] for r in runs if r.get(k) is not None]
            g[k] = statistics.median(vals) if vals else None
        rates = [r["samples_per_s"] for r in runs]
        g["samples_per_s_min"], g["samples_per_s_max"] = min(rates), max(rates)
        shares = [r["other_share"] for r in runs if r.get("other_share") is not None]
        g["other_share_max"] = max(shares) if shares else None  # the busiest the machine was during a repeat
        g["grid_id"] = max(r.get("grid_id") or "" for r in runs)
        g["fed_model"] = runs[0].get("fed_model")
        ranks = [r["waited_on_rank"] for r in runs if r.get("waited_on_rank") is not None]
        g["waited_on_rank"] = max(set(ranks), key=ranks.count) if ranks else None
        g["starvation_explains"] = explained(g)
        out.append(g)
    for g in out:
        g["verdict"] = verdict(g, [o for o in out if all(o[k] == g[k] for k in SCENARIO)])
    return sorted(out, key=lambda g: tuple(str(g[k]) for k in SCENARIO + KNOBS))


def attach_data_free(records: list[dict]) -> None:
    """Set data_free_rate, vs_data_free and data_free_host_behind (how often the host fell behind the GPU with no
    input: the model alone is host-bound) on each loader record: the median of its scenario's data-free runs, from the
    closest runs there are: same grid and GPU, same grid, same GPU, then any (a grid resumed on another machine
    measures its own; two machines may each hold a run of the same name, so records are told apart by identity)."""
    rows = {id(r): flat(r) for r in records if "figures" in r}

    def keys(rec: dict) -> list[tuple]:
        row = rows[id(rec)]
        scenario, grid, gpu = tuple(row[k] for k in SCENARIO), row.get("grid_id") or "", gpu_uuid(rec)
        return [(scenario, grid, gpu), (scenario, grid), (scenario, gpu), (scenario,)]

    free = defaultdict(list)
    for rec in records:
        if id(rec) in rows and rows[id(rec)]["kind"] == "data_free":
            for key in keys(rec):
                free[key].append(rows[id(rec)])
    for rec in records:
        row = rows.get(id(rec))
        if row and row["kind"] == "loader" and row["model"] == "none":
            headroom(rec, row, [r for r in rows.values() if r["kind"] == "data_free"])
        elif row and row["kind"] == "loader":
            paired = next((free[k] for k in keys(rec) if k in free), None)
            if paired:
                rec["data_free_rate"] = statistics.median(r["samples_per_s"] for r in paired)
                rec["vs_data_free"] = row["samples_per_s"] / rec["data_free_rate"]
                behind = [r["host_behind"] for r in paired if r.get("host_behind") is not None]
                rec["data_free_host_behind"] = statistics.median(behind) if behind else None


def headroom(rec: dict, row: dict, free: list[dict]) -> None:
    """A loader-only run (model none) against the data-free rate measured next to it (same data, device, batch size,
    cores, precision, compile; the model is the grid's preset for this data and device): `headroom` = its ceiling
    over what that model eats, `fed_model` names the model. Starvation means nothing without a model, so this is
    what answers "would it feed the GPU?" in that mode."""
    rest = [k for k in SCENARIO if k != "model"]
    same = [r for r in free if all(r[k] == row[k] for k in rest)]
    near = [r for r in same if (r.get("grid_id") or "") == (row.get("grid_id") or "")] or same
    if near:
        rate = statistics.median(r["samples_per_s"] for r in near)
        rec["headroom"], rec["fed_model"] = row["samples_per_s"] / rate, near[0]["model"]
        rec["data_free_rate"] = rate


def gpu_uuid(rec: dict) -> str | None:
    """Which physical GPU a result ran on (None: a CPU run, or a result from before the uuid was recorded)."""
    return rec.get("run", {}).get("hardware", {}).get("gpu_uuid")


def finalize(results_dir: Path) -> list[dict]:
    """Attach data-free ratios and verdicts to every JSON (rewritten atomically), write results.csv; return the
    grouped configurations."""
    records = load_records(results_dir)
    attach_data_free(records)
    rows = [flat(r) for r in records]
    groups = group(rows)
    verdicts = {n: g["verdict"] for g in groups for n in g["names"]}
    for rec in records:
        if rec["name"] in verdicts:
            rec["verdict"] = verdicts[rec["name"]]
        path = Path(rec.pop("_path"))
        if rec != json.loads(path.read_text()):
            write_json(path, rec)
    write_csv(Path(results_dir) / "results.csv", [flat(r) for r in records])
    return groups
