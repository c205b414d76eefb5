"""One run record as one flat row, and the results CSV of them: its columns, and the keys that make a scenario (what
runs are compared within: data, device, model, batch size, ...) and a configuration (a scenario and the loader's knobs).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from common.atomic import write_text

# cpus: per rank; grad_sync: how the ranks average gradients (DDP as shipped where a record predates the knob)
SCENARIO = ("digest", "device", "model", "batch_size", "cpus", "precision", "compile", "nproc", "grad_sync")
KNOBS = ("backend", "workers", "pin_memory")
# how long a step waited for its batch, and how often the host was behind: a run's figures, a scenario's medians
WAITS = (
    "wait_median_ms",
    "wait_p95_ms",
    "wait_max_ms",
    "host_behind",
    "starvation_max",
    "host_behind_max",
    "starvation_any",
    "epoch_start_idle",
)
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
    *WAITS,
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


def flat(rec: dict) -> dict:
    """One CSV row: the job's knobs and the figures, flattened."""
    j, f = rec["job"], rec.get("figures", {})
    row = {k: j.get(k) for k in CSV_COLUMNS if k in j} | {"name": rec["name"], "error": rec.get("error", "")}
    row["device"] = str(j["device"]).split(":")[0]
    row["nproc"] = j.get("nproc") or 1  # absent before ranks were a knob
    row["grad_sync"] = j.get("grad_sync") or "ddp"  # absent before it was a knob: DDP as shipped
    row["digest"] = rec.get("data", {}).get("digest", "")
    row["gpu_uuid"] = rec.get("run", {}).get("hardware", {}).get("gpu_uuid")  # a resumed grid may span GPUs
    row |= {k: f.get(k) for k in CSV_COLUMNS if k in f and not isinstance(f.get(k), dict)}
    if isinstance(f.get("starvation"), dict):
        s = f["starvation"]
        row |= {
            # under several ranks the time every rank lost to some rank's input (records before it held the mean)
            "starvation": s.get("starvation_any", s["starvation"]),
            "starvation_mean": s.get("starvation_mean"),  # of the ranks' own figures
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
            "epoch_start_idle": s.get("epoch_start_idle"),  # absent before epoch starts were marked
        }
    if "starvation" in f.get("crosscheck", {}):
        row |= {
            "trace_starvation": f["crosscheck"]["starvation"],
            "trace_minus_events_pp": f["crosscheck"]["difference_pp"],
        }
    keys = ("data_free_rate", "vs_data_free", "data_free_host_behind", "headroom", "fed_model", "verdict")
    row |= {k: rec.get(k) for k in keys if k in rec}
    return row


def write_csv(path: Path, rows: list[dict]) -> None:
    text = io.StringIO(newline="")
    w = csv.DictWriter(text, fieldnames=CSV_COLUMNS, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    write_text(path, text.getvalue())
