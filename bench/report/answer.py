"""What `bench loaders` says when it is done: the answer in a few lines for people, the full record for scripts.

Per scenario (model, batch size, device, cores, precision, compile): what was measured and against what (the
model's data-free rate, or for the loader alone the preset's), the configuration `train --loader fastest` would take
and why, and the worst one, so the spread between them is the answer to "does my GPU starve, and what fixes it?".
The record (every configuration with its figures and verdict) goes to RESULTS_DIR/summary.json; `--json` prints it.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

from common.atomic import write_json

from ..records.results import load_records
from ..records.rows import SCENARIO, flat
from ..records.thresholds import BUSY
from ..records.verdicts import label as _label
from .tables import scenario_slug, scenario_title


def summarize(results_dir: Path, groups: list[dict], failed: list[str]) -> tuple[list[str], dict]:
    """(lines for the terminal, the record for summary.json) from the grouped configurations of a finished grid."""
    from ..fastest.choice import measured_spread, pick
    from ..fastest.noise import CANNOT_TELL, cannot_tell

    results_dir = Path(results_dir)
    rows = [flat(r) for r in load_records(results_dir)]
    by = defaultdict(list)
    for g in groups:
        by[tuple(g[k] for k in SCENARIO)].append(g)
    lines, scenarios = [], []
    for gs in by.values():
        first, alone, noise = gs[0], gs[0]["model"] == "none", None
        free = [r["samples_per_s"] for r in rows if r["kind"] == "data_free" and not r["error"] and _paired(r, first)]
        rate = statistics.median(free) if free else None
        grid = [r for r in rows if _paired(r, first) and r.get("grid_id") == first["grid_id"]]
        busy = max((r.get("other_share") or 0.0 for r in grid), default=0.0)
        if alone:  # `train --loader fastest` reads runs in the training loop only: here the highest ceiling
            win, top = max(gs, key=lambda g: g["samples_per_s"]), "highest ceiling"
            why = win["verdict"]
        else:
            # the spread `fastest` judges ties by: this scenario's data-free runs, as bench.fastest.choice reads them
            spread, where = measured_spread([r for r in rows if _paired(r, first)], first["grid_id"])
            (win, why), top = pick(gs, spread, where), "train --loader fastest takes"
            noise = cannot_tell(gs, spread, busy)
        worst = min(gs, key=lambda g: g["samples_per_s"])
        lines.append(f"{scenario_title(first)}: {_what(gs, rate, alone)}")
        if not alone and noise:  # no ranking from noise: one short reason, said once
            lines.append(f"  {CANNOT_TELL}: {noise}; rerun when the machine is idle")
            win = why = None
        else:
            lines += [f"  {top}: {_label(win)}: {why}", f"  slowest: {_label(worst)}: {worst['verdict']}"]
        if busy > BUSY and win is not None:
            lines.append(busy_line(busy))
        plot = results_dir / f"plot-{scenario_slug(first)}.png"
        scenarios.append(
            {
                "title": scenario_title(first),
                "data_free_rate": rate,
                "fed_model": first.get("fed_model"),
                "best": {"configuration": _label(win), "reason": why, **_knobs(win)} if win else None,
                "cannot_tell": noise,
                "busy": busy,
                "plot": str(plot) if plot.exists() else None,
                "configurations": gs,
            }
        )
    where = f"table {results_dir / 'results.md'}, plots {results_dir}/plot-*.png, every run's JSON in {results_dir}"
    lines.append(f"{where}; this summary in full: {results_dir / 'summary.json'} (or --json)")
    if failed:
        lines.append(f"failed: {', '.join(failed)} (their errors are in their JSON and grid.log)")
    record = {
        "results_dir": str(results_dir),
        "report": str(results_dir / "results.md"),
        "csv": str(results_dir / "results.csv"),
        "scenarios": scenarios,
        "failed": failed,
    }
    return lines, record


def busy_line(busy: float) -> str:
    """What a scenario's answer adds when other programs took cores from its runs."""
    return (
        f"  a busy machine: other programs took up to {busy:.0%} of the cores these runs could use, so these rates "
        "are noise; rerun when the machine is idle"
    )


def _paired(row: dict, g: dict) -> bool:
    """The data-free runs a scenario is set against: its own, or for the loader alone the preset's beside it."""
    return all(row[k] == g[k] for k in SCENARIO if k != "model" or g["model"] != "none")


def _what(gs: list[dict], rate: float | None, alone: bool) -> str:
    backends = len({g["backend"] for g in gs})
    n = f"{len(gs)} configurations of {backends} backend{'s' * (backends > 1)}"
    if alone:
        eater = gs[0].get("fed_model") or "the preset"
        against = f"; {eater} alone eats {rate:,.0f} samples/s here" if rate else ""
        return f"{n}, the loader alone (its ceiling){against}"
    against = f" (the model alone, data-free: {rate:,.0f} samples/s)" if rate else ""
    return f"{n} in the training loop{against}"


def _knobs(g: dict) -> dict:
    return {"backend": g["backend"], "workers": g["workers"], "pin_memory": g["pin_memory"]}


def write_summary(results_dir: Path, record: dict) -> Path:
    path = Path(results_dir) / "summary.json"
    write_json(path, record)
    return path
