"""Finding 9's caption writer on 4 GPUs after the one warm-up (docs/BENCHMARKS.md, README.md), against the runs under
bench/results/f9_text_4xh200/t5_warmup_*, t5_50k_after_one_gpu (a third host) and the py-spy profile of one 4-GPU
run."""

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
THIRD = ROOT + "t5_50k_after_one_gpu/"  # the third host
ONE_C_NAMES = ("one1", "one1b", "one1c")
FOUR_C_NAMES = ("spy", "base4", "base4b", "base4c", "base4d")  # in the order run; base4 right after a sync
ONE_C, FOUR_C = (tuple(THIRD + f"{n}.txt" for n in names) for names in (ONE_C_NAMES, FOUR_C_NAMES))
AFTER_ONE = (0, 2, 4)  # FOUR_C's runs right after a one-GPU run
THIRD_ALL = (*ONE_C, *FOUR_C, THIRD + "marks.txt", THIRD + "meminfo_call1.txt", THIRD + "meminfo_call2.txt")


def _ratios(ones: tuple, fours: tuple) -> tuple:
    """(each 4-GPU run's × against the median one-GPU run, in the order run)."""
    one = statistics.median(map(_encode, ones))
    return tuple(one / _encode(o) for o in fours)


def _repeats(*outputs: str) -> tuple:
    return _ratios(outputs[: len(ONE)], outputs[len(ONE) :])


def _third(*outputs: str) -> tuple:
    return _ratios(outputs[: len(ONE_C)], outputs[len(ONE_C) : len(ONE_C) + len(FOUR_C)])


def _all_runs(*loaded) -> tuple:
    """(lowest ×, highest ×, runs, runs at 3.6× or more, the third host's lowest and highest ×) over A10, A50, the
    repeats and the third host's runs."""
    b = 8 + len(ONE) + len(FOUR)
    third = _third(*loaded[b:])
    ratios = [_convert_row(*loaded[:4])[5], _convert_row(*loaded[4:8])[5], *_repeats(*loaded[8:b]), *third]
    return min(ratios), max(ratios), len(ratios), sum(r >= 3.6 for r in ratios), min(third), max(third)


ALL = (*A10, *A50, *ONE, *FOUR, *ONE_C, *FOUR_C)


def _walls(text: str) -> dict[str, float]:
    """Each command's wall time in seconds, from walls.txt ("NAME MS ms: ...")."""
    return {p[0]: int(p[1]) / 1000 for p in (line.split() for line in text.splitlines()) if p[2:3] in (["ms"], ["ms:"])}


def _third_row(walls: str, *outputs: str) -> tuple:
    """The table's row: median whole-command seconds on 1 and 4 GPUs (the plain runs) and their ×, then the caption
    writer's median seconds and ×."""
    w = _walls(walls)
    # the plain runs: not the one under py-spy, FOUR_C's first
    one, four = (statistics.median(w[n] for n in names) for names in (ONE_C_NAMES, FOUR_C_NAMES[1:]))
    enc1 = statistics.median(map(_encode, outputs[: len(ONE_C)]))
    enc4 = statistics.median(map(_encode, outputs[len(ONE_C) + 1 :]))
    return one, four, one / four, enc1, enc4, enc1 / enc4


def _third_runs(*outputs: str) -> tuple:
    """(one GPU's fewest and most seconds, its runs; the same for 4 GPUs; the lowest and highest ×, and those of the
    runs right after a one-GPU run), from ONE_C then FOUR_C."""
    ratios = _third(*outputs)
    one, four = ([_encode(o) for o in part] for part in (outputs[: len(ONE_C)], outputs[len(ONE_C) :]))
    spans = [(min(x), max(x)) for x in (one, four, ratios, [ratios[k] for k in AFTER_ONE])]
    return (*spans[0], len(one), *spans[1], len(four), *spans[2], *spans[3])


def _dirty_at_starts(marks: str, *meminfo: str) -> tuple:
    """(fewest and most GB of dirty pages as a 4-GPU run began, over those not after a sync; then that after it)."""
    samples = sorted(  # each line: the time, then /proc/meminfo's "Name:kB" fields
        (float(t), int(dict(f.split(":") for f in fields)["Dirty"]) * 1024 / 1e9)
        for text in meminfo
        for t, *fields in (line.split() for line in text.splitlines())
    )
    starts = {n: float(t) for t, event, n in (line.split() for line in marks.splitlines()) if event == "start"}
    at = {n: next(d for t, d in samples if t >= starts[n]) for n in FOUR_C_NAMES}
    plain = [d for n, d in at.items() if n != "base4"]  # base4 ran right after the sync
    return min(plain), max(plain), at["base4"]


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
        "On 4 H200s since, it ranged from 2.92× to 3.79× over 11 runs on 3 hosts, at 10,000 or 50,000 captions: 3.6× "
        "in 7 of them, and in all 5 on the third host",
        ALL,
        lambda *r: (*_all_runs(*r)[:4], len(FOUR_C)),
        "On 4 H200s since, it ranged from {:.2f}× to {:.2f}× over {} runs on 3 hosts, at 10,000 or 50,000 captions: "
        "3.6× in {} of them, and in all {} on the third host",
    ),
    Figure(
        (README,),
        "H200s 2.92–3.79× (11 runs on 3 hosts, 10,000 or 50,000 captions; 3.6× in 7 of them, all 5 on the third host)",
        ALL,
        lambda *r: (*_all_runs(*r)[:4], len(FOUR_C)),
        "H200s {:.2f}–{:.2f}× ({} runs on 3 hosts, 10,000 or 50,000 captions; 3.6× in {} of them, all {} on the third "
        "host)",
    ),
    Figure(
        (BENCHMARKS,),
        "and 2.92–3.79× in 11 later runs on 3 hosts (3.64–3.79× in all 5 on the third)",
        ALL,
        lambda *r: (*_all_runs(*r)[:3], *_all_runs(*r)[4:], len(FOUR_C)),
        "and {:.2f}–{:.2f}× in {} later runs on 3 hosts ({:.2f}–{:.2f}× in all {} on the third)",
    ),
    Figure(
        (BENCHMARKS,),
        "| 53.7 s | 40.5 s | 1.33× | 21.96 → 5.92 s: **3.71×** |",
        (THIRD + "walls.txt", *ONE_C, *FOUR_C),
        _third_row,
        "| {:.1f} s | {:.1f} s | {:.2f}× | {:.2f} → {:.2f} s: **{:.2f}×** |",
    ),
    Figure(
        (BENCHMARKS,),
        "1.25–1.33× at 50,000)",
        (*A50, THIRD + "walls.txt", *ONE_C, *FOUR_C),
        lambda *r: (_convert_row(*r[:4])[2], _third_row(*r[4:])[2]),
        "{:.2f}–{:.2f}× at 50,000)",
    ),
    Figure(
        (BENCHMARKS,),
        "One GPU took 21.90–22.04 s (3 runs), 4 GPUs 5.80–6.04 s (5 runs, the first under py-spy): 3.64–3.79× the "
        "median one-GPU run, the runs right after a one-GPU run 3.64–3.67×.",
        (*ONE_C, *FOUR_C),
        _third_runs,
        "One GPU took {:.2f}–{:.2f} s ({} runs), 4 GPUs {:.2f}–{:.2f} s ({} runs, the first under py-spy): "
        "{:.2f}–{:.2f}× the median one-GPU run, the runs right after a one-GPU run {:.2f}–{:.2f}×.",
    ),
    Figure(
        (BENCHMARKS,),
        "every 4-GPU run but one began with 6.3–6.6 GB of the earlier runs' tables not yet on disk, the run after a "
        "4-GPU run (3.75×) as well as those after a one-GPU run; the one after a `sync` began with 25 kB and ran 3.79× "
        "(one run).",
        THIRD_ALL,
        lambda *o: (*_dirty_at_starts(*o[-3:])[:2], _third(*o)[3], _dirty_at_starts(*o[-3:])[2] * 1e6, _third(*o)[1]),
        "every 4-GPU run but one began with {:.1f}–{:.1f} GB of the earlier runs' tables not yet on disk, the run "
        "after a 4-GPU run ({:.2f}×) as well as those after a one-GPU run; the one after a `sync` began with {:.0f} kB "
        "and ran {:.2f}× (one run).",
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
