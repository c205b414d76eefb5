"""The measured figures of docs/BENCHMARKS.md's cold-start section from "Before that: Python's bytecode" to the
candidates tried, each against its raw result under bench/results (doc_figures_cold.py has the section's start)."""

from __future__ import annotations

import re
import statistics

from doc_figures import BENCHMARKS, Figure, _spread
from doc_figures_cold import BYTE, CS, MEASURES, _alike, _med, _of, _runs

IMPORTS = "cold_start_h100/raw.tar.xz:candidates/imports.txt"
OVERLAP = "cold_start_h100/raw.tar.xz:candidates/start_overlap.json"
TOP = "cold_start_h100/raw.tar.xz:candidates/profile/top.txt"
ROUNDS = (CS.format("candidates/first_round/").replace(".json", ".partial.json"), CS.format("candidates/autotune/"))
GPU_REGIONS = "cold_start_h100/raw.tar.xz:candidates/regions/compile_regions.json"
CPU_REGIONS = tuple(f"cold_start_cpu/raw.tar.xz:{d}/compile_regions.json" for d in ("regions", "regions_dense_skip"))
CPU = "cold_start_cpu/raw.tar.xz:cold_start.json"
SAME, FIRST, BEFORE = (CS.format(d) for d in ("same_path/", "", "before/"))  # one path; each its own path; machine 5
STATIC = tuple(CS.format(f"static_launcher/{d}/") for d in ("on", "off"))


def _rs(study: dict | list) -> list[dict]:
    """A study's runs (a partial study is the list of its runs)."""
    return study if isinstance(study, list) else study["runs"]


def _up(x: float) -> float:
    """A time the study kept to 0.01 s, nudged so that rounding it to 0.1 s goes half up, as the doc's did."""
    return x + 1e-9


def _imports(text: str, part: int) -> list[tuple[float, float]]:
    """(torch, dynamo+inductor) seconds of each process in one numbered part of imports.txt."""
    block = text.split(f"# {part})")[1].split("\n# ")[0]
    return [(float(a), float(b)) for a, b in re.findall(r"torch ([\d.]+) s, dynamo\+inductor ([\d.]+) s", block)]


def _written_once(text: str) -> list[tuple[float, float]]:
    """The processes after the one that wrote the bytecode, and before the last one, run as the machine is."""
    return _imports(text, 2)[1:-1]


def _cold_gaps(*rounds: dict) -> tuple:
    """How much slower each round's first cold run was than its second, then each round's two cold runs' times."""
    colds = [[(r["variant"], MEASURES["since"](r)) for r in _rs(s) if r["kind"] == "cold"] for s in rounds]
    gaps = [a[1] - b[1] for a, b in colds]
    return min(gaps), max(gaps), *(t for c in colds for _, t in c)


def _one(study: dict, kind: str, measure: str) -> float:
    """A measure of the one cold or warm run of a study whose runs carry no variant."""
    return next(MEASURES[measure](r) for r in _rs(study) if r["name"].startswith(kind))


def _phase(study: dict, kind: str, phase: str) -> float:
    return next(r["compile"]["phases_s"].get(phase, 0.0) for r in _rs(study) if r["name"].startswith(kind))


def _cum(top: str, function: str) -> float:
    """A function's cumulative seconds in cProfile's listing."""
    return float(re.search(r"^\s*[\d/]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s+[\d.]+ " + re.escape(function), top, re.M)[1])


def _variant(*rounds: dict, variant: str, kind: str, measure: str) -> list[float]:
    return [x for s in rounds for x in _of(_rs(s), variant, kind, measure)]


def _region(study: dict, backend: str, regions: str) -> dict:
    return next(r for r in study["runs"] if r["backend"] == backend and r["regions"] == regions)


def _cpu(study: dict, kind: str, measure) -> float:
    return statistics.median(measure(r) for r in _rs(study) if r["name"].startswith(kind))


def _ph(name: str):
    return lambda r: r["compile"]["phases_s"].get(name, 0.0)


FIGURES = (
    Figure(
        (BENCHMARKS,),
        "the first step ended 18.0 s after launch on an H100 (median of 4 runs; 25.0 s before), and the first timed "
        "step started at 20.6 s (27.6 s before). The 7 s came from",
        BYTE,
        lambda *s: (
            _med(_runs(*s), "after", "warm", "since"),
            _med(_runs(*s), "before", "warm", "since"),
            _med(_runs(*s), "after", "warm", "timed"),
            _med(_runs(*s), "before", "warm", "timed"),
            _med(_runs(*s), "before", "warm", "since") - _med(_runs(*s), "after", "warm", "since"),
        ),
        "the first step ended {:.1f} s after launch on an H100 (median of 4 runs; {:.1f} s before), and the first "
        "timed step started at {:.1f} s ({:.1f} s before). The {:.0f} s came from",
    ),
    Figure(
        (BENCHMARKS,),
        "`import torch` and the compiler: 10 s, against 3 s from bytecode",
        IMPORTS,
        lambda t: tuple(statistics.median(a + b for a, b in p) for p in (_imports(t, 1), _written_once(t))),
        "`import torch` and the compiler: {:.0f} s, against {:.0f} s from bytecode",
    ),
    Figure(
        (BENCHMARKS,),
        "(median 116.7 s before that change, 120.4 s after",
        BYTE,
        lambda *s: tuple(_med(_runs(*s), v, "cold", "since") for v in ("before", "after")),
        "(median {:.1f} s before that change, {:.1f} s after",
    ),
    Figure(
        (BENCHMARKS,),
        "6,305 against 6,270 images/s, medians of 7 runs each, alternated (+0.6%, the order of the runs)",
        BYTE,
        lambda *s: (
            _med(_runs(*s), "after", None, "rate"),
            _med(_runs(*s), "before", None, "rate"),
            _med(_runs(*s), "after", None, "rate") / _med(_runs(*s), "before", None, "rate") - 1,
        ),
        "{:,.0f} against {:,.0f} images/s, medians of 7 runs each, alternated (+{:.1%}, the order of the runs)",
    ),
    Figure(
        (BENCHMARKS,),
        "the interpreter and torch (5.2 → 3.3 s), torch's compiler pulled in while the model and its optimizer are "
        "built (4.5 → 1.8 s), and Inductor's modules imported by the compile cache's loading (3.3 → 1.6 s)",
        BYTE,
        lambda *s: tuple(
            _med(_runs(*s), v, "warm", m) for m in ("imports", "model", "cache") for v in ("before", "after")
        ),
        "the interpreter and torch ({:.1f} → {:.1f} s), torch's compiler pulled in while the model and its optimizer "
        "are built ({:.1f} → {:.1f} s), and Inductor's modules imported by the compile cache's loading ({:.1f} → "
        "{:.1f} s)",
    ),
    Figure(
        (BENCHMARKS,),
        "with its compiled graphs found in the cache (6.1–6.9 s)",
        BYTE,
        lambda *s: tuple(_med(_runs(*s), v, "warm", "frame") for v in ("after", "before")),
        "with its compiled graphs found in the cache ({:.1f}–{:.1f} s)",
    ),
    Figure(
        (BENCHMARKS,),
        "the first run of each round was 7–15 s slower than the second, whichever variant it was (page cache kept: "
        "after 136.7, before 130.0 s; emptied: after 120.4, before 108.5 s; before 116.7, after 102.1 s)",
        BYTE,
        _cold_gaps,
        "the first run of each round was {:.0f}–{:.0f} s slower than the second, whichever variant it was (page cache "
        "kept: after {:.1f}, before {:.1f} s; emptied: after {:.1f}, before {:.1f} s; before {:.1f}, after {:.1f} s)",
    ),
    Figure(
        (BENCHMARKS,),
        "Rates: after 6,119–6,359, before 6,125–6,371 images/s",
        BYTE,
        lambda *s: tuple(f(_of(_runs(*s), v, None, "rate")) for v in ("after", "before") for f in (min, max)),
        "Rates: after {:,.0f}–{:,.0f}, before {:,.0f}–{:,.0f} images/s",
    ),
    Figure(
        (BENCHMARKS,),
        "`import torch` took 3.1–4.4 s and `torch._dynamo` with `torch._inductor.compile_fx` 6.5–7.8 s more as the "
        "machine is; with the bytecode written once, 1.2–1.4 and 1.8–2.3 s",
        IMPORTS,
        lambda t: tuple(
            f(x[k] for x in p) for p in (_imports(t, 1), _written_once(t)) for k in (0, 1) for f in (min, max)
        ),
        "`import torch` took {:.1f}–{:.1f} s and `torch._dynamo` with `torch._inductor.compile_fx` {:.1f}–{:.1f} s "
        "more as the machine is; with the bytecode written once, {:.1f}–{:.1f} and {:.1f}–{:.1f} s",
    ),
    *(
        Figure(
            (BENCHMARKS,),
            text,
            ROUNDS,
            lambda a, b, v=v: (
                *_variant(a, b, variant=v, kind="cold", measure="since"),
                *_variant(a, b, variant=v, kind="warm", measure="since"),
                *_variant(a, b, variant=v, kind="cold", measure="rate"),
                *_variant(a, b, variant=v, kind="warm", measure="rate"),
            ),
            fmt,
        )
        for v, text in (
            ("this", "| 100.4, 90.2 | 19.9, 19.4, 19.7, 21.4 | 6,389, 6,384; 6,363, 6,394, 6,373, 6,383 |"),
            ("light", "| 87.4, 88.4 | 20.1, 20.1, 20.5, 21.7 | 6,366, 6,211; 6,337, 6,341, 6,339, 6,357 |"),
        )
        for fmt in (
            "| {:.1f}, {:.1f} | {:.1f}, {:.1f}, {:.1f}, {:.1f} | {:,.0f}, {:,.0f}; {:,.0f}, {:,.0f}, {:,.0f}, "
            "{:,.0f} |",
        )
    ),
    Figure(  # the cost of fewer choices, in the round of 800 steps (the first round's 400 steps timed fewer)
        (BENCHMARKS,),
        "no: −0.7% (median of the warm runs), −2.7% in one cold run",
        ROUNDS[1],
        lambda s: (
            1 - _med(_rs(s), "light", "warm", "rate") / _med(_rs(s), "this", "warm", "rate"),
            1 - _med(_rs(s), "light", "cold", "rate") / _med(_rs(s), "this", "cold", "rate"),
        ),
        "no: −{:.1%} (median of the warm runs), −{:.1%} in one cold run",
    ),
    Figure(
        (BENCHMARKS,),
        "| 103.4 | fails | 6,344 |",
        ROUNDS[0],
        lambda s: (_med(_rs(s), "pre", "cold", "since"), _med(_rs(s), "pre", "cold", "rate")),
        "| {:.1f} | fails | {:,.0f} |",
    ),
    Figure(
        (BENCHMARKS,),
        "| 70.1 against 76.6 | – | 4,350 against 4,545 | no: −4.3% for −6.4 s once |",
        GPU_REGIONS,
        lambda s: (
            _up(_region(s, "inductor", "ResBlock+Attention")["first_step_s"]),
            _up(_region(s, "inductor", "none")["first_step_s"]),
            _region(s, "inductor", "ResBlock+Attention")["samples_per_s"],
            _region(s, "inductor", "none")["samples_per_s"],
            1
            - _region(s, "inductor", "ResBlock+Attention")["samples_per_s"]
            / _region(s, "inductor", "none")["samples_per_s"],
            _region(s, "inductor", "none")["first_step_s"]
            - _region(s, "inductor", "ResBlock+Attention")["first_step_s"],
        ),
        "| {:.1f} against {:.1f} | – | {:,.0f} against {:,.0f} | no: −{:.1%} for −{:.1f} s once |",
    ),
    *(
        Figure(
            (BENCHMARKS,),
            text,
            GPU_REGIONS,
            lambda s: (
                _region(s, "inductor", "none")["first_step_s"]
                - _region(s, "inductor", "ResBlock+Attention")["first_step_s"],
                1
                - _region(s, "inductor", "ResBlock+Attention")["samples_per_s"]
                / _region(s, "inductor", "none")["samples_per_s"],
            ),
            fmt,
        )
        for text, fmt in (
            (
                "the first step was 6.4 s shorter and the step 4.3% slower",
                "the first step was {:.1f} s shorter and the step {:.1%} slower",
            ),
            (
                "6.4 s less for the first step, 4.3% off the step rate",
                "{:.1f} s less for the first step, {:.1%} off the step rate",
            ),
        )
    ),
    Figure(
        (BENCHMARKS,),
        "no: CUDA's start took 0.3–0.4 s",
        OVERLAP,
        lambda runs: _spread([r.get("cuda ready", r.get("cuda ready (thread)")) - r["torch"] for r in runs])[1:],
        "no: CUDA's start took {:.1f}–{:.1f} s",
    ),
    Figure(
        (BENCHMARKS,),
        "CUDA was ready 0.3–0.4 s after torch's import either way, and the model reached the GPU 9.5–9.9 s after "
        "launch either way",
        OVERLAP,
        lambda runs: (
            *_spread([r.get("cuda ready", r.get("cuda ready (thread)")) - r["torch"] for r in runs])[1:],
            *_spread([r["model on device"] for r in runs])[1:],
        ),
        "CUDA was ready {:.1f}–{:.1f} s after torch's import either way, and the model reached the GPU {:.1f}–{:.1f} s "
        "after launch either way",
    ),
    Figure(
        (BENCHMARKS,),
        "(11.1–11.5 s, `CachingAutotuner.benchmark_all_configs`); with pointwise autotuning off, 71 kernels (6.8–6.9 "
        "s). The cold start gained 13 s in one round and 2 s in the other; the step lost 0.7%",
        ROUNDS,
        lambda a, b: (
            *sorted(_phase(s, "this-cold", "CachingAutotuner.benchmark_all_configs") for s in (a, b)),
            _alike(*(r["autotune_results"] for s in (a, b) for r in _rs(s) if r["variant"] == "light")),
            *sorted(_phase(s, "light-cold", "CachingAutotuner.benchmark_all_configs") for s in (a, b)),
            *(_med(_rs(s), "this", "cold", "since") - _med(_rs(s), "light", "cold", "since") for s in (a, b)),
            1 - _med(_rs(b), "light", "warm", "rate") / _med(_rs(b), "this", "warm", "rate"),
        ),
        "({:.1f}–{:.1f} s, `CachingAutotuner.benchmark_all_configs`); with pointwise autotuning off, {:.0f} kernels "
        "({:.1f}–{:.1f} s). The cold start gained {:.0f} s in one round and {:.0f} s in the other; the step lost "
        "{:.1%}",
    ),
)
UNCHECKED: dict[str, dict[str, str]] = {}
