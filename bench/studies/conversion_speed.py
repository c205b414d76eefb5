"""How long `dataprep convert` takes with a given number of cores, and what memory its process tree peaks at: each
run converts the same input into every format in a fresh process pinned to its first N allowed cores (`--workers`
left at its default, the cores it may use), timed from launch to exit, the tree sampled with bench.grid.monitor.

    python -m bench.studies.conversion_speed --input cifar10-jpg --scratch /tmp/conv --cores all,2 \\
        --out bench/results/conversion_speed.json

Each run also keeps the stages the conversion timed itself (the manifest's "timings", `dataprep convert --timings`).
`--machine` first measures what no conversion controls: how long importing FFCV takes in a fresh process, and how
fast the file system creates small files from 1 to N processes, in one directory and in one directory each.

Every run writes a directory of its own under the scratch directory, deleted only at the end, and starts once the
data written before it is on disk (`sync`, not timed), so that no run pays for the write-back of the one before:
creating files right after 50,000 were deleted cost up to 10x more kernel time on both machines measured (the file
system still busy with the deletion), which a conversion on a quiet disk does not pay. The JSON holds every run, the
hardware, versions, commit and command."""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from common.run_record import run_record

from ..grid.monitor import ResourceMonitor


def convert_once(src: Path, out: Path, cores: int, formats: str, extra: list[str]) -> dict:
    """One conversion into the new directory `out`, pinned to `cores` cores: wall seconds, CPU seconds of its whole
    tree (and user / kernel of the processes it waited for: creating files is kernel time), peak PSS."""
    allowed = sorted(os.sched_getaffinity(0))[:cores]
    cmd = [
        sys.executable,
        "-m",
        "dataprep",
        "convert",
        "--input",
        str(src),
        "--output",
        str(out),
        "--format",
        formats,
        "--quiet",
        *extra,
    ]
    os.sync()  # the last run's (or the probe's) data on disk first, so that this run does not pay its write-back
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with ResourceMonitor(interval=0.25) as mon:
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, preexec_fn=lambda: os.sched_setaffinity(0, allowed), capture_output=True, text=True)
        wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"conversion on {cores} cores failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    figures = mon.figures(t0, t0 + wall)
    timings = json.loads((out / "manifest.json").read_text()).get("timings")
    return {
        "cores": cores,
        "formats": formats,
        "wall_s": round(wall, 2),
        "cpu_s": round(mon.samples[-1].cpu_s, 1),
        "user_s": round(after.ru_utime - before.ru_utime, 1),
        "sys_s": round(after.ru_stime - before.ru_stime, 1),
        "peak_pss_mib": round(figures["peak_mem_mib"] or 0.0),
        "output": proc.stdout.strip(),
        "timings": timings,
    }


def import_seconds(module: str, env: dict | None = None) -> float:
    """Wall seconds of `import module` in a fresh interpreter, with `env` added to its environment."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True, env=os.environ | (env or {}))
    return round(time.perf_counter() - t0, 2)


def _create(folder: str, count: int, size: int = 2500) -> float:
    os.makedirs(folder, exist_ok=True)
    data, t0 = os.urandom(size), time.process_time()
    for i in range(count):
        with open(f"{folder}/{os.getpid()}-{i:08d}.png", "wb") as f:
            f.write(data)
    return time.process_time() - t0


def file_creation(scratch: Path, processes: list[int], total: int = 50000) -> list[dict]:
    """`total` files of 2.5 KB (a CIFAR PNG) created by P processes, in one shared directory and in one each."""
    from concurrent.futures import ProcessPoolExecutor

    out = []
    for p in processes:
        for shared in (True, False):
            where = scratch / f"files-{p}-{'shared' if shared else 'own'}"
            folders = [str(where / ("all" if shared else f"p{k}")) for k in range(p)]
            with ProcessPoolExecutor(p) as pool:
                t0 = time.perf_counter()
                cpu = sum(pool.map(_create, folders, [total // p] * p))
                wall = time.perf_counter() - t0
            out.append(
                {
                    "processes": p,
                    "one_directory": shared,
                    "files": total // p * p,
                    "wall_s": round(wall, 2),
                    "cpu_s": round(cpu, 1),
                    "us_per_file": round(wall / total * 1e6, 1),
                }
            )
            print(
                f"file creation: {p:>2} processes, {'one directory' if shared else 'one each'}: "
                f"{wall:.2f} s, {cpu:.1f} CPU-s",
                flush=True,
            )
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", type=Path, required=True, help="what `dataprep convert --input` takes")
    p.add_argument("--scratch", type=Path, required=True, help="a directory for every run's output, deleted at the end")
    p.add_argument("--cores", default="all", help="comma list of core counts, or all (the cores this process may use)")
    p.add_argument("--formats", default="all", help="`--format` values separated by ;, each timed alone")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--machine", action="store_true", help="first: FFCV's import time and file creation speed")
    p.add_argument("--out", type=Path, help="JSON to write")
    p.add_argument("extra", nargs="*", help="more `dataprep convert` options, after --")
    args = p.parse_args(argv)
    here = len(os.sched_getaffinity(0))
    counts = [here if c == "all" else int(c) for c in args.cores.split(",")]
    if max(counts) > here:
        raise SystemExit(f"--cores asks for {max(counts)} cores; this process may use {here}")
    if args.scratch.is_dir() and any(args.scratch.iterdir()):
        raise SystemExit(f"{args.scratch}: not empty; give a new --scratch (deleting it first slows the runs after)")
    machine = None
    if args.machine:
        # FFCV compiles its loader's numba functions as it is imported; the conversion imports it with numba's JIT off
        jit_off = {"NUMBA_DISABLE_JIT": "1"}
        machine = {
            "import_ffcv_s": [import_seconds("ffcv.writer") for _ in range(2)],
            "import_ffcv_jit_off_s": [import_seconds("ffcv.writer", jit_off) for _ in range(2)],
            "file_creation": file_creation(args.scratch, sorted({1, 4, here})),
        }
        print(
            f"import ffcv.writer: {machine['import_ffcv_s']} s, JIT off {machine['import_ffcv_jit_off_s']} s",
            flush=True,
        )
    runs = []
    for r in range(args.repeats):
        for cores in counts:
            for formats in args.formats.split(";"):
                out = args.scratch / f"run-{len(runs):02d}"
                run = convert_once(args.input, out, cores, formats, args.extra) | {"repeat": r}
                runs.append(run)
                print(
                    f"{cores:>3} cores, {formats}: {run['wall_s']:6.1f} s wall, {run['cpu_s']:6.1f} CPU-s ("
                    f"{run['user_s']} user, {run['sys_s']} kernel), peak PSS {run['peak_pss_mib']:,} MiB",
                    flush=True,
                )
    shutil.rmtree(args.scratch, ignore_errors=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        record = {"run": run_record(device="cpu"), "runs": runs} | ({"machine": machine} if machine else {})
        args.out.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
