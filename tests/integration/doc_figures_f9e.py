"""Finding 9's caption writer on 4 GPUs after the one warm-up (docs/BENCHMARKS.md, README.md), against the runs under
bench/results/f9_text_4xh200/t5_warmup_* and the py-spy profile of one 4-GPU run."""

from __future__ import annotations

import statistics
from collections import Counter

from doc_figures import BENCHMARKS, PYSPY_HZ, README, Figure, _convert_row
from doc_figures import _printed_stage as _encode

ROOT = "f9_text_4xh200/"
ROW = tuple(f"{ROOT}t5_warmup_{{}}/t5_gpus{g}.{x}" for g in (1, 4) for x in ("manifest.json", "ms"))
A10, A50 = (tuple(p.format(n) for p in ROW) for n in ("10k", "50k"))
REPEATS = ROOT + "t5_warmup_50k_repeats/"
ONE = tuple(REPEATS + f"{n}.txt" for n in ("one_omp1", "one1", "one1b"))
FOUR = tuple(REPEATS + f"{n}.txt" for n in ("omp16", "spy", "base4", "base4b"))  # in the order run
PROFILE = REPEATS + "t5_gpus4_spy.speedscope.json.xz"


def _repeats(*outputs: str) -> tuple:
    """(each 4-GPU run's × against the median one-GPU run, in the order run), from ONE then FOUR."""
    one = statistics.median(_encode(o) for o in outputs[: len(ONE)])
    return tuple(one / _encode(o) for o in outputs[len(ONE) :])


def _all_runs(*loaded) -> tuple:
    """(lowest ×, highest ×, runs, runs at 3.6× or more) over A10, A50 and the repeats."""
    ratios = [_convert_row(*loaded[:4])[5], _convert_row(*loaded[4:8])[5], *_repeats(*loaded[8:])]
    return min(ratios), max(ratios), len(ratios), sum(r >= 3.6 for r in ratios)


ALL = (*A10, *A50, *ONE, *FOUR)


def _waits(profile: dict) -> tuple:
    """(rank 0's encoding: seconds in all, waiting for its GPU, in the row counts' exchange; then the other ranks'
    fewest and most seconds in that exchange and waiting for their GPUs), from the samples of the writer's turns."""
    frames = profile["shared"]["frames"]
    per = {}
    for thread in profile["profiles"]:
        seen = Counter()
        for sample in thread["samples"]:
            names = {frames[i]["name"] for i in sample}
            if "TextCacheWriter.add" in names:
                seen["all"] += 1
                seen["gpu"] += "Event.synchronize" in names
                seen["exchange"] += "turn_lengths" in names
        if seen["all"]:
            per[thread["name"].split()[1]] = {k: v / PYSPY_HZ for k, v in seen.items()}
    rank0 = per.pop(min(per, key=int))  # the processes' ids: rank 0 started first
    ex, gpu = [p["exchange"] for p in per.values()], [p["gpu"] for p in per.values()]
    return rank0["all"], rank0["gpu"], rank0["exchange"], min(ex), max(ex), min(gpu), max(gpu)


FIGURES = (
    Figure(
        (BENCHMARKS,),
        "On 4 H200s since, it ranged from 2.92× to 3.71× over 6 runs on 2 hosts, at 10,000 or 50,000 captions: 3.6× in "
        "2 of them.",
        ALL,
        _all_runs,
        "On 4 H200s since, it ranged from {:.2f}× to {:.2f}× over {} runs on 2 hosts, at 10,000 or 50,000 captions: "
        "3.6× in {} of them.",
    ),
    Figure(
        (README,),
        "H200s 2.92–3.71× (6 runs on 2 hosts, 10,000 or 50,000 captions; 3.6× in 2 of them)",
        ALL,
        _all_runs,
        "H200s {:.2f}–{:.2f}× ({} runs on 2 hosts, 10,000 or 50,000 captions; 3.6× in {} of them)",
    ),
    Figure(
        (BENCHMARKS,),
        "and 2.92–3.71× in 6 later runs on 2 hosts",
        ALL,
        lambda *r: _all_runs(*r)[:3],
        "and {:.2f}–{:.2f}× in {} later runs on 2 hosts",
    ),
    Figure(
        (BENCHMARKS,),
        "| 32.6 s | 34.1 s | 0.96× | 5.29 → 1.61 s: **3.29×** |",
        A10,
        _convert_row,
        "| {:.1f} s | {:.1f} s | {:.2f}× | {:.2f} → {:.2f} s: **{:.2f}×** |",
    ),
    Figure(
        (BENCHMARKS,),
        "| 64.4 s | 51.4 s | 1.25× | 21.93 → 7.52 s: **2.92×** |",
        A50,
        _convert_row,
        "| {:.1f} s | {:.1f} s | {:.2f}× | {:.2f} → {:.2f} s: **{:.2f}×** |",
    ),
    Figure(
        (BENCHMARKS,),
        "At 10,000 captions 4 H200s encoded 3.29× as fast as one; at 50,000",
        A10,
        lambda *r: (_convert_row(*r)[5],),
        "At 10,000 captions 4 H200s encoded {:.2f}× as fast as one; at 50,000",
    ),
    Figure(
        (BENCHMARKS,),
        "each rank with 196 turns of one batch) 2.92×",
        A50,
        lambda one, _, four, __: (-(-four["text"]["captions"] // (64 * 4)), _convert_row(one, _, four, __)[5]),
        "each rank with {} turns of one batch) {:.2f}×",
    ),
    Figure(
        (BENCHMARKS,),
        "one GPU took 21.73–21.78 s (3 runs",
        ONE,
        lambda *o: (min(map(_encode, o)), max(map(_encode, o)), len(o)),
        "one GPU took {:.2f}–{:.2f} s ({} runs",
    ),
    Figure(
        (BENCHMARKS,),
        "4 GPUs 5.87 s and 5.90 s in the host's first two conversions",
        FOUR[:2],
        lambda *o: tuple(map(_encode, o)),
        "4 GPUs {:.2f} s and {:.2f} s in the host's first two conversions",
    ),
    Figure(
        (BENCHMARKS,),
        "3.71× and 3.69× the median one-GPU run), then 7.22 s and 7.11 s (3.01× and 3.06×)",
        (*ONE, *FOUR),
        lambda *o: (*_repeats(*o)[:2], *map(_encode, o[-2:]), *_repeats(*o)[2:]),
        "{:.2f}× and {:.2f}× the median one-GPU run), then {:.2f} s and {:.2f} s ({:.2f}× and {:.2f}×)",
    ),
    Figure(
        (BENCHMARKS,),
        "every run writes a 6.2 GB table",
        A50[2],
        lambda m: (m["text"]["tokens"] * 2 * m["text"]["encoder"]["dim"] / 1e9,),
        "every run writes a {:.1f} GB table",
    ),
    Figure(
        (BENCHMARKS,),
        "its encoding thread waited for its own GPU (the copy to the host behind each batch) for 3.79 s of 5.28 s, and "
        "in the turn's exchange of row counts for 0.29 s; ranks 1–3 waited in that exchange, for rank 0, 2.31–3.35 s, "
        "and for their GPUs 1.33–2.34 s.",
        PROFILE,
        _waits,
        "its encoding thread waited for its own GPU (the copy to the host behind each batch) for {1:.2f} s of {0:.2f} "
        "s, and in the turn's exchange of row counts for {2:.2f} s; ranks 1–3 waited in that exchange, for rank 0, "
        "{3:.2f}–{4:.2f} s, and for their GPUs {5:.2f}–{6:.2f} s.",
    ),
)
UNCHECKED: dict[str, dict[str, str]] = {}
