"""The measured figures of docs/BENCHMARKS.md's cold-start section from the profile of a cold compile to the CPU's
cold start (one local cache path, the earlier runs, Triton's static launcher, regions), against bench/results."""

from __future__ import annotations

import statistics

from doc_figures import BENCHMARKS, Figure, _logged, _spread
from doc_figures_cold import MEASURES, _alike, _mark, _runs
from doc_figures_coldb import (
    BEFORE,
    CPU,
    CPU_REGIONS,
    CS,
    FIRST,
    SAME,
    STATIC,
    TOP,
    _cpu,
    _cum,
    _one,
    _ph,
    _phase,
    _region,
    _rs,
)

FIGURES = (
    Figure(
        (BENCHMARKS,),
        "the first step took 165.5 s profiled against 76.6 s): Inductor's scheduler 28 s (its fusion decisions 24 s), "
        "the kernels' code generation 16 s, Triton's benchmarks 18 s, lowering 9 s, AOTAutograd's partitioner 6 s, "
        "Python's own imports 23 s",
        TOP,
        lambda t: (
            *_logged(t, r"first step took ([\d.]+) s under the profiler \(([\d.]+) s without it\)"),
            *(
                _cum(t, f)
                for f in (
                    "graph.py:2422(_update_scheduler)",
                    "scheduler.py:3697(fuse_nodes)",
                    "cuda_combined_scheduling.py:151(codegen_node)",
                    "triton_heuristics.py:927(bench)",
                    "lowering.py:675(inner_fn)",
                    "partitioners.py:3449(min_cut_rematerialization_partition)",
                    "__init__.py:1(<module>)",
                )
            ),
        ),
        "the first step took {:.1f} s profiled against {:.1f} s): Inductor's scheduler {:.0f} s (its fusion decisions "
        "{:.0f} s), the kernels' code generation {:.0f} s, Triton's benchmarks {:.0f} s, lowering {:.0f} s, "
        "AOTAutograd's partitioner {:.0f} s, Python's own imports {:.0f} s",
    ),
    Figure(
        (BENCHMARKS,),
        "`train` at commit ed8d650: 131.3 s cold, 25.0 s warm",
        SAME,
        lambda s: (_one(s, "cold", "since"), _one(s, "warm", "since")),
        "`train` at commit ed8d650: {:.1f} s cold, {:.1f} s warm",
    ),
    Figure(
        (BENCHMARKS,),
        "(all 176 at 12.9 s after launch)",
        CS.format("same_path/").replace("cold_start.json", "warm-0-autotune.json"),
        lambda a: (len(a), _alike(*(x["written_s"] for x in a.values()))),
        "(all {} at {:.1f} s after launch)",
    ),
    Figure(  # the warm run's 2.8 s that follows is 2.86 in the raw result
        (BENCHMARKS,),
        "the CUDA-graph capture: 3.2 s cold",
        FIRST,
        lambda s: (_one(s, "cold", "timed") - _one(s, "cold", "since"),),
        "the CUDA-graph capture: {:.1f} s cold",
    ),
    Figure(
        (BENCHMARKS,),
        "the backend went from 26.3 to 3.5 s, the forward's frame from 31.5 to 7.5 s, the backward's compile from "
        "2.1 s to none",
        (BEFORE, FIRST),
        lambda b, a: (
            _one(b, "warm", "backend"),
            _one(a, "warm", "backend"),
            _one(b, "warm", "frame"),
            _one(a, "warm", "frame"),
            _phase(b, "warm", "entire_backward_compile"),
        ),
        "the backend went from {:.1f} to {:.1f} s, the forward's frame from {:.1f} to {:.1f} s, the backward's compile "
        "from {:.1f} s to none",
    ),
    Figure(
        (BENCHMARKS,),
        "from the shapes alone, in 0.5 s",
        FIRST,
        lambda s: (
            next(_mark(r, "FLOPs counted") - _mark(r, "first batch in hand") for r in _rs(s) if r["name"] == "cold-0"),
        ),
        "from the shapes alone, in {:.1f} s",
    ),
    Figure(  # the cold set-up before it: doc_figures_fixes1.py
        (BENCHMARKS,),
        "24.8 s warm to 15.0 and 14.7 s",
        (BEFORE, FIRST),
        lambda b, a: (_one(b, "warm", "set-up"), _one(a, "cold", "set-up"), _one(a, "warm", "set-up")),
        "{:.1f} s warm to {:.1f} and {:.1f} s",
    ),
    Figure(
        (BENCHMARKS,),
        "14.0 s until the model exists with the compile cache loaded (0.7 s of it loading), 0.3 s opening the resident "
        "loader (50,000 images to the GPU), 0.1 s to the first batch, 0.5 s counting FLOPs",
        FIRST,
        lambda s: (
            lambda c, w: (
                _mark(c, "model built, compile cache loaded"),
                w["compile"]["cache"]["load_s"],
                _mark(c, "loader open") - _mark(c, "model built, compile cache loaded"),
                _mark(c, "first batch in hand") - _mark(c, "loader open"),
                _mark(c, "FLOPs counted") - _mark(c, "first batch in hand"),
            )
        )(*_rs(s)),
        "{:.1f} s until the model exists with the compile cache loaded ({:.1f} s of it loading), {:.1f} s opening the "
        "resident loader (50,000 images to the GPU), {:.1f} s to the first batch, {:.1f} s counting FLOPs",
    ),
    Figure(
        (BENCHMARKS,),
        "(Inductor 77.5 → 67.3 s, the forward's frame 70.0 → 51.1 s)",
        (BEFORE, FIRST),
        lambda b, a: (
            _phase(b, "cold", "inductor_compile"),
            _phase(a, "cold", "inductor_compile"),
            _one(b, "cold", "frame"),
            _one(a, "cold", "frame"),
        ),
        "(Inductor {:.1f} → {:.1f} s, the forward's frame {:.1f} → {:.1f} s)",
    ),
    Figure(
        (BENCHMARKS,),
        "13–16 s of every start, is now split: 4.3–5.2 s until the imports are done (the interpreter, torch, our "
        "modules), 5.2–6.8 s more until the model is on the GPU (CUDA's start is most of it), then 3.1–4.7 s for "
        "`torch.compile` and loading the compile cache (0.65 s of it reading the artifacts)",
        STATIC,
        lambda *s: (
            *_spread([_mark(r, "compile cache loaded") for r in _runs(*s)])[1:],
            *_spread([MEASURES["imports"](r) for r in _runs(*s)])[1:],
            *_spread([MEASURES["model"](r) for r in _runs(*s)])[1:],
            *_spread([MEASURES["cache"](r) for r in _runs(*s)])[1:],
            next(r["compile"]["cache"]["load_s"] for r in _rs(s[0]) if r["name"] == "warm-0"),
        ),
        "{:.0f}–{:.0f} s of every start, is now split: {:.1f}–{:.1f} s until the imports are done (the interpreter, "
        "torch, our modules), {:.1f}–{:.1f} s more until the model is on the GPU (CUDA's start is most of it), then "
        "{:.1f}–{:.1f} s for `torch.compile` and loading the compile cache ({:.2f} s of it reading the artifacts)",
    ),
    Figure(
        (BENCHMARKS,),
        "no benchmarks (0.2 s against 13.7). But every kernel was then loaded from its source through Triton's own "
        "launcher, 7.2 s of precompiling and 6.0 s waiting for the compile workers, so the warm start gained 0.8 s, "
        "and the cold one lost 2.6 s: both inside the spread of single runs. The step rates stayed within 1% (6,385 "
        "and 6,334 against 6,340 and 6,361)",
        STATIC,
        lambda on, off: (
            _phase(off, "warm", "CachingAutotuner.benchmark_all_configs"),
            _phase(on, "warm", "CachingAutotuner.benchmark_all_configs"),
            _phase(off, "warm", "async_compile.precompile"),
            _phase(off, "warm", "async_compile.wait"),
            _one(on, "warm", "since") - _one(off, "warm", "since"),
            _one(off, "cold", "since") - _one(on, "cold", "since"),
            max(abs(_one(off, k, "rate") / _one(on, k, "rate") - 1) for k in ("warm", "cold")) * 100,
            _one(off, "warm", "rate"),
            _one(off, "cold", "rate"),
            _one(on, "warm", "rate"),
            _one(on, "cold", "rate"),
        ),
        "no benchmarks ({:.1f} s against {:.1f}). But every kernel was then loaded from its source through Triton's "
        "own launcher, {:.1f} s of precompiling and {:.1f} s waiting for the compile workers, so the warm start gained "
        "{:.1f} s, and the cold one lost {:.1f} s: both inside the spread of single runs. The step rates stayed within "
        "{:.0f}% ({:,.0f} and {:,.0f} against {:,.0f} and {:,.0f})",
    ),
    Figure(
        (BENCHMARKS,),
        "(15.2 s, as long as the cold run's first tuning)",
        FIRST,
        lambda s: (_phase(s, "warm", "CachingAutotuner.benchmark_all_configs"),),
        "({:.1f} s, as long as the cold run's first tuning)",
    ),
    Figure(
        (BENCHMARKS,),
        "the warm start drops from 40.0 to 25.0 s",
        (STATIC[0], SAME),
        lambda on, same: (_one(on, "warm", "since"), _one(same, "warm", "since")),
        "the warm start drops from {:.1f} to {:.1f} s",
    ),
    Figure(
        (BENCHMARKS,),
        "AOTAutograd took 2.4 s more with every block a region, and Dynamo's bytecode tracing stayed at 1.8–2.1 s "
        "either way",
        CPU_REGIONS[0],
        lambda s: (
            _region(s, "aot_eager", "ResBlock+Attention")["phases"]["create_aot_dispatcher_function"]
            - _region(s, "aot_eager", "none")["phases"]["create_aot_dispatcher_function"],
            *_spread([r["phases"]["bytecode_tracing"] for r in _rs(s) if r["backend"] == "aot_eager"])[1:],
        ),
        "AOTAutograd took {:.1f} s more with every block a region, and Dynamo's bytecode tracing stayed at "
        "{:.1f}–{:.1f} s either way",
    ),
    Figure(
        (BENCHMARKS,),
        "(128.7 s against 125.5 s, one run each)",
        CPU_REGIONS[1],
        lambda s: (_region(s, "inductor", "Attention")["first_step_s"], _region(s, "inductor", "none")["first_step_s"]),
        "({:.1f} s against {:.1f} s, one run each)",
    ),
    Figure(
        (BENCHMARKS,),
        "the backward's compile went from 20.3 s to nothing",
        CPU,
        lambda s: (
            _cpu(s, "cold", _ph("entire_backward_compile")),
            "" if _cpu(s, "warm", _ph("entire_backward_compile")) == 0 else " (the warm runs still compiled it)",
        ),
        "the backward's compile went from {:.1f} s to nothing{}",
    ),
    Figure(  # "either way": over the cold and the warm runs alike
        (BENCHMARKS,),
        "(21 s either way)",
        CPU,
        lambda s: (statistics.median(_ph("async_compile.wait")(r) for r in _rs(s)),),
        "({:.0f} s either way)",
    ),
    Figure(
        (BENCHMARKS,),
        "the cache removed Inductor's 67 s (above)",
        FIRST,
        lambda s: (_phase(s, "cold", "inductor_compile"),),
        "the cache removed Inductor's {:.0f} s (above)",
    ),
    Figure(
        (BENCHMARKS,),
        "the two warm runs gave 151.8 and 138.7 samples/s, the cold ones 137.2 and 138.8, so the 5% between the "
        "medians",
        CPU,
        lambda s: (
            *(r["samples_per_s"] for k in ("warm", "cold") for r in _rs(s) if r["name"].startswith(k)),
            _cpu(s, "warm", MEASURES["rate"]) / _cpu(s, "cold", MEASURES["rate"]) - 1,
        ),
        "the two warm runs gave {:.1f} and {:.1f} samples/s, the cold ones {:.1f} and {:.1f}, so the {:.0%} between "
        "the medians",
    ),
    *(
        Figure(
            (BENCHMARKS,),
            text,
            CPU,
            lambda s, k=k: (
                *(
                    _cpu(s, k, f)
                    for f in (
                        MEASURES["since"],
                        MEASURES["first"],
                        _ph("entire_frame_compile"),
                        _ph("entire_backward_compile"),
                        _ph("inductor_compile"),
                        _ph("async_compile.wait"),
                    )
                ),
                _cpu(
                    s, k, lambda r: sum(v for c, v in r["compile"]["caches"].items() if c.startswith("fxgraph_cache_m"))
                ),
                _cpu(
                    s, k, lambda r: sum(v for c, v in r["compile"]["caches"].items() if c.startswith("fxgraph_cache_h"))
                ),
                _cpu(s, k, MEASURES["rate"]),
            ),
            f"| {name} | " + " | ".join(["{:.1f}"] * 6) + " | {:.0f} / {:.0f} | {:.1f} |",
        )
        for k, name, text in (
            (
                "cold",
                "cold: empty caches",
                "| cold: empty caches | 53.6 | 49.5 | 29.2 | 20.3 | 42.6 | 20.2 | 2 / 0 | 138.0 |",
            ),
            (
                "warm",
                "warm: the compile cache of the first cold run",
                "| warm: the compile cache of the first cold run | 35.0 | 31.1 | 31.0 | 0.0 | 0.0 | 20.7 | 0 / 2 | "
                "145.3 |",
            ),
        )
    ),
)
UNCHECKED = {
    BENCHMARKS: {
        "55.5 s": "not kept: the CPU runs before AOTAutograd's cache was allowed (commit fc1ef9c)",
        "40.0 s": "not kept: the CPU runs before AOTAutograd's cache was allowed (commit fc1ef9c)",
        "11.2 s": "not kept: the CPU runs before AOTAutograd's cache was allowed (commit fc1ef9c)",
    },
}
