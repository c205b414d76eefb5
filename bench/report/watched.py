"""`bench report DIR` on watched programs: every watch.json under DIR (one level or two down) as a row of a table
and a bar of a plot, beside the loader grid's results when DIR holds both."""

from __future__ import annotations

import json
from pathlib import Path

from common.paths import RESULTS, inside, open_regular
from common.text import printable


def find_watches(results_dir: Path) -> list[tuple[str, dict]]:
    """(name, watch.json) for DIR/watch.json, DIR/*/watch.json and DIR/*/*/watch.json, by name."""
    out = []
    for pattern in ("watch.json", "*/watch.json", "*/*/watch.json"):
        for path in sorted(Path(results_dir).glob(pattern)):
            inside(results_dir, path.relative_to(results_dir).as_posix(), source=results_dir, **RESULTS)
            try:
                with open_regular(path) as f:  # a FIFO is skipped as unreadable, not waited on
                    rec = json.loads(f.read())
            except (OSError, ValueError):
                print(printable(f"bench report: skipped {path}: not readable JSON"), flush=True)
                continue
            if rec.get("kind") == "watch" and rec.get("samples_per_s") is not None:
                out.append(
                    (str(path.parent.relative_to(results_dir)) if path.parent != Path(results_dir) else ".", rec)
                )
    return out


def _pct(v, spec: str = ".1%") -> str:
    return "–" if v is None else format(v, spec)


HEADER = (
    "| program | ranks | samples/s median (range) | of its data-free rate (range) | starvation | host behind "
    "| GPU drained before request | wait p95 ms | CPU cores | GPU util % | runs | verdict |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
)


def _row(name: str, w: dict) -> str:
    lo, hi = w["samples_per_s_range"]
    ratio = "–"
    if w.get("vs_data_free") is not None:
        rlo, rhi = w["vs_data_free_range"]
        ratio = f"{w['vs_data_free']:.1%} ({rlo:.1%}–{rhi:.1%})"
    worst = f" (worst rank {w['starvation_worst']:.1%})" if w.get("starvation_worst") is not None else ""
    util = "–" if w.get("nvml_gpu_util_pct") is None else f"{w['nvml_gpu_util_pct']:.0f}"
    cores = "–" if w.get("cpu_cores") is None else f"{w['cpu_cores']:.1f}"
    runs = sum(1 for r in w["runs"] if r["mode"] == "real")
    cells = [
        f"`{name}`",
        str(w["ranks"]),
        f"{w['samples_per_s']:,.0f} ({lo:,.0f}–{hi:,.0f})",
        ratio,
        _pct(w["starvation"]) + worst,
        _pct(w["host_behind"], ".0%"),
        _pct(w["drained_at_request"], ".0%"),
        f"{w['wait_p95_ms']:.1f}",
        cores,
        util,
        str(runs),
        w.get("verdict") or "",
    ]
    return "| " + " | ".join(cells) + " |"


def watch_section(results_dir: Path) -> list[str]:
    """Markdown lines (with plot-watch.png written beside them), or [] when DIR holds no watch results."""
    watches = find_watches(results_dir)
    if not watches:
        return []
    lines = ["## Watched programs (`bench watch`)", "", "Commands:", ""]
    lines += [f"    {name}: {' '.join(w['command'])}" for name, w in watches]
    lines += ["", HEADER, *[_row(name, w) for name, w in watches], ""]
    png = plot_watches(watches, inside(results_dir, "plot-watch.png", source=results_dir, **RESULTS))
    return lines + [f"![watched programs]({png.name})", ""]


def plot_watches(watches: list[tuple[str, dict]], path: Path) -> Path:
    """Two panels per program: the rate as a share of its data-free rate (or samples/s without one), starvation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n, _ in watches]
    relative = all(w.get("vs_data_free") is not None for _, w in watches)
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.5 * len(names) + 2))
    ys = range(len(names))
    if relative:
        vals = [100 * w["vs_data_free"] for _, w in watches]
        err = [
            [v - 100 * w["vs_data_free_range"][0] for v, (_, w) in zip(vals, watches)],
            [100 * w["vs_data_free_range"][1] - v for v, (_, w) in zip(vals, watches)],
        ]
        axes[0].barh(ys, vals, xerr=err, color="tab:blue")
        axes[0].axvline(100, color="black", linestyle=":")
        axes[0].set(xlabel="% of the program's own data-free rate (range over repeats)", title="Rate")
    else:
        axes[0].barh(ys, [w["samples_per_s"] for _, w in watches], color="tab:blue")
        axes[0].set(xlabel="samples/s", title="Rate")
    axes[1].barh(ys, [100 * w["starvation"] for _, w in watches], color="tab:red")
    for level in (5, 20):
        axes[1].axvline(level, color="gray", linestyle=":", linewidth=1)
    axes[1].set(xlabel="time the GPU waited for the next batch (%)", title="Starvation")
    for ax in axes:
        ax.set_yticks(list(ys), names if ax is axes[0] else [""] * len(names))
        ax.invert_yaxis()
        ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
