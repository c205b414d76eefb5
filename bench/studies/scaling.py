"""Finding 7's numbers from what bench/studies/scaling.sh measured: one markdown summary (and its JSON) of a results
tree, and where a step's time goes in `train --profile` traces of 1 and N ranks.

    python -m bench.studies.scaling summary RESULTS      # RESULTS/summary.md and summary.json
    python -m bench.studies.scaling traces RESULTS/traces   # the per-step breakdown of every trace.json below it

Rates are samples/s over all ranks, each run's own (bench records: the sum over ranks of each rank's measured steps);
speed-ups are against the 1-GPU data-free rate of the same model, batch, cores and compile setting in the same tree
(one host, one call or the calls of one warm machine). A trace's breakdown, per profiled step on the GPU: its span
(first kernel's start to last kernel's end, over the steps), the time some kernel ran, NCCL's kernels and the part of
them no other kernel overlapped (exposed all-reduce), the idle time, and on the host the CUDA graph launches and
kernel launches per step (graph splits show as more graph launches; eager pieces as kernel launches)."""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from ..records.results import load_records
from ..records.rows import flat
from .scaling_traces import busy as busy  # tests/ import busy, overlap and trace_breakdown from here
from .scaling_traces import compress_traces, traces
from .scaling_traces import overlap as overlap
from .scaling_traces import trace_breakdown as trace_breakdown


def rows(results: Path) -> list[dict]:
    """Every bench record under `results` (one directory per grid), flattened, failed runs left out."""
    out = []
    for d in sorted({p.parent for p in Path(results).rglob("*.json")}):
        out += [flat(r) | {"grid": d.name, "weights_equal": _equal(r)} for r in load_records(d)]
    return [r for r in out if not r["error"] and r.get("samples_per_s")]


def _equal(rec: dict) -> bool | None:
    """Whether every rank ended with the same weights (their parameter checksums), where the record has ranks."""
    sums = [x.get("param_checksum") for x in rec.get("figures", {}).get("ranks", [])]
    return len(set(sums)) == 1 if len(sums) > 1 else None


def _setting(r: dict) -> tuple:
    """What a run's speed-up compares within: its 1-GPU run shares these."""
    return r["model"], r["batch_size"], r["cpus"], r["compile"], r["grad_sync"] == "step-graph"


def weak_table(rs: list[dict]) -> list[str]:
    """Data-free rate against GPUs, per model, batch per GPU, cores per rank and grad_sync, with the speed-up over the
    same setting's 1-GPU rate (one GPU trains without any gradient sync, so every grad_sync shares it, but step-graph,
    which captures one GPU's step too)."""
    free = [r for r in rs if r["kind"] == "data_free"]
    one = {_setting(r): r["samples_per_s"] for r in free if r["nproc"] == 1}
    lines = [
        "| model | batch per GPU | cores per rank | grad_sync | GPUs | samples/s | speed-up | of N-fold | ranks' "
        "weights equal |",
        "|---|--:|--:|---|--:|--:|--:|--:|---|",
    ]
    for r in sorted(free, key=lambda r: (r["model"], r["batch_size"], str(r["cpus"]), r["grad_sync"], r["nproc"])):
        base = one.get(_setting(r))
        up = r["samples_per_s"] / base if base else None
        sync = r["grad_sync"] if r["nproc"] > 1 or r["grad_sync"] == "step-graph" else "–"
        cells = [
            r["model"],
            r["batch_size"],
            r["cpus"] or "all",
            sync,
            r["nproc"],
            f"{r['samples_per_s']:,.0f}",
            _f(up, ".2f", "×"),
            _f(up and up / r["nproc"], ".1%"),
            {None: "–", True: "yes", False: "NO"}[r["weights_equal"]],
        ]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return lines


def strong_table(rs: list[dict]) -> list[str]:
    """Data-free rate at a fixed global batch (batch per GPU x GPUs), against the 1-GPU rate at that whole batch, for
    each global batch measured on one GPU and on more, under DDP and under the step graph (each against its own)."""
    free = [r for r in rs if r["kind"] == "data_free" and r["grad_sync"] in ("ddp", "step-graph")]
    groups: dict[tuple, dict[int, dict]] = defaultdict(dict)
    for r in free:
        groups[(r["model"], r["batch_size"] * r["nproc"], r["cpus"], r["compile"], r["grad_sync"])][r["nproc"]] = r
    lines = [
        "| model | global batch | cores per rank | grad_sync | GPUs | batch per GPU | samples/s | speed-up |",
        "|---|--:|--:|---|--:|--:|--:|--:|",
    ]
    for (model, total, cpus, _, sync), by_n in sorted(groups.items(), key=lambda kv: str(kv[0])):
        if 1 not in by_n or len(by_n) < 2:
            continue
        for n, r in sorted(by_n.items()):
            up = r["samples_per_s"] / by_n[1]["samples_per_s"]
            lines.append(
                f"| {model} | {total} | {cpus or 'all'} | {sync} | {n} | {r['batch_size']} | "
                f"{r['samples_per_s']:,.0f} | {up:.2f}× |"
            )
    return lines


def loader_table(rs: list[dict]) -> list[str]:
    """Each loader run against the data-free rate of its own rank count and cores (bench's figure), and against the
    unpinned one (every core of the host: a pinned data-free rate that the host cannot keep up with flatters its
    loaders), with who made the others wait and how much of the lost rate that waiting explains."""
    unpinned_free = [r for r in rs if r["kind"] == "data_free" and not r["cpus"]]
    free = {(r["model"], r["batch_size"], r["nproc"], r["grad_sync"]): r["samples_per_s"] for r in unpinned_free}
    lines = [
        "| model | GPUs | cores per rank | loader | samples/s | of data-free | of unpinned data-free "
        "| starvation (mean) | some rank starved | made the others wait | of the lost rate | host late (worst rank) |",
        "|---|--:|--:|---|--:|--:|--:|--:|--:|---|--:|--:|",
    ]
    key = lambda r: (r["model"], r["nproc"], r["backend"], r["cpus"] or 10**6)  # noqa: E731
    for r in sorted((r for r in rs if r["kind"] == "loader"), key=key):
        who = f"rank {r['waited_on_rank']} ({r['waited_on_share']:.0%})" if r.get("waited_on_rank") is not None else "–"
        lost = 1 - r["vs_data_free"] if r.get("vs_data_free") else None
        # a run within 1% of its data-free rate lost nothing a share could be taken of
        explains = r["starvation_any"] / lost if r.get("starvation_any") is not None and lost and lost > 0.01 else None
        unpinned = free.get((r["model"], r["batch_size"], r["nproc"], r["grad_sync"]))
        loader = r["backend"] + ("" if r["workers"] is None else f", {r['workers']} workers")
        cells = [
            r["model"],
            r["nproc"],
            r["cpus"] or "all",
            loader,
            f"{r['samples_per_s']:,.0f}",
            _f(r.get("vs_data_free"), ".1%"),
            _f(r["samples_per_s"] / unpinned if unpinned else None, ".1%"),
            _f(r.get("starvation_mean", r["starvation"]), ".2%"),
            _f(r.get("starvation_any"), ".2%"),
            who,
            _f(explains, ".0%"),
            _f(r.get("host_behind_max"), ".0%"),
        ]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return lines


def nccl_table(results: Path) -> list[str]:
    """bench/studies/nccl_probe.py's all-reduces alone, per rank count probed."""
    lines = ["| GPUs | all-reduce of | MB | ms | busbw GB/s |", "|--:|---|--:|--:|--:|"]
    for path in sorted(Path(results).glob("nccl/probe-np*.json")):
        probe = json.loads(path.read_text())
        for row in probe["all_reduce"]:
            lines.append(
                f"| {probe['world_size']} | {row['what']} | {row['bytes'] / 1e6:.1f} | {row['ms']:.3f} | "
                f"{row['busbw_gb_s']:.0f} |"
            )
        copies = "(`flat`'s copies into one buffer and back, host launch time included)"
        lines.append(f"| {probe['world_size']} | {copies} | | {probe['flat_copies_ms']:.3f} | |")
    return lines


def _f(v, spec: str, unit: str = "") -> str:
    return "–" if v is None else format(v, spec) + unit


def trace_table(found: list[dict]) -> list[str]:
    keys = ("span_ms", "busy_ms", "idle_ms", "nccl_ms", "nccl_exposed_ms", "graph_launches", "kernel_launches")
    lines = ["| run | rank | " + " | ".join(keys) + " |", "|---|---|" + "--:|" * len(keys)]
    for t in found:
        lines.append(f"| {t['run']} | {t['rank']} | " + " | ".join(f"{t[k]:g}" for k in keys) + " |")
    return lines


def host_table(found: list[dict]) -> list[str]:
    lines = ["| run | rank | host ms | where (ms) |", "|---|---|--:|---|"]
    for t in found:
        where = "; ".join(f"`{name[:60]}` {ms:g}" for name, ms in t.get("host_top", []))
        lines.append(f"| {t['run']} | {t['rank']} | {_f(t.get('host_ms'), 'g')} | {where} |")
    return lines


def tests_table(root: Path) -> list[str]:
    lines = []
    for path in sorted(Path(root).rglob("gputest/*.json")):
        lines += [f"- `{path.stem}`: `{json.dumps(json.loads(path.read_text()))[:600]}`"]
    return lines


def summary(results: Path, steps: int) -> dict:
    rs = rows(results)
    found = traces(results / "traces", steps) if (results / "traces").is_dir() else []
    md = ["# Several GPUs: what bench/studies/scaling.sh measured", "", "## Data-free rate against GPUs", ""]
    md += weak_table(rs) + ["", "## Strong scaling: one global batch over more GPUs", ""] + strong_table(rs)
    md += ["", "## Loaders against the data-free rate of their rank count", ""] + loader_table(rs)
    md += ["", "## One all-reduce alone (bench/studies/nccl_probe.py)", ""] + nccl_table(results)
    md += ["", f"## Where a step's time goes (profiler, per step over {steps} steps)", ""] + trace_table(found)
    md += ["", "## The training thread's time on the host, per step (its outermost operators)", ""] + host_table(found)
    md += ["", "## GPU tests (tests/integration/test_ranks_gpu.py)", ""] + tests_table(results)
    (results / "summary.md").write_text("\n".join(md) + "\n")
    rates = [
        {
            k: r.get(k)
            for k in (
                "grid",
                "name",
                "kind",
                "model",
                "batch_size",
                "nproc",
                "cpus",
                "grad_sync",
                "backend",
                "workers",
                "samples_per_s",
                "vs_data_free",
                "starvation",
                "starvation_any",
                "waited_on_rank",
                "waited_on_share",
                "weights_equal",
            )
        }
        for r in rs
    ]
    from common.run_record import run_record

    record = {"run": run_record(), "runs": rates, "traces": found}
    (results / "summary.json").write_text(json.dumps(record, indent=1))
    print("\n".join(md))
    return record


def plot(results: Path) -> Path:
    """RESULTS/scaling.png: per model, the data-free rate against GPUs per grad_sync with the ideal line (N x one GPU),
    the strong-scaling runs, and each loader run at its GPU count, marked by cores per rank."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rs = rows(results)
    models = sorted({r["model"] for r in rs})
    fig, axes = plt.subplots(1, len(models), figsize=(6 * len(models), 4.5), squeeze=False)
    for ax, model in zip(axes[0], models):
        free = [r for r in rs if r["model"] == model and r["kind"] == "data_free" and not r["cpus"]]
        ones = [r for r in free if r["nproc"] == 1]
        one = {r["batch_size"]: r["samples_per_s"] for r in ones if r["grad_sync"] != "step-graph"}
        graphed = {r["batch_size"]: r["samples_per_s"] for r in ones if r["grad_sync"] == "step-graph"}
        gpus = sorted({r["nproc"] for r in rs if r["model"] == model})
        for bs, rate in sorted(one.items()):
            style = "k:" if bs == min(one) else "k-."
            ax.plot(gpus, [rate * n for n in gpus], style, lw=1, label=f"ideal, batch {bs}/GPU")
        weak = [r for r in free if r["nproc"] > 1 and r["batch_size"] == min(one, default=None)]
        for sync in sorted({r["grad_sync"] for r in weak}):  # from the same 1-GPU rate, but step-graph from its own
            start = graphed.get(min(one)) if sync == "step-graph" else one[min(one)]
            line = [(1, start)] * (start is not None) + sorted(
                (r["nproc"], r["samples_per_s"]) for r in weak if r["grad_sync"] == sync
            )
            ax.plot(*zip(*line), "o-", label=f"data-free, {sync}")
        strong = [r for r in free if r["nproc"] > 1 and r["batch_size"] * r["nproc"] in one and r not in weak]
        for r in strong:  # a global batch the 1-GPU run also trained
            total = r["batch_size"] * r["nproc"]
            ax.plot([1, r["nproc"]], [one[total], r["samples_per_s"]], "s--", lw=1, label=f"strong, global {total}")
        for r in (r for r in rs if r["model"] == model and r["kind"] == "loader"):
            ax.scatter(r["nproc"], r["samples_per_s"], marker="x", s=30)
            ax.annotate(f"{r['backend']} {r['cpus'] or 'all'}c", (r["nproc"], r["samples_per_s"]), fontsize=7)
        ax.set(title=model, xlabel="GPUs", ylabel="samples/s (all ranks)", xticks=gpus)
        ax.legend(fontsize=7)
    out = Path(results) / "scaling.png"
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("summary", "traces", "plot", "gzip"))
    p.add_argument("root", type=Path)
    p.add_argument("--profile-steps", type=int, default=5, help="steps each trace holds (TrainConfig.profile_steps)")
    a = p.parse_args(argv)
    if a.what == "summary":
        summary(a.root, a.profile_steps)
    elif a.what == "plot":
        print(plot(a.root))
    elif a.what == "traces":
        print("\n".join(trace_table(traces(a.root, a.profile_steps))))
    else:
        compress_traces(a.root)


if __name__ == "__main__":
    main()
