"""`bench watch -- COMMAND`: the program run as it is (and, with --compare, once more with its loader replayed from
memory), repeated, summed up in watch.json and in a few lines for people.

The headline with --compare is the program's rate as a share of its own data-free rate: starvation alone can call a
loop fed while its loader workers slow every step by competing with the host that launches the kernels."""

from __future__ import annotations

import shutil
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

from common.atomic import write_json
from training.summary import MIN_TIMED_STEPS

from ..records.thresholds import BUSY
from ..report.answer import busy_line
from .launch import run_program
from .state import Settings
from .verdict import verdict

HEADLINE = (
    "samples_per_s",
    "starvation",
    "host_behind",
    "drained_at_request",
    "wait_median_ms",
    "wait_p95_ms",
    "epoch_start_idle",
    "cpu_cores",
    "nvml_gpu_util_pct",
    "nvml_power_w",
)


@dataclass(kw_only=True)
class WatchConfig:
    command: list[str]
    out: Path = Path("gpufeed-watch")
    warmup: int = 20  # steps left out: compilation, autotuning, worker start-up
    every: int = 100  # a progress line every N steps (0: none)
    loader_name: str | None = None  # substring of the loader label to measure (default: the most consumed)
    data_free: bool = False  # run only with the loader replayed: the program's own data-free rate
    compare: bool = False  # data-free run then real run, per repeat: the rate as a share of the data-free one
    repeats: int = 1  # runs of each mode: ratios mean something only beside their spread
    replay_batches: int = 8
    cpus: int | None = None  # pin the program to this many cores (None: all it may use)
    tensorboard: bool = False  # the progress line's figures as TensorBoard scalars, OUT/tensorboard/<run>


def modes(cfg: WatchConfig) -> list[str]:
    return ["data-free", "real"] if cfg.compare else ["data-free"] if cfg.data_free else ["real"]


def watch_command(cfg: WatchConfig, echo=print) -> tuple[int, dict]:
    """Run the program per mode and repeat; write OUT/watch.json; return (the program's exit code, the summary)."""
    from common.run_record import run_record

    runs_dir = cfg.out / "runs"
    for old in (runs_dir, cfg.out / "tensorboard"):  # figures of an earlier watch must not pass for this one's
        shutil.rmtree(old, ignore_errors=True)
    runs, code = [], 0
    for r in range(cfg.repeats):
        for mode in modes(cfg):
            board = str(cfg.out / "tensorboard" / f"{mode}-r{r}") if cfg.tensorboard else None
            settings = Settings(
                out=str(runs_dir / f"{mode}-r{r}"),
                warmup=cfg.warmup,
                every=cfg.every,
                loader_name=cfg.loader_name,
                data_free=mode == "data-free",
                replay_batches=cfg.replay_batches,
                tensorboard=board,
            )
            echo(f"bench watch: {mode} run {r + 1} of {cfg.repeats}: {' '.join(cfg.command)}")
            run = run_program(cfg.command, settings, cfg.cpus)
            runs.append(run | {"repeat": r})
            code = run["exit_code"]
            if code != 0 or run["interrupted"]:
                break
        if code != 0 or runs[-1]["interrupted"]:
            break
    summary = summarise(cfg, runs) | {"kind": "watch", "exit_code": code, "run": run_record()}
    summary["run"]["hardware"] |= next((x["where"] for x in runs if x["where"]), {})
    cfg.out.mkdir(parents=True, exist_ok=True)
    write_json(cfg.out / "watch.json", summary)
    return code, summary


def _median(runs: list[dict], key: str):
    vals = [x["figures"][key] for x in runs if x["figures"] and x["figures"].get(key) is not None]
    return statistics.median(vals) if vals else None


def summarise(cfg: WatchConfig, runs: list[dict]) -> dict:
    real = [x for x in runs if x["mode"] == "real" and x["figures"]]
    free = [x for x in runs if x["mode"] == "data-free" and x["figures"]]
    head = free if cfg.data_free else real  # never the data-free figures in place of a real run that failed
    out: dict = {
        "command": cfg.command,
        "config": asdict(cfg) | {"out": str(cfg.out)},
        "runs": runs,
        "loaders": runs[0]["loaders"] if runs else [],
    }
    if not head:
        out["verdict"] = None
        return out
    last = head[-1]["figures"]
    out |= {k: _median(head, k) for k in HEADLINE}
    out |= {
        "steps": last["steps"],
        "batch_size": last["batch_size"],
        "source": last["source"],
        "ranks": last["ranks"],
        "loader": last["loader"],
        "samples_per_s_range": [
            min(x["figures"]["samples_per_s"] for x in head),
            max(x["figures"]["samples_per_s"] for x in head),
        ],
    }
    out |= {"warmup_used": last.get("warmup"), "busy": max(x["figures"].get("other_share") or 0.0 for x in head)}
    if "starvation_worst" in last:
        out["starvation_worst"] = max(x["figures"]["starvation_worst"] for x in head)
    if real and free:
        out["data_free"] = {k: _median(free, k) for k in HEADLINE}
        ratios = [
            a["figures"]["samples_per_s"] / b["figures"]["samples_per_s"]
            for a, b in zip(real, free)
            if b["figures"]["samples_per_s"]
        ]
        out["vs_data_free"] = statistics.median(ratios) if ratios else None
        out["vs_data_free_range"] = [min(ratios), max(ratios)] if ratios else None
        if out["vs_data_free"] is not None:
            waiting = min(out["starvation"], max(0.0, 1 - out["vs_data_free"]))
            out["shortfall"] = {"waiting": waiting, "other": max(0.0, 1 - out["vs_data_free"] - waiting)}
    fig = {k: out.get(k) for k in HEADLINE} | {"source": out["source"]}
    out["verdict"] = verdict(fig, out.get("vs_data_free")) if real else None
    return out


def describe(summary: dict, out: Path) -> list[str]:
    """The few lines a person reads at the end."""
    if summary.get("samples_per_s") is None and summary["exit_code"] != 0:
        return [
            f"bench watch: the program exited with status {summary['exit_code']} before two steps past warm-up "
            f"(--timing-warmup {summary['config']['warmup']}) were measured; details: {out / 'watch.json'}"
        ]
    if summary.get("samples_per_s") is None:
        return [
            "bench watch: no loader was iterated for two steps after warm-up, so nothing was measured. It watches "
            "iterators of torch DataLoader (and subclasses), FFCV's Loader, DALI's PyTorch iterators and gpufeed's "
            "loaders; for any other iterable: `from bench import watch` / `for batch in watch(loader): ...`; "
            "for a short program, lower --timing-warmup."
        ]
    lines = [
        f"bench watch: {summary['loader']}, {summary['steps']} steps of {summary['batch_size']} measured"
        + (f" on {summary['ranks']} ranks" if summary["ranks"] > 1 else "")
    ]
    rate = f"  rate {summary['samples_per_s']:,.0f} samples/s"
    lo, hi = summary["samples_per_s_range"]
    rate += f" (runs {lo:,.0f}-{hi:,.0f})" if len([r for r in summary["runs"] if r["mode"] == "real"]) > 1 else ""
    if summary.get("vs_data_free") is not None:
        rate += f", {summary['vs_data_free']:.1%} of its data-free rate ({summary['data_free']['samples_per_s']:,.0f})"
    lines.append(rate)
    worst = f" (worst rank {summary['starvation_worst']:.1%})" if "starvation_worst" in summary else ""
    behind = "" if summary["host_behind"] is None else f", host behind {summary['host_behind']:.0%}"
    lines.append(
        f"  starvation {summary['starvation']:.1%}{worst}, wait median {summary['wait_median_ms']:.1f} ms "
        f"(p95 {summary['wait_p95_ms']:.1f}){behind}"
    )
    if any(r["interrupted"] for r in summary["runs"]):
        lines.append("  interrupted: the figures cover the steps before the program stopped")
    lines += _caveats(summary)
    if summary.get("verdict"):
        few = summary["steps"] < MIN_TIMED_STEPS
        caveat = f" (from {summary['steps']} measured steps: too few to trust; watch a longer run)" if few else ""
        lines.append(f"  verdict: {summary['verdict']}{caveat}")
    others = [x["label"] for x in summary["loaders"][1:]]
    if others:
        lines.append(f"  other loaders seen (name one with --loader-name): {'; '.join(others)}")
    lines.append(f"  details: {out / 'watch.json'}")
    return lines


def _caveats(summary: dict) -> list[str]:
    """A warm-up shortened to fit a short run, and a busy machine, said beside the figures they weaken."""
    lines = []
    asked, used = summary["config"]["warmup"], summary.get("warmup_used")
    if used is not None and used < asked:
        lines.append(
            f"  warm-up: {used} steps left out, not --timing-warmup {asked}: the run was too short, so half of it "
            "is measured"
        )
    if (summary.get("busy") or 0.0) > BUSY:
        lines.append(busy_line(summary["busy"]))
    return lines
