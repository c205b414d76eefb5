"""From the rank files of one watched run to one set of figures: each rank's training loader, then the mean and the
worst rank (ranks of one data-parallel job each eat their own batches, so their rates add up)."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

MEAN = ("starvation", "host_behind", "drained_at_request", "wait_median_ms", "wait_p95_ms", "wait_max_ms")


def read_ranks(run_dir: Path) -> list[dict]:
    out = []
    for path in sorted(Path(run_dir).glob("rank-*.json")):
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError) as e:  # a rank killed while writing leaves no half file (rename), but say so
            print(f"bench watch: skipped {path}: {e}", file=sys.stderr)
    return sorted(out, key=lambda r: (r["rank"], r["pid"]))


def rank_figures(rec: dict) -> dict | None:
    """The figures of the loader this rank trained from (None when it never got two measured steps)."""
    for loader in rec["loaders"]:
        if loader["label"] == rec["chosen"]:
            return loader["figures"]
    return None


def merge(ranks: list[dict]) -> dict | None:
    """Figures of the whole program: one rank's as they are; several ranks' rates summed, the rest averaged, with
    the worst rank's starvation beside the mean."""
    measured = [(r, rank_figures(r)) for r in ranks]
    measured = [(r, f) for r, f in measured if f]
    if not measured:
        return None
    figs = [f for _, f in measured]
    merged = dict(figs[0])
    if len(figs) > 1:
        merged["samples_per_s"] = sum(f["samples_per_s"] for f in figs)
        merged["steps"] = min(f["steps"] for f in figs)
        for k in MEAN:
            vals = [f[k] for f in figs if f.get(k) is not None]
            merged[k] = statistics.fmean(vals) if vals else None
        worst = max(measured, key=lambda rf: rf[1]["starvation"])
        merged["starvation_worst"] = worst[1]["starvation"]
        merged["worst_rank"] = worst[0]["rank"]
        merged["window"] = [min(f["window"][0] for f in figs), max(f["window"][1] for f in figs)]
    merged["ranks"] = len(figs)
    return merged


def loaders_seen(ranks: list[dict]) -> list[dict]:
    """Every loader any rank iterated, with its request count (rank 0's, or the first rank that has it)."""
    seen: dict[str, dict] = {}
    for r in ranks:
        for loader in r["loaders"]:
            seen.setdefault(loader["label"], {"label": loader["label"], "requests": loader["requests"]})
    return sorted(seen.values(), key=lambda d: -d["requests"])
