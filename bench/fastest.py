"""`train --loader fastest`: the loader configuration to train with, chosen from bench results.

Among the results for the same data (the manifest digest, so a copy or a move of the directory still matches), the
same device (type, and GPU name on CUDA), model, batch size, precision and compile setting (a compiled model eats
faster, so it may need a different loader), from the latest grid that has any: the configuration with
the highest training rate whose starvation is under 1%; rates within 2% (run-to-run spread) count as a tie, won by
the configuration that keeps fewer CPU cores busy. With no such results, a short bench runs first, and the reason
says so.

Where results are looked for: `results_dir` if given, else $GPUFEED_BENCH_RESULTS if set, else DATA_DIR/.gpufeed-bench/
(where `bench loaders` writes by default); a short bench writes there too, or, if DATA_DIR is read-only, to
~/.cache/gpufeed/bench/<digest>/."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

MAX_STARVATION = 0.01  # the bar: a GPU waiting 1% of the time or more is worth a different loader
TIE = 0.02  # rates closer than this are not distinguishable from run to run: prefer the cheaper configuration
SHORT = dict(steps=30, warmup=10)  # a short bench: ~1 s of steps per configuration after warm-up on a GPU


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
    return Path(data_dir) / ".gpufeed-bench"


def _writable_dir(data_dir: Path, digest: str) -> Path:
    preferred = default_results_dir(data_dir)
    try:
        preferred.mkdir(parents=True, exist_ok=True)
        if os.access(preferred, os.W_OK):
            return preferred
    except OSError:
        pass
    return Path.home() / ".cache" / "gpufeed" / "bench" / digest[:16]


def matching(
    results_dir: Path, *, digest: str, device: str, model: str, batch_size: int, precision: str, compile: bool
) -> list[dict]:
    """Grouped configurations (bench.results.group) matching, from the latest grid that has any."""
    from .env import hardware
    from .results import flat, group, load_records

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
            and (row["cpus"] or 0) <= cores
            and (not cuda or hw.get("gpu") == gpu)
        ):
            keep.append(row)
    groups = group(keep)
    latest = max((g["grid_id"] for g in groups), default=None)
    return [g for g in groups if g["grid_id"] == latest]


def pick(groups: list[dict]) -> tuple[dict, str]:
    """The winner and why, in words."""
    fed = [g for g in groups if g["starvation"] < MAX_STARVATION]
    pool = fed or groups
    top = max(g["samples_per_s"] for g in pool)
    close = [g for g in pool if g["samples_per_s"] >= (1 - TIE) * top]
    cores = lambda g: g["cpu_cores"] if g["cpu_cores"] is not None else float(g["workers"] or 0)  # noqa: E731
    win = min(close, key=lambda g: (cores(g), -g["samples_per_s"]))
    vs = f" ({win['vs_data_free']:.1%} of the data-free rate)" if win.get("vs_data_free") else ""
    why = (
        f"{win['samples_per_s']:,.0f} samples/s{vs} at {win['starvation']:.2%} starvation, {cores(win):.1f} CPU "
        f"cores busy; "
    )
    if fed:
        why += (
            f"the highest rate under {MAX_STARVATION:.0%} starvation among {len(groups)} configurations "
            f"({len(close)} within {TIE:.0%} of it, the one using the fewest CPU cores won)"
        )
    else:
        why += f"none of {len(groups)} configurations stayed under {MAX_STARVATION:.0%} starvation: took the fastest"
    return win, why


def choose(
    data_dir: Path,
    *,
    device: str,
    model: str,
    batch_size: int,
    precision: str = "bf16",
    compile: bool = False,
    results_dir: Path | None = None,
) -> Choice:
    """The loader configuration for `train --loader fastest`; runs a short bench first when there are no results."""
    from dataprep.manifest import load_manifest

    manifest = load_manifest(data_dir)
    digest = manifest["digest"]["total"]
    dirs = [Path(results_dir)] if results_dir else [default_results_dir(data_dir), _writable_dir(data_dir, digest)]
    key = dict(digest=digest, device=device, model=model, batch_size=batch_size, precision=precision, compile=compile)
    for d in dict.fromkeys(dirs):
        groups = matching(d, **key) if d.is_dir() else []
        if groups:
            win, why = pick(groups)
            return _choice(win, batch_size, f"from bench results in {d} (grid {win['grid_id']}): {why}")
    out = Path(results_dir) if results_dir else _writable_dir(data_dir, digest)
    t0 = time.perf_counter()
    n = short_bench(Path(data_dir), manifest, key, out)
    groups = matching(out, **key)
    if not groups:
        from loaders import LoaderError

        raise LoaderError(f"the short bench in {out} finished no configuration; see {out / 'grid.log'} for why, or "
                          f"pass --loader with a backend name")  # fmt: skip
    win, why = pick(groups)
    prefix = (
        f"no bench results for this data, device, model, batch size, precision and compile setting: ran a short "
        f"bench first ({n} runs, {time.perf_counter() - t0:.0f} s, results in {out}); "
    )
    return _choice(win, batch_size, prefix + why)


def _choice(win: dict, batch_size: int, reason: str) -> Choice:
    return Choice(win["backend"], int(win["workers"] or 0), bool(win["pin_memory"]), batch_size, reason)


def short_bench(data_dir: Path, manifest: dict, key: dict, out: Path) -> int:
    """Every backend whose format is present, a few worker counts, pin_memory on, in the setting `key` (as for
    `matching`); returns the number of runs."""
    from loaders import NEEDS_FORMAT

    from .grid import GridConfig, run_grid

    formats = manifest["formats"]
    backends = tuple(b for b, f in NEEDS_FORMAT.items() if f in formats or (b == "gpu" and "files" in formats))
    cores = len(os.sched_getaffinity(0))
    workers = (4, 8) if key["device"].startswith("cuda") else (0, 2)
    cfg = GridConfig(
        data=Path(data_dir),
        out=out,
        backends=backends,
        workers=tuple(sorted({min(w, cores) for w in workers})),
        pin_memory=(True,),
        batch_sizes=(key["batch_size"],),
        model=key["model"],
        device=key["device"],
        precision=key["precision"],
        compile=key["compile"],
        repeats=1,
        command=f"train --loader fastest (short bench of {data_dir})",
        **SHORT,
    )
    outcome = run_grid(cfg, echo=lambda line: print(f"fastest: {line}", flush=True))
    return len(outcome.done) + len(outcome.failed)
