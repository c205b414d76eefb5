"""The figures of `bench report`: per scenario, throughput, starvation (for the loader alone: headroom over the
preset's data-free rate) and CPU cost per 1,000 samples against workers; per scaling family, samples/s against GPUs
beside the ideal. One colour per backend in every figure (the README's too), pin_memory on solid and off dashed."""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path

STYLE = {True: "-", False: "--", None: "-"}  # pin_memory on / off / not a knob of this backend
COLORS = {
    "torch": "tab:red",
    "hdf5": "tab:blue",
    "ffcv": "tab:green",
    "dali": "tab:purple",
    "gpu": "tab:orange",
    "stream": "tab:brown",
}


def rate_scale(rates: list[float]) -> str:
    """The throughput axis: "log" where the rates span 2× or more (a starving baseline beside loaders that keep up),
    else "linear" from 0, since a log axis over a few percent zooms into run-to-run noise and labels it in powers of
    ten."""
    rates = [r for r in rates if r]
    return "log" if rates and max(rates) >= 2 * min(rates) else "linear"


def plot_scenario(groups: list[dict], free: list[dict], path: Path, title: str) -> Path:
    """Three panels against workers: samples/s (with the data-free rate), starvation %, CPU s per 1k samples."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(17, 5.2))
    xs = sorted({g["workers"] for g in groups if g["workers"] is not None}) or [0]
    alone = groups[0]["model"] == "none"  # the loader alone: headroom over the preset's appetite, not starvation
    panels = [
        ("samples_per_s", "samples/s (median of repeats)", "Throughput", 1.0),
        ("headroom", "loader ceiling / data-free rate (×)", "Headroom", 1.0)
        if alone
        else ("starvation", "time waiting for input (%)", "Starvation", 100.0),
        ("cpu_s_per_1k_samples", "CPU core-seconds per 1,000 samples", "CPU cost", 1.0),
    ]
    lines = defaultdict(list)
    for g in groups:
        lines[(g["backend"], g["pin_memory"])].append(g)
    for ax, (key, ylabel, name, scale) in zip(axes, panels):
        for (backend, pin), gs in sorted(lines.items(), key=lambda kv: str(kv[0])):
            gs = sorted(gs, key=lambda g: g["workers"] or 0)
            label = backend + ("" if pin is None else f", pin {'on' if pin else 'off'}")
            wx = [g["workers"] for g in gs] if gs[0]["workers"] is not None else [min(xs), max(xs)]
            ys = (
                [(g[key] or 0.0) * scale for g in gs]
                if gs[0]["workers"] is not None
                else [(gs[0][key] or 0) * scale] * 2
            )
            ax.plot(
                wx,
                ys,
                STYLE[pin],
                marker="o" if gs[0]["workers"] is not None else "s",  # a square: one worker count makes no line
                color=COLORS.get(backend, "gray"),
                label=label + ("" if gs[0]["workers"] is not None else " (no workers)"),
            )
        ax.set(xlabel="workers (processes or threads)", ylabel=ylabel, title=name, xticks=xs)
        ax.grid(alpha=0.3)
    if free:
        rate = statistics.median(r["samples_per_s"] for r in free)
        eater = f"what {free[0]['model']} eats: " if alone else ""
        axes[0].axhline(rate, color="black", linestyle=":", label=f"{eater}data-free rate ({rate:,.0f}/s)")
    for level in (1,) if alone else (5, 20):  # below 1x the loader starves the model; 5% and 20%: input-bound
        axes[1].axhline(level, color="gray", linestyle=":", linewidth=1)
    if alone:
        axes[1].set_yscale("log")
    scale = rate_scale([g["samples_per_s"] for g in groups] + [r["samples_per_s"] for r in free])
    axes[0].set_yscale(scale)
    if scale == "linear":
        axes[0].set_ylim(bottom=0)
    axes[0].legend(fontsize=8, loc="best")
    both = {g["pin_memory"] for g in groups} >= {True, False}  # a CPU's runs have no page-locked copies to compare
    fig.suptitle(title + ("  (pin_memory: on solid, off dashed)" if both else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_family(title: str, family: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5))
    styles = {c: s for c, s in zip(sorted({cpus or 0 for _, cpus in family}), ("-", "--", "-.", ":"))}
    for (label, cpus), rates in sorted(family.items(), key=str):
        ns = sorted(rates)
        color = COLORS.get(label, "black")
        name = f"{label}, {cpus} cores/rank" if cpus else f"{label}, all cores"
        ax.plot(ns, [rates[n] for n in ns], styles.get(cpus or 0, "-"), marker="o", color=color, label=name)
        ax.plot(ns, [rates[ns[0]] * n / ns[0] for n in ns], ":", color=color, alpha=0.35, linewidth=1)
    counts = sorted({n for rates in family.values() for n in rates})
    ax.set(xlabel="GPUs (ranks)", ylabel="samples/s, all ranks", title=title + "\n(dotted: ideal)", xticks=counts)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
