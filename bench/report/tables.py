"""`bench report DIR`: results.md (tables with median and range over repeats, best configuration per backend,
the profiler cross-check, scaling, watched programs) and beside it one PNG per scenario (model, batch size, device,
CPU budget), drawn by plots.py."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from pathlib import Path

from common.atomic import write_text
from common.paths import RESULTS, inside

from ..records.results import finalize, load_records
from ..records.rows import SCENARIO, flat
from .plots import plot_scenario
from .scaling import scaling_section
from .watched import watch_section


def scenario_title(g: dict) -> str:
    n = g.get("nproc") or 1
    cpus = f"{g['cpus']} cores" if g["cpus"] else "all cores"
    cpus = f"{n} ranks, {cpus} per rank" if n > 1 and g["cpus"] else f"{n} ranks, {cpus} shared" if n > 1 else cpus
    compiled = ", compiled" if g["compile"] else ""
    return f"{g['model']}, batch {g['batch_size']}, {g['device']}, {cpus}, {g['precision']}{compiled}"


def scenario_slug(g: dict) -> str:
    ranks = f"-np{g['nproc']}" if (g.get("nproc") or 1) > 1 else ""
    return f"{g['model']}-bs{g['batch_size']}{ranks}-{g['device']}-cpus{g['cpus'] or 'all'}-{g['precision']}" + (
        "-compiled" if g["compile"] else ""
    )


def best_per_backend(groups: list[dict]) -> list[dict]:
    """Each backend's fastest configuration; within 2% of it, the one using fewer CPU cores."""
    by = defaultdict(list)
    for g in groups:
        by[g["backend"]].append(g)
    out = []
    for runs in by.values():
        top = max(r["samples_per_s"] for r in runs)
        close = [r for r in runs if r["samples_per_s"] >= 0.98 * top]
        out.append(min(close, key=lambda r: (r["cpu_cores"] or 0.0, -r["samples_per_s"])))
    return sorted(out, key=lambda r: -r["samples_per_s"])


def _fmt(v, spec: str = ",.0f", none: str = "–") -> str:
    return none if v is None else format(v, spec)


def _rate(g: dict) -> str:
    return f"{_fmt(g['samples_per_s'])} ({_fmt(g['samples_per_s_min'])}–{_fmt(g['samples_per_s_max'])})"


def _headroom(g: dict) -> str:
    return "–" if g.get("headroom") is None else f"{g['headroom']:,.1f}× {g['fed_model']}"


def _waited_on(g: dict) -> str:
    """Under several ranks: the rank whose input the others waited for most, and its part of that waiting."""
    if g.get("waited_on_rank") is None:
        return "–"
    return f"rank {g['waited_on_rank']} ({g['waited_on_share']:.0%})"


# (header, alignment, cell, mode): "loop" only in the training loop, "alone" only for the loader alone (model none),
# where starvation and the host's lag mean nothing (a trivial consumer never waits on a device) and the answer is the
# headroom over what the preset eats here
COLUMNS = [
    ("backend", "---", lambda g: g["backend"], "both"),
    ("workers", "--:", lambda g: _fmt(g["workers"], "d", "n/a"), "both"),
    ("pin", "---", lambda g: {None: "n/a", True: "on", False: "off"}[g["pin_memory"]], "both"),
    ("samples/s median (range)", "--:", _rate, "both"),
    ("of data-free", "--:", lambda g: _fmt(g["vs_data_free"], ".1%"), "loop"),
    ("starvation", "--:", lambda g: _fmt(g["starvation"], ".1%"), "loop"),
    ("headroom over data-free", "--:", _headroom, "alone"),
    ("wait p95 ms", "--:", lambda g: _fmt(g["wait_p95_ms"], ".1f"), "both"),
    ("host behind", "--:", lambda g: _fmt(g["host_behind"], ".0%"), "loop"),
    ("worst rank starvation", "--:", lambda g: _fmt(g.get("starvation_max"), ".1%"), "ranks"),
    ("worst rank host behind", "--:", lambda g: _fmt(g.get("host_behind_max"), ".0%"), "ranks"),
    ("some rank starved", "--:", lambda g: _fmt(g.get("starvation_any"), ".1%"), "ranks"),
    ("made the others wait", "--:", _waited_on, "ranks"),
    ("of the lost rate", "--:", lambda g: _fmt(g.get("starvation_explains"), ".0%"), "ranks"),
    ("first batch s", "--:", lambda g: _fmt(g["first_batch_s"], ".2f"), "both"),
    ("CPU cores", "--:", lambda g: _fmt(g["cpu_cores"], ".1f"), "both"),
    ("CPU s / 1k samples", "--:", lambda g: _fmt(g["cpu_s_per_1k_samples"], ".2f"), "both"),
    ("peak mem MiB", "--:", lambda g: _fmt(g["peak_mem_mib"], ",.0f"), "both"),
    ("GPU util %", "--:", lambda g: _fmt(g["nvml_gpu_util_pct"], ".0f"), "both"),
    ("power W", "--:", lambda g: _fmt(g["nvml_power_w"], ".0f"), "both"),
    ("runs", "--:", lambda g: str(g["repeats"]), "both"),
    ("verdict", "---", lambda g: g["verdict"], "both"),
]


def _columns(alone: bool, ranks: bool = False) -> list[tuple]:
    """The columns of a scenario's table: the loader alone or in the loop, and the worst rank's under several ranks
    (starvation is then the time every rank lost to some rank's input, host behind the mean over ranks)."""
    modes = ("both", "alone" if alone else "loop", "ranks" if ranks and not alone else "")
    return [c for c in COLUMNS if c[3] in modes]


def _row(g: dict) -> str:
    return "| " + " | ".join(cell(g) for _, _, cell, _ in _columns(g["model"] == "none", g["nproc"] > 1)) + " |"


def header(alone: bool, ranks: bool = False) -> str:
    cols = _columns(alone, ranks)
    return "| " + " | ".join(c[0] for c in cols) + " |\n|" + "|".join(c[1] for c in cols) + "|"


def write_report(results_dir: Path) -> Path:
    """Write results.md, results.csv and the plots; return the Markdown file."""
    results_dir = Path(results_dir)
    groups = finalize(results_dir)
    records = load_records(results_dir)
    watched = watch_section(results_dir)
    if not groups and not watched:
        raise ValueError(
            f"{results_dir}: no finished bench results (*.json from `bench loaders`, watch.json from `bench watch`)"
        )
    rows = [flat(r) for r in records]
    lines = ["# Loader bench results", "", *_provenance(records), ""] if groups else ["# Bench results", ""]
    scenarios = defaultdict(list)
    for g in groups:
        scenarios[tuple(g[k] for k in SCENARIO)].append(g)
    for key, gs in scenarios.items():
        free = [r for r in rows if r["kind"] == "data_free" and not r["error"] and _same(r, key, gs[0]["model"])]
        run = f"{results_dir} (run {gs[0]['names'][0]})"  # the model and device in the plot's name come from it
        png = inside(results_dir, f"plot-{scenario_slug(gs[0])}.png", source=run, **RESULTS)
        png = plot_scenario(gs, free, png, scenario_title(gs[0]))
        lines += [f"## {scenario_title(gs[0])}", ""]
        if free:
            alone = f" of {free[0]['model']}, what each ceiling is set against" if gs[0]["model"] == "none" else ""
            lines += [f"Data-free rate{alone} (the model on a batch already on the device): {_free_rates(free)}.", ""]
        head = header(gs[0]["model"] == "none", gs[0]["nproc"] > 1)
        lines += [head, *[_row(g) for g in gs], "", "Best configuration per backend:", "", head]
        lines += [*[_row(g) for g in best_per_backend(gs)], "", f"![{scenario_title(gs[0])}]({png.name})", ""]
    lines += scaling_section(groups, rows, results_dir) + _crosscheck_section(rows) + watched
    failed = [r for r in rows if r["error"]]
    if failed:
        lines += ["## Failed runs", "", *[f"- `{r['name']}`: {r['error']}" for r in failed], ""]
    md = results_dir / "results.md"
    write_text(md, "\n".join(lines) + "\n")
    return md


def _free_rates(free: list[dict]) -> str:
    """Median and range of the data-free runs; of each GPU's apart where a resumed grid ran on several (each loader
    run is set against its own GPU's)."""
    by_gpu = defaultdict(list)
    for r in free:
        by_gpu[r.get("gpu_uuid")].append(r["samples_per_s"])

    def told(rates: list[float]) -> str:
        lo, hi = min(rates), max(rates)
        return f"median {_fmt(statistics.median(rates))} samples/s, range {_fmt(lo)}–{_fmt(hi)} over {len(rates)} runs"

    if len(by_gpu) == 1:
        return told(next(iter(by_gpu.values())))
    each = [f"GPU {(uuid or 'unknown')[:8]}: {told(rates)}" for uuid, rates in by_gpu.items()]
    return "; ".join(each) + " (each loader run is set against its own GPU's)"


def _same(row: dict, key: tuple, model: str) -> bool:
    """Is this data-free run the one a scenario's loader runs are set against? For the loader alone (model none),
    the preset's run beside it: the same scenario but for the model."""
    if model != "none":
        return tuple(row[k] for k in SCENARIO) == key
    return all(row[k] == v for k, v in zip(SCENARIO, key) if k != "model")


def _provenance(records: list[dict]) -> list[str]:
    runs = [r["run"] for r in records if "run" in r]
    if not runs:
        return []
    machines = _counted(
        f"{_gpu(r['hardware'])}, {r['hardware']['cpu']} ({r['hardware']['cpus_total']} cores)" for r in runs
    )
    versions = _counted(", ".join(f"{k} {val}" for k, val in r["versions"].items()) for r in runs)
    commits = _counted(f"`{r['commit']}`" for r in runs)
    commands = sorted({r["command"] for r in runs})
    data = sorted(
        {
            f"{r['data']['path']} ({r['data']['count']} {r['data']['kind']} samples, digest {r['data']['digest'][:12]})"
            for r in records
            if "data" in r
        }
    )
    return [
        f"Machine: {machines}. Versions: {versions}. Commit: {commits}.",
        "",
        "Data: " + "; ".join(data) + ".",
        "",
        "Commands:",
        "",
        *[f"    {c}" for c in commands],
        "",
        "Starvation: share of the measured steps' wall time the device sat idle waiting for input (CUDA events "
        "between steps on GPU; host time blocked on the next batch on CPU). CPU cores: CPU time of the whole "
        "process tree over the measured steps / their wall time.",
    ]


def _gpu(hw: dict) -> str:
    """The GPU by name and, as a grid may be resumed on another machine, which one."""
    return f"{hw['gpu']} ({hw['gpu_uuid'][:8]})" if hw.get("gpu_uuid") else hw.get("gpu", "no GPU")


def _counted(values) -> str:
    """One value as itself; several, each with its number of runs (a grid resumed elsewhere spans machines)."""
    counts = Counter(values)
    return "; ".join(v if len(counts) == 1 else f"{v} ({n} runs)" for v, n in counts.items())


def _crosscheck_section(rows: list[dict]) -> list[str]:
    checked = [r for r in rows if r.get("trace_starvation") is not None]
    if not checked:
        return []
    out = [
        "## Cross-check: starvation from CUDA events vs from a profiler trace of the same steps",
        "",
        "| run | CUDA events | profiler trace | difference (pp) | within 3 pp | NVML idle (all gaps) |",
        "|---|---:|---:|---:|---|---:|",
    ]
    for r in checked:
        events = r["trace_starvation"] - r["trace_minus_events_pp"] / 100
        nvml = _fmt(1 - r["nvml_gpu_util_pct"] / 100 if r.get("nvml_gpu_util_pct") is not None else None, ".1%")
        ok = "yes" if abs(r["trace_minus_events_pp"]) <= 3 else "**no**"
        out.append(
            f"| `{r['name']}` | {events:.1%} | {r['trace_starvation']:.1%} | "
            f"{r['trace_minus_events_pp']:+.2f} | {ok} | {nvml} |"
        )
    return out + [""]
