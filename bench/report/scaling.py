"""The scaling section of `bench report`: for results measured at several rank counts (`bench loaders --nproc 1,2,4,8`),
samples/s against GPUs per loader and CPU budget, beside the ideal (N times the rate on the fewest GPUs).

Weak scaling holds the batch per GPU (`--batch-size`), strong scaling the global batch (`--global-batch`): results
with the same batch per GPU form one weak family, those with the same global batch one strong family; a family is
drawn when it spans two rank counts or more. Each line is one backend at one `--cpus` (per rank), its best
configuration (workers, pin_memory) at each rank count; the data-free rate is its own line."""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

from common.paths import RESULTS, inside

from .plots import plot_family

COMMON = ("digest", "device", "model", "precision", "compile", "grad_sync")


def families(groups: list[dict], free: list[dict]) -> list[tuple[str, int, dict]]:
    """(weak|strong, batch per GPU or global, {(label, cpus): {nproc: rate}}) for every family spanning two or more
    rank counts."""
    out = []
    for mode, batch in (("weak", lambda g: g["batch_size"]), ("strong", lambda g: g["batch_size"] * g["nproc"])):
        lines: dict[tuple, dict] = defaultdict(lambda: defaultdict(dict))
        for g in groups:
            line = lines[(*(g[k] for k in COMMON), batch(g))][(g["backend"], g["cpus"])]
            line[g["nproc"]] = max(line.get(g["nproc"], 0.0), g["samples_per_s"])
        runs = defaultdict(list)
        for r in free:
            runs[(*(r[k] for k in COMMON), batch(r), r["cpus"], r["nproc"])].append(r["samples_per_s"])
        for (*key, cpus, n), rates in runs.items():
            if tuple(key) in lines:
                lines[tuple(key)][("data-free", cpus)][n] = statistics.median(rates)
        for key, family in lines.items():
            if len({n for line in family.values() for n in line}) >= 2:
                out.append((mode, key[-1], {**family, "_key": dict(zip(COMMON, key))}))
    return out


def _cell(rates: dict, n: int) -> str:
    if n not in rates:
        return "–"
    n0 = min(rates)
    speedup = rates[n] / rates[n0]
    return f"{rates[n]:,.0f} ({speedup:.2f}×, {speedup / (n / n0):.0%} of ideal)" if n != n0 else f"{rates[n]:,.0f}"


def scaling_section(groups: list[dict], rows: list[dict], results_dir: Path) -> list[str]:
    free = [r for r in rows if r["kind"] == "data_free" and not r["error"] and not r.get("crosscheck")]
    lines: list[str] = []
    for mode, batch, family in families(groups, free):
        key = family.pop("_key")
        counts = sorted({n for line in family.values() for n in line})
        what = f"{batch} per GPU" if mode == "weak" else f"global batch {batch}"
        title = (
            f"{mode.capitalize()} scaling: {key['model']}, {what}, {key['device']}, {key['precision']}"
            + (", compiled" if key["compile"] else "")
            + (f", --grad-sync {key['grad_sync']}" if key["grad_sync"] != "ddp" else "")
        )
        sync = f"-{key['grad_sync']}" if key["grad_sync"] != "ddp" else ""
        name = f"plot-scaling-{mode}-{key['model']}-b{batch}{sync}.png"  # the model comes from the records
        png = plot_family(title, family, inside(results_dir, name, source=results_dir, **RESULTS))
        lines += [f"## {title}", "", "samples/s over all ranks (speed-up over the fewest, share of N-fold):", ""]
        unit = "GPU" if key["device"] == "cuda" else "rank"
        lines += ["| loader | cores per rank | " + " | ".join(f"{n} {unit}{'s' * (n > 1)}" for n in counts) + " |"]
        lines += ["|---|--:|" + "--:|" * len(counts)]
        for (label, cpus), rates in sorted(family.items(), key=lambda kv: (kv[0][0] == "data-free", str(kv[0]))):
            cells = " | ".join(_cell(rates, n) for n in counts)
            lines.append(f"| {label} | {cpus or 'all'} | {cells} |")
        lines += ["", f"![{title}]({png.name})", ""]
    return lines
