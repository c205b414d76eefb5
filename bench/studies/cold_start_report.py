"""The cold-start study's report (bench/studies/cold_start.py): a table of medians per variant and kind of start, and
a bar per run of launch to first step done, in the pieces the run recorded."""

from __future__ import annotations

import statistics
from pathlib import Path

PHASES = (
    "entire_frame_compile",
    "entire_backward_compile",
    "backend_compile",
    "inductor_compile",
    "async_compile.wait",
)


def figures(r: dict) -> list[float]:
    """One run's row: launch to first step done, to the first timed step (after the warm-up steps, which hold the
    CUDA-graph capture), the first step, Dynamo's phases, graphs built and found, rate."""
    c = r["compile"]
    phases = [c["phases_s"].get(p, 0.0) for p in PHASES]
    graphs = [c["caches"].get("fxgraph_cache_miss", 0), c["caches"].get("fxgraph_cache_hit", 0)]
    timed = c.get("timed_since_launch_s") or float("nan")
    return [c["since_launch_s"], timed, c["first_step_s"], *phases, *graphs, r["samples_per_s"]]


def table(runs: list[dict]) -> str:
    """Medians per variant and kind of start."""
    head = [
        "launch to first step done, s",
        "launch to first timed step, s",
        "first step, s",
        *PHASES,
        "graphs built",
        "graphs found",
        "samples/s",
    ]
    rows = ["| variant | start | runs | " + " | ".join(head) + " |", "|---|---|--:|" + "--:|" * len(head)]
    for name in dict.fromkeys(r.get("variant", "") for r in runs):
        for kind in ("cold", "warm"):
            mine = [figures(r) for r in runs if r.get("variant", "") == name and r["name"].split("-")[-2] == kind]
            if mine:
                medians = [statistics.median(column) for column in zip(*mine)]
                cells = " | ".join(f"{v:,.1f}" for v in medians)
                rows.append(f"| {name} | {kind} | {len(mine)} | {cells} |")
    return "\n".join(rows)


SET_UP = {
    "imports done": "interpreter, imports",
    "model on the device": "the device's start, the model",
    "compile cache loaded": "the compiler's import, loading the compile cache",
    "model compiled": "torch.compile (installs a traced program from the cache)",
    "model built, compile cache loaded": "interpreter, imports, device, model, compile cache",  # older runs
    "loader open": "opening the loader",
    "first batch in hand": "the first batch",
    "FLOPs counted": "the FLOP count",
}


def pieces(c: dict) -> dict[str, float]:
    """Launch to first step done, in pieces: the set-up between the marks the run recorded (runs without them: one
    piece), the rest of the set-up, then the first step's compile of the forward and of the backward (Dynamo's frame
    times, the backend's work inside them) and the rest of the step."""
    out, last = {}, 0.0
    for mark, at in c.get("set_up_s", {}).items():
        out[SET_UP.get(mark, mark)], last = at - last, at
    out["set-up before the first step" if not out else "the rest of the set-up"] = (
        c["since_launch_s"] - c["first_step_s"] - last
    )
    forward = c["phases_s"].get("entire_frame_compile", 0.0)
    backward = c["phases_s"].get("entire_backward_compile", 0.0)
    rest = max(0.0, c["first_step_s"] - forward - backward)
    return out | {"compile, forward": forward, "compile, backward": backward, "rest of step 1": rest}


def plot(runs: list[dict], path: Path, title: str) -> Path:
    """One bar per run, launch to first step done, in the pieces above."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per_run = [pieces(r["compile"]) for r in runs]
    order = [*SET_UP.values(), "set-up before the first step", "the rest of the set-up"]
    names = [n for n in order if any(n in p for p in per_run)] + [n for n in per_run[0] if n not in order]
    parts = {name: [p.get(name, 0.0) for p in per_run] for name in names}
    fig, ax = plt.subplots(figsize=(12, 0.6 * len(runs) + 1.8))
    left = [0.0] * len(runs)
    colors = {"compile, forward": "tab:blue", "compile, backward": "tab:purple", "rest of step 1": "tab:orange"}
    n = sum(name not in colors for name in names)  # the set-up's pieces: greys, darkest first
    greys = iter(plt.cm.Greys([0.8 - 0.65 * i / max(1, n - 1) for i in range(n)]))
    for name, values in parts.items():
        color = colors.get(name) or next(greys)
        ax.barh([r["name"] for r in runs], values, left=left, label=name, color=color)
        left = [a + b for a, b in zip(left, values)]
    ax.invert_yaxis()
    ax.set_xlabel("seconds from launch")
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
