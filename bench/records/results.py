"""Reading a results directory: the per-run JSONs, grouped into configurations (median and range over repeats),
each loader run set against the data-free rate of its model and batch size, and a verdict in words.
Profiled cross-check runs are kept out of the headline figures (the profiler slows the host) and reported on
their own."""

from __future__ import annotations

import csv
import json
import os
import statistics
import warnings
from collections import defaultdict
from pathlib import Path

from dataprep.paths import RESULTS, inside, open_regular
from dataprep.text import printable

from .env import write_json_atomic
from .thresholds import BEHIND, HIGHLY, INPUT_BOUND, NOISE, UNEXPLAINED

# cpus: per rank; grad_sync: how the ranks average gradients (DDP as shipped where a record predates the knob)
SCENARIO = ("digest", "device", "model", "batch_size", "cpus", "precision", "compile", "nproc", "grad_sync")
KNOBS = ("backend", "workers", "pin_memory")
CSV_COLUMNS = [
    "name",
    "grid_id",
    "kind",
    "backend",
    "workers",
    "pin_memory",
    "batch_size",
    "nproc",
    "grad_sync",
    "model",
    "cpus",
    "device",
    "compile",
    "precision",
    "repeat",
    "crosscheck",
    "samples_per_s",
    "data_free_rate",
    "vs_data_free",
    "headroom",
    "fed_model",
    "starvation",
    "starvation_source",
    "wait_median_ms",
    "wait_p95_ms",
    "wait_max_ms",
    "host_behind",
    "starvation_max",
    "host_behind_max",
    "starvation_any",
    "waited_on_rank",
    "waited_on_share",
    "starvation_explains",
    "data_free_host_behind",
    "first_batch_s",
    "cpu_cores",
    "other_cores",
    "other_share",
    "cpu_s_per_1k_samples",
    "peak_mem_mib",
    "torch_peak_memory_mib",
    "nvml_gpu_util_pct",
    "nvml_power_w",
    "nvml_gpu_mem_mib",
    "trace_starvation",
    "trace_minus_events_pp",
    "verdict",
    "error",
]


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


def flat(rec: dict) -> dict:
    """One CSV row: the job's knobs and the figures, flattened."""
    j, f = rec["job"], rec.get("figures", {})
    row = {k: j.get(k) for k in CSV_COLUMNS if k in j} | {"name": rec["name"], "error": rec.get("error", "")}
    row["device"] = str(j["device"]).split(":")[0]
    row["nproc"] = j.get("nproc") or 1  # absent before ranks were a knob
    row["grad_sync"] = j.get("grad_sync") or "ddp"  # absent before it was a knob: DDP as shipped
    row["digest"] = rec.get("data", {}).get("digest", "")
    row |= {k: f.get(k) for k in CSV_COLUMNS if k in f and not isinstance(f.get(k), dict)}
    if isinstance(f.get("starvation"), dict):
        s = f["starvation"]
        row |= {
            "starvation": s["starvation"],
            "starvation_source": s["source"],
            "wait_median_ms": s["wait_median_ms"],
            "wait_p95_ms": s["wait_p95_ms"],
            "wait_max_ms": s["wait_max_ms"],
            "host_behind": s.get("host_behind"),  # absent before commit 9f61c13
            "starvation_max": s.get("starvation_max"),  # the worst rank (under nproc > 1)
            "host_behind_max": s.get("host_behind_max"),
            # under nproc > 1: the share of the span some rank waited for input, every rank held by it (and which)
            "starvation_any": s.get("starvation_any"),
            "waited_on_rank": s.get("waited_on_rank"),
            "waited_on_share": s.get("waited_on_share"),
        }
    if "starvation" in f.get("crosscheck", {}):
        row |= {
            "trace_starvation": f["crosscheck"]["starvation"],
            "trace_minus_events_pp": f["crosscheck"]["difference_pp"],
        }
    keys = ("data_free_rate", "vs_data_free", "data_free_host_behind", "headroom", "fed_model", "verdict")
    row |= {k: rec.get(k) for k in keys if k in rec}
    return row


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
            "wait_median_ms",
            "wait_p95_ms",
            "wait_max_ms",
            "host_behind",
            "starvation_max",
            "host_behind_max",
            "starvation_any",
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


def explained(g: dict) -> float | None:
    """How much of the rate lost against the data-free rate (1 - vs_data_free) the time some rank waited for its
    input accounts for, under several ranks; None where nothing was lost beyond NOISE or a figure is missing."""
    any_rank, ratio = g.get("starvation_any"), g.get("vs_data_free")
    if any_rank is None or ratio is None or 1 - ratio <= NOISE:
        return None
    return any_rank / (1 - ratio)


def _ranks_waited(g: dict) -> str:
    """Under several ranks, who made the others wait and how much of the lost rate that explains; else nothing."""
    if g.get("starvation_any") is None or g.get("waited_on_rank") is None or g["starvation_any"] < NOISE / 2:
        return ""  # under 1% of the time: nobody was held long enough to name
    rank, share = g["waited_on_rank"], g["waited_on_share"]
    text = (
        f"; under {g['nproc']} ranks some rank waited for input {g['starvation_any']:.1%} of the time, holding "
        f"every rank at the all-reduce (rank {rank}: {share:.0%} of that)"
    )
    if g.get("starvation_explains") is not None:
        text += f", {g['starvation_explains']:.0%} of the rate lost against the data-free rate"
    return text


def label(g: dict) -> str:
    """A configuration in words: backend, workers, pin_memory (where they apply)."""
    from loaders import backend_label

    w = "" if g["workers"] is None else f", {g['workers']} workers"
    pin = "" if g["pin_memory"] is None else f", pin_memory {'on' if g['pin_memory'] else 'off'}"
    return f"{backend_label(g['backend'], g.get('device') or '')}{w}{pin}"


def impossible_gap(groups: list[dict]) -> float:
    """How far the fastest configuration ran above the data-free rate, 0 when none did: no loader feeds a model faster
    than a batch already on the device, so the rates of these runs vary by at least this much (a busy machine, a
    data-free run slowed by something else)."""
    return max([0.0] + [g["vs_data_free"] - 1 for g in groups if g.get("vs_data_free")])


def best_change(g: dict, peers: list[dict], noise: float = NOISE) -> tuple[str, float] | None:
    """The single knob change (backend, workers or pin_memory) that raised the rate most, and by how much: by more
    than `noise` (NOISE, or more where the runs show more), and with every repeat above every repeat of this
    configuration (ranges that overlap are not a gain)."""
    best = None
    for knob in KNOBS:
        same_rest = [p for p in peers if p[knob] != g[knob] and all(p[k] == g[k] for k in KNOBS if k != knob)]
        if knob == "backend":  # other backends have other knobs: compare with their best configuration
            same_rest = [p for p in peers if p["backend"] != g["backend"]]
        for p in same_rest:
            gain = p["samples_per_s"] / g["samples_per_s"] - 1
            apart = p.get("samples_per_s_min", p["samples_per_s"]) > g.get("samples_per_s_max", g["samples_per_s"])
            if gain > noise and apart and (best is None or gain > best[1]):
                change = f"{knob} -> {p[knob]}" if knob != "backend" else f"backend -> {label(p)}"
                best = (change, gain)
    return best


def verdict(g: dict, peers: list[dict]) -> str:
    s, noise = g["starvation"], max(NOISE, impossible_gap(peers))
    if g["model"] == "none":
        head = f"loader ceiling {g['samples_per_s']:,.0f} samples/s"
        if g.get("headroom") is not None:  # what the loader delivers against what the preset eats here
            h, eater = g["headroom"], g["fed_model"]
            head += (
                f": feeds {h:,.1f}× what {eater} eats here"
                if h >= 1
                else f": {h:.0%} of what {eater} eats here, so it would starve it"
            )
    else:
        level = "highly input-bound" if s > HIGHLY else "input-bound" if s > INPUT_BOUND else "not input-bound"
        vs = f", {g['vs_data_free']:.0%} of the data-free rate" if g.get("vs_data_free") else ""
        if (g.get("vs_data_free") or 0) > 1 + NOISE:
            vs += f" (above it: the rates here vary by {noise:.0%} or more)"
        who = "GPU idle" if g["device"] == "cuda" else "training blocked"
        head = f"{level}: {who} {s:.1%} of the time waiting for input{vs}"
        head += _ranks_waited(g)
        behind, ratio = g.get("host_behind"), g.get("vs_data_free")
        unexplained = ratio is not None and (1 - ratio) - s > UNEXPLAINED
        if s <= INPUT_BOUND and unexplained and behind is not None and behind >= BEHIND:
            head += f"; the host fell behind the GPU on {behind:.0%} of the steps"
            if (g.get("data_free_host_behind") or 0) >= BEHIND:  # the model alone keeps the host busier than the GPU
                head += (
                    ", as it does with no input at all: the step is bound by the host launching kernels, so "
                    "every millisecond the loader takes from the training process slows every step"
                )
            else:
                head += " (a synchronising copy, e.g. pin_memory off): the shortfall is inside the steps"
    change = best_change(g, peers, noise)
    if change is None:
        return head + "; nothing in this grid did better beyond its run-to-run spread"
    gain = f"x{1 + change[1]:.1f}" if change[1] >= 1 else f"+{change[1]:.0%}"
    tail = f"; in this grid {change[0]} helped most ({gain} samples/s)"
    return head + tail


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
            write_json_atomic(path, rec)
    write_csv(Path(results_dir) / "results.csv", [flat(r) for r in records])
    return groups


def write_csv(path: Path, rows: list[dict]) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, path)
