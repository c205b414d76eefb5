"""`train --loader fastest`: the loader configuration to train with, chosen from bench results, or measured first.

What counts: results for the same data (the manifest digest, so a copy or a move of the directory still matches),
the same device (type, and GPU name on CUDA), model, batch size, precision and compile setting (a compiled model eats
faster, so it may need a different loader), from the latest grid that has any. Among them, the configurations fed at
the bar (under 1% starvation and, where the data-free rate of the same grid is known, at 99% of it or more), and of
those the one with the highest rate; configurations tie with it when their rates cannot be told apart, and a tie goes
to the one that keeps fewer CPU cores busy.

When rates cannot be told apart: with two repeats or more, a configuration's range is its lowest to highest rate, and
ranges that overlap tie. A single run has no range of its own: it gets the spread measured for that model on that
device, the range of the data-free runs (highest minus lowest, over their median) of the same grid, else of that
directory's data-free runs of the same setting, else DEFAULT_SPREAD (1%: a little over what repeated data-free runs
spread in docs/BENCHMARKS.md's findings). A single run's range is its rate plus or minus half that spread, so two single
runs tie when they differ by less than the spread.

With no such results, the probe (`probe_feed.py`) measures in this process first (about a minute; see its docstring for
what it measures and trusts): the data-free rate twice, every candidate's ceiling, and the cheapest candidates that can
keep up confirmed in the real training loop. Its windows are written as one grid of bench results, picked from by the
same rule, so a second call is instant.

Where results are looked for: `results_dir` if given, else $GPUFEED_BENCH_RESULTS if set, else DATA_DIR/.gpufeed-bench/
(where `bench loaders` writes by default); the probe writes there too, or, if DATA_DIR is read-only, to
~/.cache/gpufeed/bench/<digest>/."""

from __future__ import annotations

import dataclasses
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from common.paths import inside
from common.text import printable
from dataprep.benchdir import BENCH_DIR

from .noise import CANNOT_TELL, busy_share, cannot_tell, default_config
from .probe_plan import MAX_STARVATION, MIN_VS_DATA_FREE  # the bar: < 1% starvation, >= 99% of the data-free rate

DEFAULT_SPREAD = 0.01  # when no data-free run was repeated: a little over the findings' (docs/BENCHMARKS.md, Method)


@dataclass
class Choice:
    backend: str
    workers: int
    pin_memory: bool
    batch_size: int
    reason: str


def default_results_dir(data_dir: Path) -> Path:
    if os.environ.get("GPUFEED_BENCH_RESULTS"):
        return Path(os.environ["GPUFEED_BENCH_RESULTS"])
    return inside(data_dir, BENCH_DIR, source=data_dir)  # a link out of the data directory is refused


def _writable_dir(data_dir: Path, digest: str) -> Path:
    preferred = default_results_dir(data_dir)
    try:
        preferred.mkdir(parents=True, exist_ok=True)
        if os.access(preferred, os.W_OK):
            return preferred
    except OSError:
        pass
    return Path.home() / ".cache" / "gpufeed" / "bench" / digest[:16]


def scenario_rows(
    results_dir: Path,
    *,
    digest: str,
    device: str,
    model: str,
    batch_size: int,
    precision: str,
    compile: bool,
    nproc: int = 1,
) -> list[dict]:
    """Flat rows (bench.records.rows.flat) of every grid in the directory, loader and data-free runs, for this
    setting on this machine (its GPU name, at most its cores over all ranks), measured with `nproc` ranks."""
    from common.run_record import hardware

    from ..records.results import load_records
    from ..records.rows import flat

    here = hardware(device)  # as each result recorded where it ran
    cuda, gpu, cores = device.startswith("cuda"), here.get("gpu"), here["cpus_allowed"]
    keep = []
    for rec in load_records(results_dir):
        hw = rec.get("run", {}).get("hardware", {})
        row = flat(rec)
        if (
            row.get("digest") == digest
            and row["device"] == device.split(":")[0]
            and row["model"] == model
            and row["batch_size"] == batch_size
            and row["precision"] == precision
            and bool(row["compile"]) == compile
            and row["nproc"] == nproc
            and (row["cpus"] or 0) * nproc <= cores
            and (not cuda or hw.get("gpu") == gpu)
        ):
            keep.append(row)
    return keep


def latest_groups(rows: list[dict]) -> list[dict]:
    """Grouped configurations (bench.records.results.group) of the latest grid that has any."""
    from ..records.results import group

    groups = group(rows)
    latest = max((g["grid_id"] for g in groups), default=None)
    return [g for g in groups if g["grid_id"] == latest]


def matching(
    results_dir: Path, *, digest: str, device: str, model: str, batch_size: int, precision: str, compile: bool
) -> list[dict]:
    """Grouped configurations matching, from the latest grid that has any."""
    key = dict(digest=digest, device=device, model=model, batch_size=batch_size, precision=precision, compile=compile)
    return latest_groups(scenario_rows(results_dir, **key))


def measured_spread(rows: list[dict], grid_id: str | None = None) -> tuple[float, str]:
    """The relative range of the data-free runs among `rows` (one setting), of grid `grid_id` if it has two or
    more, else of every grid (across GPUs, the widest of one GPU's repeats); DEFAULT_SPREAD when fewer than two were
    run. Returns (spread, where it came from)."""
    free = [r for r in rows if r["kind"] == "data_free" and not r["error"] and r.get("samples_per_s")]
    for runs, where in (([r for r in free if r.get("grid_id") == grid_id], f"grid {grid_id}"), (free, "all grids")):
        # a grid resumed on another GPU: two GPUs differ by more than either varies, and each loader run is set
        # against its own GPU's rate, so the spread is the widest of one GPU's repeats where a GPU has them
        by_gpu: dict = {}
        for r in runs:
            by_gpu.setdefault(r.get("gpu_uuid"), []).append(r["samples_per_s"])
        apart = [v for v in by_gpu.values() if len(v) >= 2] if len(by_gpu) > 1 else []
        groups = apart or ([[r["samples_per_s"] for r in runs]] if len(runs) >= 2 else [])
        if groups:
            spread, n = max(((max(v) - min(v)) / statistics.median(v), len(v)) for v in groups)
            gpus = f", the widest of {len(by_gpu)} GPUs'" if apart else ""
            return spread, f"the range of {n} data-free runs ({where}{gpus})"
    return DEFAULT_SPREAD, f"the default {DEFAULT_SPREAD:.0%}: no data-free run was repeated"


def _range(g: dict, spread: float) -> tuple[float, float]:
    """The rates a configuration cannot be told apart from: its repeats' range, or one run's rate +- spread/2."""
    if g.get("repeats", 1) >= 2:
        return g["samples_per_s_min"], g["samples_per_s_max"]
    return g["samples_per_s"] * (1 - spread / 2), g["samples_per_s"] * (1 + spread / 2)


def ties(a: dict, b: dict, spread: float) -> bool:
    (lo_a, hi_a), (lo_b, hi_b) = _range(a, spread), _range(b, spread)
    return lo_a <= hi_b and lo_b <= hi_a


def fed(g: dict) -> bool:
    """At the bar: under 1% starvation and, where the data-free rate is known, at 99% of it or more."""
    return g["starvation"] < MAX_STARVATION and (g.get("vs_data_free") is None or g["vs_data_free"] >= MIN_VS_DATA_FREE)


def pick(groups: list[dict], spread: float = DEFAULT_SPREAD, spread_from: str = "") -> tuple[dict, str]:
    """The winner and why, in words; `spread` (and where it came from) decides ties between single runs. A loader
    run faster than the data-free rate widens the spread to that gap: no loader can, so the rates vary that much."""
    from ..records.verdicts import impossible_gap
    from ..records.verdicts import label as _label

    gap = impossible_gap(groups)
    widened = gap > spread
    if widened:
        above = max(groups, key=lambda g: g.get("vs_data_free") or 0)
        spread = gap
        spread_from = (
            f"at least that much: {_label(above)} ran at {1 + gap:.0%} of the data-free rate, which no loader can"
        )
    at_bar = [g for g in groups if fed(g)]
    pool = at_bar or groups
    top = max(pool, key=lambda g: g["samples_per_s"])
    close = [g for g in pool if ties(g, top, spread)]
    cores = lambda g: g["cpu_cores"] if g["cpu_cores"] is not None else float(g["workers"] or 0)  # noqa: E731
    win = min(close, key=lambda g: (cores(g), -g["samples_per_s"]))
    why = f"{win['samples_per_s']:,.0f} samples/s{_vs(win)} at {win['starvation']:.2%} starvation, "
    why += f"{cores(win):.1f} CPU cores busy; "
    bar = f"under {MAX_STARVATION:.0%} starvation at {MIN_VS_DATA_FREE:.0%} of the data-free rate or more"
    if at_bar:
        why += f"the highest rate {bar} among {len(groups)} configurations"
    else:
        why += f"none of {len(groups)} configurations was {bar}: took the fastest"
    if len(close) > 1:
        others = "; ".join(_label(g) for g in close if g is not win)
        where = f", {spread_from}" if spread_from else ""
        why += f"; a tie: {len(close) - 1} more tie with it ({others}), their rates not told apart: repeats that "
        why += f"overlap, or single runs less apart than the {spread:.1%} spread{where}; the one using the fewest CPU "
        why += "cores won"
    elif widened:
        why += f"; the rates here vary by {spread:.1%} or more ({spread_from}), and the others are further apart"
    return win, why


def _vs(g: dict) -> str:
    v = g.get("vs_data_free")
    if not v:
        return ""
    return f" ({v:.1%} of the data-free rate)" if v <= 1 else f" ({v:.0%} of the data-free rate: above it, so noise)"


def choose(
    data_dir: Path,
    *,
    device: str,
    model: str,
    batch_size: int,
    precision: str = "bf16",
    compile: bool = False,
    results_dir: Path | None = None,
    nproc: int = 1,
) -> Choice:
    """The loader configuration for `train --loader fastest`; measures in-process first when there are no results.
    Training on `nproc` ranks takes results measured with that many ranks (`bench loaders --nproc`: the host's cores
    shared as training will share them), else those of one process, as when no multi-rank grid was run. Called by
    every rank of a process group (`bench fastest` under training's torchrun), the ranks measure together when there
    are none (together.py), and every rank returns rank 0's choice."""
    from dataprep.manifest import load_manifest
    from dataprep.remote import is_remote, load_remote_manifest
    from loaders import LoaderError
    from loaders.errors import too_small

    from .probe_run import run_probe
    from .together import same

    if is_remote(data_dir):  # nothing to compare: no other loader reads object storage
        load_remote_manifest(data_dir)  # a missing or damaged dataset is named now, not by the loader later
        _, workers, pin = default_config(["stream"], device)
        return same(Choice("stream", workers, pin, batch_size, "the only loader that reads s3:// data"))
    manifest = load_manifest(data_dir)
    problem = too_small(manifest["count"], batch_size, nproc)
    if problem:  # the probe's first batch would never come
        raise LoaderError(f"{data_dir}: {problem}")
    digest = manifest["digest"]["total"]
    dirs = [Path(results_dir)] if results_dir else [default_results_dir(data_dir), _writable_dir(data_dir, digest)]
    key = dict(digest=digest, device=device, model=model, batch_size=batch_size, precision=precision, compile=compile)
    fallback = Choice(*default_config(manifest["formats"], device), batch_size, "")
    found = same(_from_results(dirs, key, nproc, fallback))  # under several ranks, rank 0's results decide
    if found is not None:
        return found
    out = Path(results_dir) if results_dir else _writable_dir(data_dir, digest)
    t0 = time.perf_counter()
    echo = lambda line: print(printable(f"fastest: {line}"), file=sys.stderr, flush=True)  # noqa: E731
    summary = run_probe(Path(data_dir), manifest, key, out, echo=echo)
    if summary is None:  # a rank that followed rank 0's probe: rank 0 picks, or says why it could not
        got = same(None)
        if isinstance(got, Exception):
            raise got
        return got
    rows = scenario_rows(out, **key, nproc=summary["nproc"])
    if not latest_groups(rows):
        error = LoaderError(
            f"`fastest` could run no loader on {data_dir}; see {out}/fastest-probe-"
            f"{summary['grid_id']}.json for why, or pass --loader with a backend name"
        )
        same(error)
        raise error
    measured = sum("samples_per_s" in c for c in summary["ceilings"])
    with_ranks = f" with {summary['nproc']} ranks" if summary["nproc"] > 1 else ""
    prefix = (
        f"no bench results for this data, device, model, batch size, precision and compile setting: measured in "
        f"this process first{with_ranks} ({time.perf_counter() - t0:.0f} s: the data-free rate twice, {measured} "
        f"loader ceilings, {summary['confirmed']} confirmed in the training loop; results in {out}); "
    )
    return same(_pick(rows, fallback, lambda _grid: prefix))


def _from_results(dirs: list[Path], key: dict, nproc: int, fallback: Choice) -> Choice | None:
    """The choice from the results of `nproc` ranks, else of one process, in the first directory that has any."""
    for d, n in [(d, n) for n in dict.fromkeys((nproc, 1)) for d in dict.fromkeys(dirs)]:
        rows = scenario_rows(d, **key, nproc=n) if d.is_dir() else []
        if latest_groups(rows):
            ranks = f", measured with {n} ranks" if n > 1 else ", measured in one process" if nproc > 1 else ""
            return _pick(rows, fallback, lambda grid, d=d, r=ranks: f"from bench results in {d} (grid {grid}{r}): ")
    return None


def _pick(rows: list[dict], fallback: Choice, source: Callable[[str], str]) -> Choice:
    """The winner of the latest grid; where that grid cannot rank its configurations (noise.cannot_tell), the
    winner of the latest earlier grid that could, else `fallback`. `source(grid_id)` starts the reason."""
    groups = latest_groups(rows)
    latest = groups[0]["grid_id"]
    spread, where = measured_spread(rows, latest)
    why_not = cannot_tell(groups, spread, busy_share([r for r in rows if r.get("grid_id") == latest]))
    if why_not is None:
        win, why = pick(groups, spread, where)
        return _choice(win, fallback.batch_size, source(latest) + why)
    said = f"{source(latest)}{CANNOT_TELL} ({why_not}); "
    for grid in sorted({r["grid_id"] for r in rows if (r.get("grid_id") or "") < latest}, reverse=True):
        older = latest_groups([r for r in rows if r.get("grid_id") == grid])
        spread, where = measured_spread(rows, grid)
        if older and cannot_tell(older, spread, busy_share([r for r in rows if r.get("grid_id") == grid])) is None:
            win, _ = pick(older, spread, where)
            return _choice(win, fallback.batch_size, f"{said}kept the previous choice (grid {grid})")
    return Choice(**{**dataclasses.asdict(fallback), "reason": f"{said}took the default"})


def _choice(win: dict, batch_size: int, reason: str) -> Choice:
    return Choice(win["backend"], int(win["workers"] or 0), bool(win["pin_memory"]), batch_size, reason)
