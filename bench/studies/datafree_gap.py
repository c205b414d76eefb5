"""Why a loader that does not starve the GPU can still train below the data-free rate. One loader configuration and
the data-free batch, each run as `bench loaders` runs it (bench.grid.run_one: a fresh process, the real training loop),
alternately `--repeats` times for their rates; then once each with the profiler on the measured steps (bench's
cross-check), whose traces give per step the GPU's busy time, its idle time between steps (starvation) and inside
steps, and the kernel time by kernel. The JSON keeps every run and the comparison; the printed table is the kernels
whose time per step differs most. Timed runs already in `--out` are kept, so a second call resumes the first.

    python -m bench.studies.datafree_gap --data DATA --backend gpu --model tiny --batch-size 512 --cpus 4 \\
        --compile --steps 600 --warmup 30 --repeats 3 --out bench/results/f2_gap_h100
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from collections import defaultdict
from pathlib import Path

from ..grid.crosscheck import GPU_CATS, fetch_spans, load_trace
from ..grid.job import Job, collapse
from ..grid.runner import job_timeout_s, run_job


def run(job: Job, out: Path) -> dict:
    """One configuration in a fresh process, as `bench loaders` runs it (a crash or a timeout is an error record)."""
    if not run_job(job, out, dict(os.environ), job_timeout_s(job, None), None):
        raise SystemExit(f"{job.name}: {json.loads(out.read_text())['error']}")
    return json.loads(out.read_text())


def kernel_ms_per_step(trace: Path) -> dict[str, float]:
    """GPU time by kernel (memcpy, memset) name between the first and the last marked fetch, per step."""
    events = load_trace(trace)
    fetches = fetch_spans(events)
    lo, hi, steps = fetches[0][0], fetches[-1][0], len(fetches) - 1
    total: dict[str, float] = defaultdict(float)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in GPU_CATS and lo <= e["ts"] < hi:
            total[e["name"]] += e.get("dur", 0) / 1e3 / steps
    return dict(total)


def profiled(job: Job, out_dir: Path) -> dict:
    job = Job.from_dict(job.to_dict() | {"crosscheck": True})
    rec = run(job, out_dir / f"{job.name}-profiled.json")
    x = rec["figures"]["crosscheck"]
    if "error" in x:
        raise SystemExit(f"{job.name}: its trace could not be read: {x['error']}")
    kernels = kernel_ms_per_step(out_dir / "traces" / f"{job.name}.trace.json.gz")
    step_ms = 1e3 * x["span_s"] / x["steps"]
    return {
        "step_ms": step_ms,
        "busy_ms": step_ms * (1 - x["idle_total"]),
        "starvation": x["starvation"],
        "idle_inside_steps": x["idle_total"] - x["starvation"],
        "kernel_ms": sum(kernels.values()),
        "kernels": kernels,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="a `dataprep convert` directory")
    p.add_argument("--backend", default="gpu")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--pin-memory", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--model", default="tiny")
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--cpus", type=int)
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--steps", type=int, default=600, help="measured steps of the timed runs")
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--profiled-steps", type=int, default=60, help="measured steps of the profiled runs")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", type=Path, required=True, help="directory for gap.json and the runs")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    from common.run_record import run_record

    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    workers, pin = collapse(args.backend, args.workers, args.pin_memory, args.device)
    shared = ("data", "batch_size", "model", "steps", "warmup", "device", "cpus", "compile")  # options named as Job's
    common = {k: getattr(args, k) for k in shared}
    jobs = {
        "data_free": Job(kind="data_free", backend=None, workers=None, pin_memory=None, **common),
        args.backend: Job(kind="loader", backend=args.backend, workers=workers, pin_memory=pin, **common),
    }
    rates: dict[str, list[float]] = {k: [] for k in jobs}
    for r in range(args.repeats):  # alternated, so a drift of the machine reaches both alike
        for name, job in jobs.items():
            job = Job.from_dict(job.to_dict() | {"repeat": r})
            path = args.out / f"{job.name}.json"  # kept from an earlier call: resumed, not measured again
            rec = json.loads(path.read_text()) if path.is_file() else run(job, path)
            rates[name].append(rec["figures"]["samples_per_s"])
            print(f"{job.name}: {rates[name][-1]:,.0f} samples/s", flush=True)
    short = {k: Job.from_dict(j.to_dict() | {"steps": args.profiled_steps}) for k, j in jobs.items()}
    prof = {k: profiled(j, args.out) for k, j in short.items()}
    free, fed = prof["data_free"], prof[args.backend]
    names = set(free["kernels"]) | set(fed["kernels"])
    diff = sorted(((fed["kernels"].get(n, 0.0) - free["kernels"].get(n, 0.0), n) for n in names), reverse=True)
    ratio = statistics.median(rates[args.backend]) / statistics.median(rates["data_free"]) if args.repeats else None
    result = {
        "run": run_record(args.device),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "rates": rates,
        "ratio_of_medians": ratio,
        "profiled": prof,
        "kernel_ms_differences": [{"kernel": n, "ms_per_step": d} for d, n in diff],
    }
    (args.out / "gap.json").write_text(json.dumps(result, indent=1) + "\n")
    if args.repeats:
        print(f"{args.backend} / data-free, medians of {args.repeats}: {ratio:.2%}")
    for k, p in prof.items():
        print(
            f"{k:>10} profiled: step {p['step_ms']:.3f} ms, GPU busy {p['busy_ms']:.3f} ms, kernels "
            f"{p['kernel_ms']:.3f} ms, idle between steps {p['starvation']:.2%}, inside {p['idle_inside_steps']:.2%}"
        )
    for d, n in diff[:8] + diff[-3:]:
        print(f"  {d:+.4f} ms/step  {n[:110]}")
    return result


if __name__ == "__main__":
    main()
