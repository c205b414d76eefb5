"""The stream loader in training, window by window: each run's 50-step windows of samples/s from a folder of
bench/studies/stream_pace.sh results (FOLDER/CALL/train_TAG/metrics.jsonl and summary.json), a table row per run
against the `gpu` run of the same call, and a plot of the windows.

    python -m bench.studies.stream_windows bench/results/f8_stream_pace_h200/ahead --out windows.png

A window counts as stalled below 95% of its call's `gpu` run's median window; the first window (the compiled graphs'
build or their load from the cache) is left out of both."""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

STALLED = 0.95


def runs(folder: Path) -> dict[str, dict[str, dict]]:
    """call -> tag -> {"rate", "starvation", "first_batch_s", "windows": [(step, samples/s)]}."""
    out: dict[str, dict[str, dict]] = {}
    for summary in sorted(folder.glob("*/train_*/summary.json")):
        s = json.loads(summary.read_text())
        rows = [json.loads(line) for line in (summary.parent / "metrics.jsonl").read_text().splitlines()]
        out.setdefault(summary.parent.parent.name, {})[summary.parent.name.removeprefix("train_")] = {
            "rate": s["samples_per_s"],
            "starvation": s.get("starvation"),
            "first_batch_s": s.get("first_batch_s"),
            "windows": [(r["step"], r["images_per_s"]) for r in rows[1:]],
        }
    return out


def table(found: dict[str, dict[str, dict]]) -> list[str]:
    """One markdown row per stream run (tag PREFIXsd...) against its call's `gpu` run (tag PREFIXgpu)."""
    head = "| call | run | samples/s | of the `gpu` run's | windows stalled | first batch |"
    lines = [head, "|---|---|--:|--:|--:|--:|"]
    for call, tags in found.items():
        for tag, run in tags.items():
            if "gpu" in tag:
                continue
            ref = tags[tag.split("sd")[0] + "gpu"]
            line = statistics.median(w for _, w in ref["windows"])
            stalled = sum(w < STALLED * line for _, w in run["windows"])
            lines.append(
                f"| {call} | {tag} | {run['rate']:,.0f} | {run['rate'] / ref['rate']:.1%} | "
                f"{stalled} of {len(run['windows'])} | {run['first_batch_s']:.2f} s |"
            )
    return lines


def plot(found: dict[str, dict[str, dict]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.2))
    for call, tags in found.items():
        for tag, run in tags.items():
            if tag.startswith("r4"):
                steps, rates = zip(*run["windows"])
                ax.plot(steps, rates, marker=".", label=f"{call}: {tag}", alpha=0.8)
    ax.set(xlabel="step", ylabel="samples/s, 50-step window (4 ranks)", ylim=(0, None))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.suptitle("ddpm_cifar10 on 4 H200s from a SeaweedFS store on the host: the stream loader against the gpu loader")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.studies.stream_windows", description=__doc__)
    p.add_argument("folder", type=Path)
    p.add_argument("--out", type=Path, help="the plot (PNG)")
    args = p.parse_args()
    found = runs(args.folder)
    print("\n".join(table(found)))
    if args.out:
        plot(found, args.out)


if __name__ == "__main__":
    main()
