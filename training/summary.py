"""What a finished run says: a few lines for people (rate, starvation, loss, the loader and why, where things went)
and the full record for scripts, RUN_DIR/summary.json (`train --json` prints it). The per-step losses stay out of
the record (800,000 floats on a full run); metrics.jsonl holds the loss of every logged window."""

from __future__ import annotations

from pathlib import Path

from common.atomic import write_json
from common.run_record import run_record
from common.text import printable
from loaders import backend_label

SUMMARY_NAME = "summary.json"


def record(summary: dict, run_dir: Path) -> dict:
    """The run's summary (RunSummary.to_dict()) without its per-step losses, with the files it left."""
    run_dir = Path(run_dir)
    samples = sorted((run_dir / "samples").glob("step*.png"))
    files = {
        "summary": run_dir / SUMMARY_NAME,
        "metrics": run_dir / "metrics.jsonl",
        "samples": samples[-1] if samples else None,
        "checkpoint": run_dir / "ckpt.pt",
        "tensorboard": run_dir / "tensorboard",
        "profile": run_dir / "profile",
    }
    kept = {k: str(v) for k, v in files.items() if v is not None and (k == "summary" or Path(v).exists())}
    losses = summary.get("losses") or []
    return {k: v for k, v in summary.items() if k != "losses"} | {
        "first_loss": losses[0] if losses else None,
        "files": kept,
        "run": run_record(summary.get("config", {}).get("device")),  # where it ran, as every bench result says
    }


def write(run_dir: Path, rec: dict) -> Path:
    path = Path(run_dir) / SUMMARY_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, rec)
    return path


EARLY = 10_000  # steps before which a sample grid is expected to be noise (the paper trained CIFAR-10 for 800k)
MIN_TIMED_STEPS = 10  # fewer timed steps than this make a rate a rough figure: say so


def timed_steps(starvation: dict, cfg: dict) -> str:
    """How many steps the rate rests on, and a warning when they are too few to trust or include warm-up steps."""
    n, left_out, warmup = starvation.get("steps"), starvation.get("untimed_steps"), cfg.get("timing_warmup", 0)
    if n is None:
        return ""
    said = f" over {n} timed step{'s' * (n != 1)}"
    if left_out is not None and left_out < warmup:
        return (
            f"{said} (warm-up steps among them: the run was shorter than --timing-warmup {warmup}; not a rate to "
            f"compare: run more --steps)"
        )
    if n < MIN_TIMED_STEPS:
        return f"{said} (too few to trust: run {left_out + MIN_TIMED_STEPS} or more --steps)"
    return said


def ranks_detail(s: dict, world: int) -> str:
    """Under several ranks, beside the group's starvation: the rank the others waited for, then each rank's own
    figure (rank 0's, the mean, the worst rank's), which a rank held at the all-reduce keeps low."""
    who = ""
    if s.get("waited_on_rank") is not None:
        who = f"rank {s['waited_on_rank']} made the others wait, {s['waited_on_share']:.0%} of that time; "
    own = s.get("starvation_own", s["starvation"])
    return (
        f"{who}each rank's own: rank 0 {own:.1%}, mean over {world} ranks {s['starvation_mean']:.1%}, "
        f"worst rank {s['starvation_worst_rank']} {s['starvation_max']:.1%}"
    )


# what the headline is a share of: (on a GPU, under several ranks) -> words
WAITING = {
    (True, False): "the share of time the GPU sat idle waiting for data",
    (False, False): "the share of time training waited for data",
    (True, True): "the share of time every GPU sat idle waiting for some rank's data",
    (False, True): "the share of time every rank waited for some rank's data",
}


def _starved(s: dict, world: int, device: str) -> str:
    """The starvation headline: under several ranks the time every rank lost to some rank's input."""
    if "starvation" not in s:
        return "too few steps to time"
    group = world > 1 and s.get("starvation_any") is not None
    text = f"starvation {s['starvation_any'] if group else s['starvation']:.1%} "
    text += f"({WAITING[str(device).startswith('cuda'), group]}"
    if world > 1 and s.get("starvation_mean") is not None:
        text += "; " + ranks_detail(s, world)
    return text + ")"


def lines(rec: dict) -> list[str]:
    """The run in a few lines."""
    cfg, loader = rec.get("config", {}), rec.get("loader", {})
    device = cfg.get("device", "?")
    s = rec.get("starvation") or {}
    starved = _starved(s, cfg.get("world_size", 1), device)
    loss = f"loss {rec['final_loss']:.4f}" + (f" (first step {rec['first_loss']:.4f})" if rec.get("first_loss") else "")
    n = loader.get("workers")
    workers = f", {n} worker{'s' * (n != 1)}" if n is not None else ""
    out = [
        f"trained {cfg.get('model')} for {rec['steps']} steps on {device} in {rec['wall_s']:.0f} s: "
        f"{rec['samples_per_s']:,.0f} samples/s{timed_steps(s, cfg)}, {starved}, {loss}",
        f"loader: {backend_label(rec['backend'], device)}{workers}: {loader.get('reason', 'given to the loop')}",
    ]
    if str(device).startswith("cuda"):  # on CPU the FLOP rate and device memory say nothing about feeding a GPU
        mfu = f", MFU {rec['mfu']:.0%}" if rec.get("mfu") else ""
        out.append(f"compute: {rec['tflops']:.1f} TFLOP/s{mfu}, peak memory {rec['peak_memory_gib']:.2f} GiB")
        if s.get("host_behind_mean") is not None:  # near 1: the host starts steps late, launch-bound
            out.append(
                f"host behind the GPU on {s['host_behind_mean']:.0%} of the steps (mean over ranks), worst rank "
                f"{s['host_behind_worst_rank']} {s['host_behind_max']:.0%}"
            )
    c = rec.get("compile") or {}
    if c.get("first_step_s") is not None:  # a fresh machine's minutes of compiling are part of the run's wall time
        graphs = c.get("caches", {})
        kept = _kept(c.get("cache"))
        out.append(
            f"compile: the first step took {c['first_step_s']:.0f} s ({graphs.get('fxgraph_cache_miss', 0)} "
            f"graphs built, {graphs.get('fxgraph_cache_hit', 0)} found in caches); {kept}"
        )
    files = rec.get("files", {})
    total = rec.get("start_step", 0) + rec["steps"]
    if files.get("samples") and total < EARLY:
        out.append(
            f"samples after {total:,} steps are noise, as expected this early: a diffusion model draws recognisable "
            f"images after tens of thousands of steps"
        )
    where = ", ".join(f"{k} {v}" for k, v in files.items() if k != "summary")
    out.append(f"{where}; the full record: {files.get('summary')} (or --json)")
    return [printable(line) for line in out]  # paths, names and reasons can come from the data: no terminal controls


def _kept(cache: dict | None) -> str:
    """Where the kernels are for the next run, or the one reason they are not."""
    if not cache:
        return "no compile cache"
    if cache.get("refused"):
        return f"the compile cache was not used: {cache['refused']}"
    if cache.get("error"):
        return f"the compile cache was not saved: {cache['error']}"
    return f"kernels kept in {Path(cache['file']).parent}"
