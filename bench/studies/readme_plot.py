"""The picture README opens with: starvation and training rate against workers, one line per backend, from the
committed finding-1 results (real CIFAR-10, ddpm_cifar10 at batch 128, bf16, compiled, on an H100). Each loader run
is set against the data-free rate of its own GPU, as `bench report` does; the JSONs are read from the finding's
archive in memory (or from a results directory), never rewritten or unpacked.

    python -m bench.studies.readme_plot --out docs/starvation_h100.png  # --results: f1_cifar10_bs128/raw.tar.xz

With --repeats, the picture of a grid of one worker count run several times (finding 1 on today's code): each
backend's rate against the data-free rate, every fresh process a dot, the median a bar, its starvation beside it.

    python -m bench.studies.readme_plot --repeats --results bench/results/f1_w4_h200 --out docs/f1_w4_h200.png
"""

from __future__ import annotations

import argparse
import json
import statistics
import tarfile
from collections import defaultdict
from pathlib import Path

from ..records.results import attach_data_free, group, load_records
from ..records.rows import flat
from ..report.plots import COLORS


def read_records(results: Path) -> list[dict]:
    """The bench records of a results directory, or of the top of a committed raw.tar.xz read in memory."""
    if results.is_dir():
        return load_records(results)
    with tarfile.open(results) as tar:  # the committed findings keep their per-run JSON in one archive
        members = sorted((m for m in tar.getmembers() if m.isfile() and "/" not in m.name), key=lambda m: m.name)
        recs = [json.load(tar.extractfile(m)) for m in members if m.name.endswith(".json")]
    return [r for r in recs if isinstance(r, dict) and "job" in r]


def draw(results: Path, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_records(results)
    attach_data_free(records)  # in memory only
    groups = [g for g in group([flat(r) for r in records if "figures" in r]) if g["pin_memory"] in (True, None)]
    lines = defaultdict(list)
    for g in groups:
        lines[g["backend"]].append(g)
    xs = sorted({g["workers"] for g in groups if g["workers"] is not None})
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.3))
    panels = [("starvation", "GPU idle, waiting for data (%)"), ("vs_data_free", "training rate (% of data-free)")]
    for ax, (key, label) in zip(axes, panels):
        for backend in ("torch", "hdf5", "ffcv", "dali", "gpu"):
            gs = sorted(lines.get(backend, []), key=lambda g: g["workers"] or 0)
            if not gs:
                continue
            wx = [g["workers"] for g in gs] if gs[0]["workers"] is not None else [min(xs), max(xs)]
            ys = [100 * g[key] for g in gs] if gs[0]["workers"] is not None else [100 * gs[0][key]] * 2
            name = {"torch": "torch (DataLoader over files)", "gpu": "gpu (resident, no workers)"}.get(backend, backend)
            ax.plot(
                wx,
                ys,
                "-" if gs[0]["workers"] is not None else "--",
                marker="o" if len(gs) > 1 else None,
                color=COLORS[backend],
                label=name,
            )
        ax.set(xlabel="workers (processes or threads)", ylabel=label, xticks=xs)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(
        "Real CIFAR-10, ddpm_cifar10 batch 128, bf16, compiled, one H100 (pin_memory on; median of 2 runs)", fontsize=9
    )
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return out


def draw_repeats(results: Path, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_records(results)
    attach_data_free(records)
    runs = defaultdict(list)
    for r in (flat(r) for r in records if "figures" in r and r["job"]["kind"] == "loader"):
        runs[r["backend"]].append(r)
    order = sorted(runs, key=lambda b: statistics.median(r["vs_data_free"] for r in runs[b]))
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(order) + 1.2))
    for y, backend in enumerate(order):
        shares = [100 * r["vs_data_free"] for r in runs[backend]]
        starved = statistics.median(100 * r["starvation"] for r in runs[backend])
        ax.barh(y, statistics.median(shares), color=COLORS[backend], alpha=0.6)
        ax.plot(shares, [y] * len(shares), "o", color="black", markersize=3)
        ax.text(101.2, y, f"idle {starved:.1f}%, {len(shares)} runs", va="center", fontsize=7)
    ax.axvline(100, color="black", linestyle=":", linewidth=1)
    ax.set(yticks=range(len(order)), yticklabels=order, xlim=(85, 106), xlabel="training rate (% of data-free)")
    ax.set_title("ddpm_cifar10 b128 bf16 compiled, real CIFAR-10, 4 workers pinned, one H200", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, default=Path("bench/results/f1_cifar10_bs128/raw.tar.xz"))
    p.add_argument("--out", type=Path, default=Path("docs/starvation_h100.png"))
    p.add_argument("--repeats", action="store_true", help="one worker count, every fresh process a dot")
    args = p.parse_args(argv)
    print(f"wrote {(draw_repeats if args.repeats else draw)(args.results, args.out)}")


if __name__ == "__main__":
    main()
