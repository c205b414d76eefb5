"""The tables of docs/BENCHMARKS.md's cold-start section that split a start into Dynamo's phases, cache counters and
autotuning (one local cache path, the earlier runs, Triton's static launcher) and the CPU's regions, against
bench/results."""

from __future__ import annotations

from doc_figures import BENCHMARKS, Figure
from doc_figures_cold import MEASURES
from doc_figures_coldb import BEFORE, CPU_REGIONS, FIRST, SAME, STATIC, _region, _rs

PHASES = (
    "entire_frame_compile",
    "entire_backward_compile",
    "backend_compile",
    "inductor_compile",
    "CachingAutotuner.benchmark_all_configs",
    "async_compile.wait",
)
PHASE_ROW = " | ".join(["{:.1f}"] * 10) + " | {} | {:.0f} / {:.0f} | {:,.0f} |"  # a phases table's row after its name
PHASE_ROWS = (  # (the study, the run, the row's name, the row as written after its name)
    (
        SAME,
        "cold",
        "cold: empty caches",
        "131.3 | 134.2 | 15.1 | 116.2 | 50.2 | 32.5 | 46.2 | 53.8 | 13.4 | 4.9 | miss | 2 / 0 | 6,342 |",
    ),
    (
        SAME,
        "warm",
        "warm: the compile cache of the cold run, the same local cache path",
        "25.0 | 27.6 | 14.3 | 10.7 | 6.6 | 0.0 | 2.8 | 0.0 | 0.0 | 0.0 | hit | 0 / 2 | 6,316 |",
    ),
    (
        FIRST,
        "cold",
        "cold: empty caches",
        "144.2 | 147.4 | 15.0 | 129.2 | 51.1 | 44.0 | 46.9 | 67.3 | 14.1 | 5.2 | miss | 2 / 0 | 6,260 |",
    ),
    (
        FIRST,
        "warm",
        "warm: the compile cache of the cold run",
        "42.8 | 45.6 | 14.7 | 28.0 | 7.5 | 0.0 | 3.5 | 0.0 | 15.2 | 0.0 | hit | 0 / 2 | 6,253 |",
    ),
    (
        BEFORE,
        "warm",
        "*before:* warm",
        "79.8 | 82.5 | 24.8 | 55.0 | 31.5 | 2.1 | 26.3 | 4.2 | 16.2 | 0.8 | bypassed | 0 / 2 | 6,015 |",
    ),
)
STATIC_ROW = " | ".join(["{:.1f}"] * 8) + " | {} | {:,.0f} |"
STATIC_ROWS = (  # (on or off, the run, the row's name)
    (0, "cold", "cold, static launcher (torch's default, as `train` runs)"),
    (0, "warm", "warm, static launcher"),
    (1, "cold", "cold, `TORCHINDUCTOR_USE_STATIC_CUDA_LAUNCHER=0`"),
    (1, "warm", "warm, `TORCHINDUCTOR_USE_STATIC_CUDA_LAUNCHER=0`"),
)
STATIC_TEXT = (
    "140.3 | 4.6 | 6.8 | 4.7 | 122.6 | 52.0 | 45.5 | 13.0 | – | 6,361",
    "40.0 | 4.3 | 5.2 | 3.6 | 26.0 | 7.7 | 3.5 | 13.7 | – | 6,340",
    "142.9 | 4.8 | 5.9 | 3.1 | 128.2 | 61.4 | 55.6 | 15.1 | – | 6,334",
    "39.2 | 5.2 | 5.2 | 3.7 | 24.3 | 19.7 | 16.2 | 0.2 | 7.2 + 6.0 | 6,385",
)


def _run(study: dict, kind: str) -> dict:
    return next(r for r in _rs(study) if r["name"].startswith(kind))


def _phases_row(study: dict, kind: str) -> tuple:
    """Launch to the first step and to the first timed step, set-up, first step, Dynamo's phases, then AOTAutograd's
    cache, the graphs built and found, and the rate."""
    r = _run(study, kind)
    caches = r["compile"]["caches"]
    aot = "hit" if caches.get("autograd_cache_hit") else "miss" if caches.get("autograd_cache_miss") else "bypassed"
    return (
        *(MEASURES[m](r) for m in ("since", "timed", "set-up", "first")),
        *(r["compile"]["phases_s"].get(p, 0.0) for p in PHASES),
        aot,
        caches.get("fxgraph_cache_miss", 0),
        caches.get("fxgraph_cache_hit", 0),
        r["samples_per_s"],
    )


def _static_row(study: dict, kind: str) -> tuple:
    r = _run(study, kind)
    phases = r["compile"]["phases_s"]
    # kernels loaded from their source: only where Triton's own launcher precompiled them, with the wait after
    loaded = "async_compile.precompile" in phases
    return (
        *(MEASURES[m](r) for m in ("since", "imports", "model", "cache", "first", "frame", "backend")),
        phases["CachingAutotuner.benchmark_all_configs"],
        f"{phases['async_compile.precompile']:.1f} + {phases['async_compile.wait']:.1f}" if loaded else "–",
        r["samples_per_s"],
    )


def _cpu_regions(plain: dict, dense: dict) -> tuple:
    """The first step of each region set under aot_eager, its AOTAutograd part, and under Inductor (as ran)."""
    sets = ("none", "ResBlock+Attention", "ResBlock", "Attention")

    def step(study: dict, backend: str, regions: str) -> str:
        try:
            r = _region(study, backend, regions)
        except StopIteration:
            return "–"
        return "fails" if "error" in r else f"{r['first_step_s']:.1f}"

    return (
        *(_region(plain, "aot_eager", s)["first_step_s"] for s in sets),
        *(_region(plain, "aot_eager", s)["phases"]["create_aot_dispatcher_function"] for s in sets),
        *(step(plain, "inductor", s) for s in sets),
        *(step(dense, "inductor", s) for s in sets),
    )


FIGURES = (
    *(
        Figure(
            (BENCHMARKS,),
            f"| {name} | {text}",
            study,
            lambda s, kind=kind: _phases_row(s, kind),
            f"| {name} | " + PHASE_ROW,
        )
        for study, kind, name, text in PHASE_ROWS
    ),
    Figure(  # the whole row: doc_figures_fixes1.py
        (BENCHMARKS,),
        "| *before, another H100:* cold | 200.9 | 204.1 |",
        BEFORE,
        lambda s: _phases_row(s, "cold")[:2],
        "| *before, another H100:* cold | {:.1f} | {:.1f} |",
    ),
    *(
        Figure(
            (BENCHMARKS,),
            f"| {name} | {text} |",
            STATIC[k],
            lambda s, kind=kind: _static_row(s, kind),
            f"| {name} | " + STATIC_ROW,
        )
        for (k, kind, name), text in zip(STATIC_ROWS, STATIC_TEXT)
    ),
    Figure(
        (BENCHMARKS,),
        "| Dynamo and AOTAutograd only (`aot_eager`) | 8.4 | 10.8 | 10.8 | 9.8 | | of it, AOTAutograd "
        "(`create_aot_dispatcher_function`) | 4.0 | 6.4 | 6.3 | 5.1 | | Inductor | 121.7 | fails | fails | fails | | "
        "Inductor, the skip's gradient dense (`--dense-skip`) | 125.5 | fails | – | 128.7 |",
        CPU_REGIONS,
        _cpu_regions,
        "| Dynamo and AOTAutograd only (`aot_eager`) | {:.1f} | {:.1f} | {:.1f} | {:.1f} | | of it, AOTAutograd "
        "(`create_aot_dispatcher_function`) | {:.1f} | {:.1f} | {:.1f} | {:.1f} | | Inductor | {} | {} | {} | {} | | "
        "Inductor, the skip's gradient dense (`--dense-skip`) | {} | {} | {} | {} |",
    ),
)
UNCHECKED: dict[str, dict[str, str]] = {}
