"""Does the UNet train the same with its faster forms (training.model) as with the forms they replaced
(bench/studies/speedups.py)? The real training loop (`train`: a real loader, EMA, the learning-rate warm-up, bf16,
compiled with CUDA graphs) runs once per form from the same seed, each in a fresh process, and the per-step losses are
compared window by window: the two runs draw the same batches, timesteps and noise at first and drift apart only
through rounding, so the window means should differ by no more than their noise (the standard error of a window's
mean, from the per-step spread). The JSON keeps every per-step loss, both rates and the comparison; the plot draws
the window means.

    python -m bench.studies.forms_loss_curve --data DATA --steps 4000 --out bench/results/forms_loss_curve_h100
    python -m bench.studies.forms_loss_curve --data DATA --model tiny --device cpu --precision fp32 --no-compile \\
        --batch-size 16 --steps 40 --window 10 --out /tmp/curve      # a smoke run without a GPU
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

FORMS = ("current", "previous")


def run_form(form: str, args: argparse.Namespace, out: Path) -> None:
    """In this process: train with `form`, write the run's summary (per-step losses included) to `out`."""
    import tempfile

    import training.model
    from training.config import measuring_run
    from training.loop import main

    from .speedups import PREVIOUS, SlicedGradCatUNet, revert

    if form == "previous":

        class PreviousUNet(SlicedGradCatUNet):
            def __init__(self, cfg) -> None:
                super().__init__(cfg)
                revert(self, [n for n in PREVIOUS if n != "cat_sliced_grad"])  # the class itself is that one

        training.model.UNet = PreviousUNet  # the loop builds its model from training.model.UNet when it starts
    with tempfile.TemporaryDirectory(prefix="gpufeed-curve-") as run_dir:
        cfg = measuring_run(
            run_dir,
            args.steps,
            data=args.data,
            loader=args.loader,
            model=args.model,
            batch_size=args.batch_size,
            precision=args.precision,
            compile=args.compile,
            device=args.device,
            timing_warmup=min(args.steps // 2, 200),
        )
        summary = main(cfg).to_dict()
    out.write_text(json.dumps({"form": form} | summary, default=str) + "\n")


def windows(losses: list[float], width: int) -> list[tuple[float, float]]:
    """(mean, standard error of the mean) of each full window of `width` steps."""
    out = []
    for a in range(0, len(losses) - width + 1, width):
        w = losses[a : a + width]
        out.append((statistics.fmean(w), statistics.stdev(w) / math.sqrt(width)))
    return out


def compare(runs: dict[str, dict], width: int) -> dict:
    cur, prev = (windows(runs[f]["losses"], width) for f in FORMS)
    rows = []
    for i, ((m1, e1), (m2, e2)) in enumerate(zip(cur, prev)):
        se = math.hypot(e1, e2)
        rows.append(
            {
                "steps": [i * width + 1, (i + 1) * width],
                "current": m1,
                "previous": m2,
                "difference": m1 - m2,
                "z": (m1 - m2) / se if se else 0.0,
            }
        )
    zs = [r["z"] for r in rows]
    return {
        "window": width,
        "windows": rows,
        "max_abs_z": max(map(abs, zs)),
        "mean_z": statistics.fmean(zs),  # a systematic shift shows here, random drift averages out
        "within_2_se": sum(abs(z) <= 2 for z in zs) / len(zs),
    }


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["comparison"]["windows"]
    steps = [r["steps"][1] for r in rows]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for form in FORMS:
        rate = result["runs"][form]["samples_per_s"]
        ax.plot(steps, [r[form] for r in rows], marker=".", label=f"{form} forms ({rate:,.0f} samples/s)")
    args = result["args"]
    ax.set(
        xlabel="step",
        ylabel=f"mean loss over {result['comparison']['window']} steps",
        yscale="log",
        title=f"{args['model']}, batch {args['batch_size']}: faster forms vs previous",
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, required=True, help="a `dataprep convert` directory")
    p.add_argument("--loader", default="gpu", help="a backend name (not fastest: both runs must read alike)")
    p.add_argument("--model", default="ddpm_cifar10")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=5000)
    p.add_argument("--window", type=int, default=250, help="steps per compared mean")
    p.add_argument("--precision", default="bf16")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", type=Path, required=True, help="directory for curves.json and curves.png")
    p.add_argument("--form", choices=FORMS, help=argparse.SUPPRESS)  # the child process's own run
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict | None:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.form:
        run_form(args.form, args, args.out / f"run-{args.form}.json")
        return None
    from common.run_record import run_record

    runs = {}
    for form in FORMS:  # a fresh process each: compiled graphs and the patched class stay in their own run
        subprocess.run(
            [sys.executable, "-m", "bench.studies.forms_loss_curve", *(argv or sys.argv[1:]), "--form", form],
            check=True,
        )
        runs[form] = json.loads((args.out / f"run-{form}.json").read_text())
    keep = ("samples_per_s", "final_loss", "wall_s", "param_checksum", "losses", "config")
    result = {
        "run": run_record(args.device) | {"command": " ".join(sys.argv)},
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "form"},
        "runs": {f: {k: r[k] for k in keep} for f, r in runs.items()},
        "comparison": compare(runs, args.window),
    }
    (args.out / "curves.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    for form in FORMS:
        (args.out / f"run-{form}.json").unlink()
    plot(result, args.out / "curves.png")
    c = result["comparison"]
    print(
        f"{len(c['windows'])} windows of {c['window']} steps: |z| <= 2 in {c['within_2_se']:.0%}, max |z| "
        f"{c['max_abs_z']:.2f}, mean z {c['mean_z']:+.2f}; rates current {runs['current']['samples_per_s']:,.0f}, "
        f"previous {runs['previous']['samples_per_s']:,.0f} samples/s"
    )
    return result


if __name__ == "__main__":
    main()
