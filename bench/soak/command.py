"""`bench soak`: run a command and record what its process tree holds over time, to show that a long run leaks
nothing: host memory (RSS and PSS summed over the tree), GPU memory (NVML, the tree's own processes, and the whole
device), open file descriptors, threads and child processes, every `interval` seconds.

    python -m bench soak --out DIR --duration 1200 -- train --data ... --loader fastest ...

Writes DIR/resources.jsonl (one sample a line, flushed as it goes, so a killed soak keeps its curve),
DIR/resources.png (one panel per quantity, warm-up shaded) and DIR/resources-summary.json: per quantity its median
over the first and the last tenth of the run between warm-up and the SIGTERM of `--duration`, the growth between
them and whether that is flat (growth within FLAT_FRACTION, or FLAT_MIB / FLAT_COUNT), the command's exit status,
and every process of the tree still alive `grace` seconds after the command ended (there should be none).
`--duration` stops the command with SIGTERM after that many seconds (`train` checkpoints and exits 143). Exit
status 1 when something grew, was left running, or the command failed."""

from __future__ import annotations

import json
import signal
import statistics
import subprocess
import time
from pathlib import Path

import click
import psutil

from .tree import Tree, open_nvml, sample

FLAT_FRACTION = 0.05  # memory may settle a little after warm-up (allocator caches, page cache of the data)
FLAT_MIB = 64.0  # ...or by this much, whichever is larger: one pinned staging buffer more is not a leak
FLAT_COUNT = 2  # fds, threads, children: a transient one at the sampling instant is not a leak
QUANTITIES = {  # key: (panel title, unit)
    "rss_mib": ("host RSS, tree", "MiB"),
    "pss_mib": ("host PSS, tree", "MiB"),
    "gpu_tree_mib": ("GPU memory, tree (NVML)", "MiB"),
    "gpu_used_mib": ("GPU memory, device (NVML)", "MiB"),
    "fds": ("open file descriptors", "count"),
    "threads": ("threads", "count"),
    "children": ("child processes", "count"),
}


def summarize(samples: list[dict], warmup_s: float) -> dict:
    """Per quantity: medians over the first and last tenth after warm-up, growth, flat or not."""
    running = [s for s in samples if not s.get("stopping")]  # a tree winding down after SIGTERM is no leak, nor flat
    after = [s for s in running if s["t_s"] >= warmup_s] or running
    tenth = max(1, len(after) // 10)
    out = {}
    for key in QUANTITIES:
        first = [s[key] for s in after[:tenth] if s.get(key) is not None]
        last = [s[key] for s in after[-tenth:] if s.get(key) is not None]
        if not first or not last:
            continue
        a, b = statistics.median(first), statistics.median(last)
        allowed = max(FLAT_FRACTION * abs(a), FLAT_MIB if key.endswith("_mib") else FLAT_COUNT)
        peak = max(s[key] for s in after if s.get(key) is not None)
        out[key] = {"after_warmup": a, "end": b, "growth": b - a, "max": peak, "flat": b - a <= allowed}
    return out


def plot(samples: list[dict], warmup_s: float, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k in QUANTITIES if any(s.get(k) is not None for s in samples)]
    fig, axes = plt.subplots(len(keys), 1, figsize=(9, 1.8 * len(keys)), sharex=True, squeeze=False)
    for ax, key in zip(axes[:, 0], keys):
        pts = [(s["t_s"] / 60, s[key]) for s in samples if s.get(key) is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], lw=1)
        ax.axvspan(0, warmup_s / 60, color="0.9")
        ax.set_ylabel(QUANTITIES[key][1])
        ax.set_title(QUANTITIES[key][0], fontsize=9, loc="left")
    axes[-1, 0].set_xlabel("minutes (grey: warm-up, left out of the summary)")
    fig.suptitle(title[:110], fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def soak(command: list[str], out: Path, interval: float, duration: float | None, warmup: float, grace: float) -> dict:
    """Run `command`, sample its tree until it ends (or `duration` passes: SIGTERM, then SIGKILL after `grace`)."""
    out.mkdir(parents=True, exist_ok=True)
    nvml, samples = open_nvml(), []
    proc = subprocess.Popen(command)
    tree, t0, stopped = Tree(psutil.Process(proc.pid)), time.monotonic(), False
    with open(out / "resources.jsonl", "w") as log:
        while proc.poll() is None:
            samples.append(sample(tree, t0, nvml) | ({"stopping": True} if stopped else {}))
            log.write(json.dumps(samples[-1]) + "\n")
            log.flush()
            if duration is not None and not stopped and time.monotonic() - t0 >= duration:
                proc.send_signal(signal.SIGTERM)
                stopped = True
            try:
                proc.wait(timeout=interval)
            except subprocess.TimeoutExpired:
                if stopped and time.monotonic() - t0 >= duration + grace:
                    proc.kill()
    deadline = time.monotonic() + grace
    while (left := tree.leftovers()) and time.monotonic() < deadline:
        time.sleep(0.5)
    from common.run_record import run_record

    summary = {
        "run": run_record(),
        "command": command,
        "exit_status": proc.returncode,
        "stopped_after_s": duration if stopped else None,
        "wall_s": time.monotonic() - t0,
        "interval_s": interval,
        "warmup_s": warmup,
        "samples": len(samples),
        "quantities": summarize(samples, warmup),
        "left_running": left,
    }
    (out / "resources-summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    if samples:
        plot(samples, warmup, out / "resources.png", " ".join(command))
    return summary


@click.command(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True, help="Where to write.")
@click.option("--interval", type=click.FloatRange(min=0.05), default=5.0, help="Seconds between samples.")
@click.option(
    "--duration",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Stop the command with SIGTERM after this many seconds [default: let it end].",
)
@click.option(
    "--warmup",
    type=click.FloatRange(min=0),
    default=120.0,
    help="Seconds left out of the flatness summary (start-up, compilation, page cache).",
)
@click.option(
    "--grace",
    type=click.FloatRange(min=0),
    default=30.0,
    help="Seconds the tree gets to end after the command (and after SIGTERM before SIGKILL).",
)
@click.argument("command", nargs=-1, required=True)
def soak_cmd(out: Path, interval: float, duration, warmup: float, grace: float, command: tuple[str, ...]) -> None:
    """Run COMMAND (after --) and record its process tree's memory, GPU memory, fds, threads and children."""
    summary = soak(list(command), out, interval, duration, warmup, grace)
    for key, q in summary["quantities"].items():
        click.echo(
            f"{key:13s} after warm-up {q['after_warmup']:10.1f}  end {q['end']:10.1f}  "
            f"max {q['max']:10.1f}  {'flat' if q['flat'] else 'GROWS'}"
        )
    click.echo(f"exit status {summary['exit_status']}; left running: {len(summary['left_running'])}; {out}")
    expected = {0} | ({128 + signal.SIGTERM, -signal.SIGTERM} if summary["stopped_after_s"] else set())
    flat = all(q["flat"] for q in summary["quantities"].values())
    if summary["left_running"] or not flat or summary["exit_status"] not in expected:
        raise SystemExit(1)


if __name__ == "__main__":
    soak_cmd()
