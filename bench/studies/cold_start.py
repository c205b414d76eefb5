"""Cold start: how long a compiled `train` takes from launch to its first step, from empty caches and from the compile
cache an earlier run saved, and whether the step rate after it is the same. Runs alternate cold and warm, each one a
fresh `train` process whose local Inductor and Triton caches are emptied first, as on a new machine; a cold run also
gets an empty compile cache, a warm one a copy of what the first cold run saved. The local caches keep one path for
every run, as a new machine's default (/tmp/torchinductor_$USER) does for the same user: a kernel restored from the
compile cache looks for its autotuning results in the folder it was compiled in. The resident loader feeds every run, so
the data plays no part. Every run's summary is kept in the JSON; the table gives the medians per kind of start.

    python -m bench.studies.cold_start --data DATA --model ddpm_cifar10 --device cuda --precision bf16 \\
        --batch-size 128 --steps 400 --warmup 100 --rounds 2 --out bench/results/cold_start_h100

`--variant NAME=DIR[,KEY=VALUE...]` (repeatable) compares checkouts of this package and Inductor settings side by
side: every round runs each variant in turn, so a drift of the machine shows in all of them. `--cold-rounds N` runs
the cold start in the first N rounds only; later rounds are warm starts, which measure the step rate in a minute
instead of three.

    python -m bench.studies.cold_start ... --variant after=. --variant before=/tmp/before \\
        --variant light=.,triton.autotune_pointwise=False --rounds 3 --cold-rounds 1
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from common.atomic import write_json
from common.run_record import run_record

from .cold_start_report import plot, table

# `train` with Inductor settings made first: the settings as JSON, then train's arguments
LAUNCH = """
import json, sys
import torch._inductor.config
for key, value in json.loads(sys.argv[1]).items():
    *path, last = key.split(".")
    target = torch._inductor.config
    for name in path:
        target = getattr(target, name)
    setattr(target, last, value)
sys.argv = ["train", *sys.argv[2:]]
from training.cli import main
main()
"""


def variant(spec: str) -> dict:
    """NAME=DIR[,KEY=VALUE...]: a checkout of this package and Inductor settings (VALUE a Python literal)."""
    name, _, rest = spec.partition("=")
    code, *settings = rest.split(",")
    if not name or not code or not (Path(code) / "training").is_dir():
        raise SystemExit(f"--variant {spec}: expected NAME=DIR[,KEY=VALUE...], DIR a checkout with training/")
    pairs = {}
    for item in settings:
        key, _, value = item.partition("=")
        try:
            pairs[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise SystemExit(f"--variant {spec}: {item!r} is not KEY=<Python literal>") from None
    return {"name": name, "code": str(Path(code).resolve()), "inductor": pairs}


def run(args: argparse.Namespace, name: str, cache: Path, var: dict) -> dict:
    """One `train --compile` in a fresh process with empty local caches; its summary and launch-to-exit seconds."""
    work, local = args.out / "work" / name, args.out / "work" / "local"
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(local, ignore_errors=True)
    opts = [
        "--data",
        str(args.data),
        "--loader",
        "gpu",
        "--model",
        args.model,
        "--device",
        args.device,
        "--precision",
        args.precision,
        "--batch-size",
        str(args.batch_size),
        "--steps",
        str(args.steps),
        "--timing-warmup",
        str(args.warmup),
        "--log-every",
        str(args.steps),
        "--sample-every",
        "0",
        "--ckpt-every",
        "0",
        "--workers",
        "0",
        "--no-progress",
        "--json",
        "--compile",
        "--compile-cache",
        str(cache),
        "--out",
        str(work / "run"),
    ]
    env = os.environ | {
        "TORCHINDUCTOR_CACHE_DIR": str(local / "inductor"),
        "TRITON_CACHE_DIR": str(local / "triton"),
        "PYTHONPATH": os.pathsep.join([var["code"], *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    cmd = ["-c", LAUNCH, json.dumps(var["inductor"])] if var["inductor"] else ["-m", "training"]
    dropped = drop_page_cache() if args.drop_page_cache else None
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, *cmd, *opts], env=env, cwd=var["code"], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    (args.out / f"{name}.log").write_text(done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"{name}: train exited {done.returncode}; its log: {args.out / f'{name}.log'}")
    summary = json.loads((work / "run" / "summary.json").read_text())
    tuned = autotune_results(local / "inductor", t0)
    write_json(args.out / f"{name}-autotune.json", tuned)
    shutil.rmtree(local, ignore_errors=True)  # hundreds of MB of kernels per run on a GPU
    return {
        "name": name,
        "variant": var["name"],
        "kind": name.split("-")[-2],
        "launch_to_exit_s": wall,
        "samples_per_s": summary["samples_per_s"],
        "compile": summary["compile"],
        "steps": summary["steps"],
        "autotune_results": len(tuned),
        "page_cache_dropped": dropped,
    }


def drop_page_cache() -> bool:
    """Empty the kernel's page cache (root only), so that torch's libraries are read from disk as on a machine just
    started; False where this machine does not allow it."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        return False
    return True


def autotune_results(inductor: Path, t0: float) -> dict:
    """Triton's autotuning results in a run's Inductor cache: each file's path, when it was last written (seconds
    after launch) and what it holds. A warm run should find the cold run's results there, put back by the compile
    cache as it loads, and benchmark nothing: a result written again late, or under another name, was tuned anew."""
    launch = time.time() - (time.perf_counter() - t0)
    return {
        str(f.relative_to(inductor)): {"written_s": round(f.stat().st_mtime - launch, 1), "best": _json(f)}
        for f in sorted(inductor.rglob("*.best_config"))
    }


def _json(path: Path) -> object:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return f"unreadable: {e}"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, type=Path, help="a `dataprep convert` directory")
    p.add_argument("--model", default="tiny")
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=6, help="steps per run, warm-up included")
    p.add_argument("--warmup", type=int, default=3, help="steps left out of the rate")
    p.add_argument("--rounds", type=int, default=2, help="rounds, each a cold and a warm start of every variant")
    p.add_argument("--cold-rounds", type=int, default=None, help="cold starts in the first N rounds only")
    p.add_argument(
        "--variant",
        action="append",
        type=variant,
        default=[],
        help="NAME=DIR[,KEY=VALUE...]: a checkout and Inductor settings (default: this checkout)",
    )
    p.add_argument("--drop-page-cache", action="store_true", help="before every run, as on a machine just started")
    p.add_argument("--out", required=True, type=Path)
    args = p.parse_args(argv)
    args.out = args.out.resolve()
    args.variant = args.variant or [variant(f"this={Path(__file__).parents[2]}")]
    cold_rounds = args.rounds if args.cold_rounds is None else max(1, args.cold_rounds)
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.out / "work"
    runs: list[dict] = []

    def keep(record: dict) -> None:
        runs.append(record)
        write_json(args.out / "cold_start.partial.json", runs)  # a call cut short keeps what it ran

    for r in range(args.rounds):
        for var in args.variant:
            prefix = f"{var['name']}-" if len(args.variant) > 1 else ""
            saved, warm = work / f"{prefix}saved-cache", work / f"{prefix}cache-warm-{r}"
            shutil.rmtree(warm, ignore_errors=True)
            if r < cold_rounds:
                cold = work / f"{prefix}cache-cold-{r}"
                shutil.rmtree(cold, ignore_errors=True)
                keep(run(args, f"{prefix}cold-{r}", cold, var))
                if r == 0:  # every warm run starts from what the variant's first cold run saved
                    shutil.copytree(cold, saved, dirs_exist_ok=True)
            shutil.copytree(saved, warm)  # a copy: a warm run may add to its cache
            keep(run(args, f"{prefix}warm-{r}", warm, var))
            cold_s = runs[-2]["compile"]["since_launch_s"] if r < cold_rounds else float("nan")
            print(
                f"round {r} {var['name']}: first step done {cold_s:.1f} s after launch cold, "
                f"{runs[-1]['compile']['since_launch_s']:.1f} s warm",
                flush=True,
            )
    text = table(runs)
    # Inductor's and Triton's settings from the environment (the per-run cache folders are set here, not there)
    env = {
        k: v
        for k, v in os.environ.items()
        if k.startswith(("TORCHINDUCTOR_", "TRITON_", "TORCH_")) and "CACHE_DIR" not in k
    }
    write_json(
        args.out / "cold_start.json",
        {"config": vars(args) | {"out": str(args.out), "env": env}, "run": run_record(args.device), "runs": runs},
    )
    (args.out / "cold_start.md").write_text(text + "\n")
    title = f"{args.model}, batch {args.batch_size}, {args.device}, {args.precision}: launch to first step, cold, warm"
    try:
        plot(runs, args.out / "cold_start.png", title)
    except ImportError:  # a bare GPU machine: plot from the JSON elsewhere (`plot` reads only the runs)
        print("no plot: matplotlib is not installed here", file=sys.stderr)
    shutil.rmtree(work, ignore_errors=True)
    (args.out / "cold_start.partial.json").unlink(missing_ok=True)
    print(text)


if __name__ == "__main__":
    main()
