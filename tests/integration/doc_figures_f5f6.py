"""Finding 5 of docs/BENCHMARKS.md: the watched programs (bench watch on lucidrains' Trainer and the diffusers-style
example) and how far bench watch can be trusted, against bench/results/f5_watch."""

from __future__ import annotations

from doc_figures import BENCHMARKS, Figure, _logged

W = "samples_per_s"
WATCH = "f5_watch/raw.tar.xz:{}/watch.json"  # one bench watch --compare --repeats 2, by program
LUCIDRAINS = ("shipped", "cpus4", "gpufeed-ffcv4")  # the lucidrains grid, run twice: set a, then set b
PYTEST = "f5_watch/pytest_gpu_watch.txt"  # tests/bench/test_bench_watch.py -m gpu, as it printed
ROW = "{:,.0f} ({:,.0f}–{:,.0f}) | {:.1%} ({:.1f}–{:.1f}%) | {:.1%} | {:.0%} | {:.1f} | {:.0f} |"  # after the name


def _watch_row(w: dict) -> tuple:
    """A watch table row: rate (median, range), share of the data-free rate (range in points), starvation, GPU
    drained before request, CPU cores and GPU util %."""
    shares = (100 * v for v in w["vs_data_free_range"])
    tail = (w["starvation"], w["drained_at_request"], w["cpu_cores"], w["nvml_gpu_util_pct"])
    return (w[W], *w["samples_per_s_range"], w["vs_data_free"], *shares, *tail)


def _data_free_runs(*watches: dict) -> tuple:
    rates = [r["figures"][W] for w in watches for r in w["runs"] if r["mode"] == "data-free"]
    return min(rates), max(rates)


FIGURES = (
    *(
        Figure((BENCHMARKS,), f"| {name} | " + text, WATCH.format(program), _watch_row, f"| {name} | " + ROW)
        for program, name, text in (
            (
                "diffusers-shipped",
                "diffusers-style, as shipped (workers 0)",
                "998 (942–1,054) | 56.6% (49.3–63.9%) | 39.3% | 100% | 1.0 | 38 |",
            ),
            (
                "diffusers-cpus4",
                "diffusers-style, as shipped, 4 cores",
                "1,322 (1,300–1,343) | 66.8% (66.1–67.5%) | 37.5% | 100% | 1.0 | 52 |",
            ),
            (
                "diffusers-gpufeed-ffcv4",
                "diffusers-style, gpufeed ffcv, 4 threads",
                "1,918 (1,886–1,950) | 97.6% (96.1–99.1%) | 1.6% | 100% | 1.0 | 77 |",
            ),
            (
                "lucidrains-shipped-a",
                "lucidrains Trainer, as shipped (16 workers), set a",
                "1,212 (1,209–1,214) | 97.7% (97.5–98.0%) | 0.4% | 100% | 1.5 | 39 |",
            ),
            (
                "lucidrains-shipped-b",
                "lucidrains Trainer, as shipped, set b",
                "1,363 (1,293–1,433) | 93.8% (89.4–98.2%) | 0.4% | 100% | 1.5 | 44 |",
            ),
            (
                "lucidrains-cpus4-a",
                "lucidrains Trainer, 4 cores, set a",
                "1,305 (1,181–1,429) | 98.1% (96.7–99.4%) | 0.4% | 100% | 1.5 | 43 |",
            ),
            (
                "lucidrains-cpus4-b",
                "lucidrains Trainer, 4 cores, set b",
                "1,276 (1,258–1,294) | 81.5% (73.3–89.7%) | 0.5% | 100% | 1.5 | 41 |",
            ),
            (
                "lucidrains-gpufeed-ffcv4-a",
                "lucidrains Trainer, gpufeed ffcv, 4 threads, set a",
                "1,391 (1,310–1,471) | 98.4% (91.3–105.5%) | 1.2% | 100% | 1.0 | 46 |",
            ),
            (
                "lucidrains-gpufeed-ffcv4-b",
                "lucidrains Trainer, gpufeed ffcv, 4 threads, set b",
                "1,173 (1,115–1,230) | 86.1% (83.8–88.3%) | 1.2% | 100% | 1.0 | 39 |",
            ),
        )
    ),
    Figure(
        (BENCHMARKS,),
        "the GPU waits 39% of the time and the program runs at 57% of its own data-free rate; fed by gpufeed's ffcv "
        "backend (4 threads) the same loop runs at 98% of it, 1.9× faster (998 → 1,918 images/s)",
        (WATCH.format("diffusers-shipped"), WATCH.format("diffusers-gpufeed-ffcv4")),
        lambda s, f: (s["starvation"], s["vs_data_free"], f["vs_data_free"], f[W] / s[W], s[W], f[W]),
        "the GPU waits {:.0%} of the time and the program runs at {:.0%} of its own data-free rate; fed by gpufeed's "
        "ffcv backend (4 threads) the same loop runs at {:.0%} of it, {:.1f}× faster ({:,.0f} → {:,.0f} images/s)",
    ),
    Figure(
        (BENCHMARKS,),
        "(0.4% starvation, its 16 workers keep up); its rate is bounded by the host: the loop reads `loss.item()` "
        "every step, so the GPU drains before every batch request (100% of steps), NVML shows it busy only 39–46% of "
        "the time",
        tuple(WATCH.format(f"lucidrains-{p}-{s}") for s in "ab" for p in LUCIDRAINS),
        lambda *w: (
            max(x["starvation"] for x in w[0::3]),  # as shipped, both sets
            min(x["drained_at_request"] for x in w),
            min(x["nvml_gpu_util_pct"] for x in w),
            max(x["nvml_gpu_util_pct"] for x in w),
        ),
        "({:.1%} starvation, its 16 workers keep up); its rate is bounded by the host: the loop reads `loss.item()` "
        "every step, so the GPU drains before every batch request ({:.0%} of steps), NVML shows it busy only "
        "{:.0f}–{:.0f}% of the time",
    ),
    Figure(
        (BENCHMARKS,),
        "to 1,317–1,717 images/s",
        tuple(WATCH.format(f"lucidrains-{p}-b") for p in LUCIDRAINS),
        _data_free_runs,
        "to {:,.0f}–{:,.0f} images/s",
    ),
    Figure(
        (BENCHMARKS,),
        "Fewer cores (4) helped it a little (+32%, not explained: measured once)",
        (WATCH.format("diffusers-shipped"), WATCH.format("diffusers-cpus4")),
        lambda s, c: (c[W] / s[W] - 1,),
        "Fewer cores (4) helped it a little (+{:.0%}, not explained: measured once)",
    ),
    Figure(
        (BENCHMARKS,),
        "the trainer's starvation 49.8%, bench watch's 49.6% (0.2 points)",
        PYTEST,
        lambda log: (lambda t, w: (t, w, 100 * (t - w)))(
            *_logged(log, r"trainer starvation ([\d.]+) .*?; bench watch ([\d.]+) over")
        ),
        "the trainer's starvation {:.1%}, bench watch's {:.1%} ({:.1f} points)",
    ),
    Figure(
        (BENCHMARKS,),
        "trace 54.1%, bench watch 53.4% (0.7 points)",
        PYTEST,
        lambda log: (lambda t, w: (t, w, 100 * (t - w)))(
            *_logged(log, r"'starvation': ([\d.]+),.*\}; bench watch: starvation ([\d.]+) over")
        ),
        "trace {:.1%}, bench watch {:.1%} ({:.1f} points)",
    ),
    Figure(
        (BENCHMARKS,),
        "4,966 and 4,970 images/s unwatched, 4,982 and 4,984 watched (watched/unwatched 1.003: no cost measurable)",
        PYTEST,
        # the ratio of the two medians, each of two runs: their means
        lambda log: (lambda a, b, c, d: (*sorted((a, b)), *sorted((c, d)), (c + d) / (a + b)))(
            *_logged(log, r"unwatched \[([\d.]+), ([\d.]+)\].*?; watched \[([\d.]+), ([\d.]+)\]")
        ),
        "{:,.0f} and {:,.0f} images/s unwatched, {:,.0f} and {:,.0f} watched (watched/unwatched {:.3f}: no cost "
        "measurable)",
    ),
)
UNCHECKED = {
    BENCHMARKS: {
        "12 ms": "a setting: the test program's GPU step in tests/bench/test_bench_watch.py, not a measurement",
        "25 ms": "a setting: the test program's loader delay in tests/bench/test_bench_watch.py, not a measurement",
    },
}
