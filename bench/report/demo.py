"""The closing lines of `make demo`: what was measured, which loader `train --loader fastest` took and why, how
the run went, where the plot, the table, the samples and the metrics are, read from the two summary.json files
(`bench loaders` writes one in its results directory, `train` one in its run directory), and the commands that do the
same with your own data.

    python -m bench.report.demo RESULTS_DIR RUN_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from loaders import backend_label

from ..records.thresholds import BUSY
from .answer import busy_line


def lines(results_dir: Path, run_dir: Path) -> list[str]:
    bench = json.loads((Path(results_dir) / "summary.json").read_text())
    run = json.loads((Path(run_dir) / "summary.json").read_text())
    out = []
    for sc in bench["scenarios"]:
        rate = f", the model alone {sc['data_free_rate']:,.0f} samples/s" if sc.get("data_free_rate") else ""
        out.append(
            f"measured: {len(sc['configurations'])} loader configurations in the training loop of {sc['title']}{rate}"
        )
        if (sc.get("busy") or 0.0) > BUSY and not sc.get("cannot_tell"):  # the choice's reason says it then
            out.append(busy_line(sc["busy"]).strip())
    loader, s = run.get("loader", {}), run.get("starvation") or {}
    n = loader.get("workers")
    workers = f", {n} worker{'s' * (n != 1)}" if n is not None else ""
    device = run.get("config", {}).get("device", "")
    out.append(f"chosen: {backend_label(run['backend'], device)}{workers}, because {loader.get('reason', '?')}")
    starved = f", starvation {s['starvation']:.1%}" if "starvation" in s else ""
    timed = f" (over {s['steps']} timed steps)" if s.get("steps") else ""
    out.append(
        f"trained: {run['steps']} steps at {run['samples_per_s']:,.0f} samples/s{timed}{starved}, loss "
        f"{run.get('first_loss') or run['final_loss']:.4f} -> {run['final_loss']:.4f}"
    )
    plots = ", ".join(sc["plot"] for sc in bench["scenarios"] if sc.get("plot"))
    files = run.get("files", {})
    out += [
        f"plot: {plots}",
        f"table: {bench['report']}",
        f"samples: {files.get('samples', 'none (sampling off)')}",
        f"metrics: {files.get('metrics')}",
    ]
    return out + NEXT


NEXT = [
    "",
    "next, with your own data (a folder of images or of audio clips, or CIFAR-10's python tarball):",
    "  source .venv/bin/activate",
    "  dataprep convert --input YOUR_FOLDER --out data/mine      # every format, checksummed",
    "  bench loaders --data data/mine                            # does the model starve, and which loader feeds it",
    "  train --data data/mine --loader fastest                   # train with the loader the bench found fastest",
]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m bench.report.demo RESULTS_DIR RUN_DIR", file=sys.stderr)
        return 2
    print("\n".join(lines(Path(args[0]), Path(args[1]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
