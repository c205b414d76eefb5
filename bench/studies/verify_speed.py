"""How long `dataprep verify DATA` takes with this checkout's code and with another checkout's (an earlier commit):
runs alternate between the two, each a fresh process timed from launch to exit (wall and CPU seconds), page cache
warm (a first, untimed run of each reads everything once), and the medians are compared as ratios measured in the
same session.

    git archive f676641 | tar -x -C /tmp/before
    python -m bench.studies.verify_speed --data /data/cifar10-files --before /tmp/before --rounds 5 \\
        --out bench/results/verify_speed.json

The JSON holds every run, the commits, hardware, versions and command."""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common.atomic import write_json
from common.run_record import run_record

HERE = Path(__file__).resolve().parents[2]


def verify_once(code: Path, data: Path) -> dict:
    """Wall and CPU seconds (user + kernel) of `python -m dataprep verify data` importing dataprep from the checkout
    `code`. The CPU seconds vary less than the wall time on a machine shared with other work."""
    env = dict(os.environ, PYTHONPATH=str(code))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "dataprep", "verify", str(data)], env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"verify with {code} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "load_average": os.getloadavg()[0]}


def commit_of(code: Path) -> str | None:
    """The commit an archive or checkout holds: `git archive` writes it into the pax header, not a file."""
    done = subprocess.run(["git", "-C", str(code), "rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or None


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, required=True, help="A prepared directory (dataprep convert).")
    p.add_argument("--before", type=Path, required=True, help="A checkout or archive of the earlier commit.")
    p.add_argument("--before-commit", default=None, help="Its commit, recorded (an archive does not say).")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    codes = {"before": args.before.resolve(), "after": HERE}
    for code in codes.values():  # warm the page cache and the imports; not timed
        verify_once(code, args.data)
    runs = []
    for r in range(args.rounds):
        order = ("before", "after") if r % 2 == 0 else ("after", "before")
        for which in order:
            runs.append({"round": r, "code": which} | verify_once(codes[which], args.data))
            print(runs[-1], flush=True)
    median = {w: statistics.median(x["wall_s"] for x in runs if x["code"] == w) for w in codes}
    cpu = {w: statistics.median(x["cpu_s"] for x in runs if x["code"] == w) for w in codes}
    formats = json.loads((args.data / "manifest.json").read_text())["formats"]
    record = run_record() | {
        "data": str(args.data),
        "files": sum(len(f["files"]) for f in formats.values()),
        "before_commit": args.before_commit or commit_of(args.before),
        "runs": runs,
        "median_s": median,
        "median_cpu_s": cpu,
        "after_over_before": round(median["after"] / median["before"], 3),
        "after_over_before_cpu": round(cpu["after"] / cpu["before"], 3),
    }
    write_json(args.out, record)
    print(
        f"median wall before {median['before']} s, after {median['after']} s: ratio {record['after_over_before']}; "
        f"CPU {cpu['before']} s, {cpu['after']} s: ratio {record['after_over_before_cpu']}"
    )


if __name__ == "__main__":
    main()
