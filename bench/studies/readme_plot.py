"""The picture README opens with: starvation and training rate against workers, one line per backend, from the
committed finding-1 results (real CIFAR-10, ddpm_cifar10 at batch 128, bf16, compiled, on an H100). Each loader run
is set against the data-free rate of its own GPU, as `bench report` does; the JSONs are read from the finding's
archive in memory (or from a results directory), never rewritten or unpacked.

    python -m bench.studies.readme_plot --out docs/starvation_h100.png  # --results: f1_cifar10_bs128/raw.tar.xz
"""

from __future__ import annotations

import argparse
import json
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


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, default=Path("bench/results/f1_cifar10_bs128/raw.tar.xz"))
    p.add_argument("--out", type=Path, default=Path("docs/starvation_h100.png"))
    args = p.parse_args(argv)
    print(f"wrote {draw(args.results, args.out)}")


if __name__ == "__main__":
    main()
