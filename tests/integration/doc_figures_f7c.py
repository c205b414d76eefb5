"""The measured figures of docs/BENCHMARKS.md's finding 7 on the first 4-H200 host and on hosts A and B (DDP: rates,
traces, the host's time per step, compiling), each against its raw result under bench/results."""

from __future__ import annotations

from doc_figures import BENCHMARKS, Figure, W, rate
from doc_figures_f7 import AB_RAW, H4, HA, HB, ms, n, st, tr, x
from doc_figures_f7b import A_DDP, A_FREE4, A_GPU4, A_NOSPLIT, A_ONE, H4_FIRST, _host, enq, first

FIGURES = (
    # the first 4-H200 host's tables
    Figure(
        (BENCHMARKS,),
        "| `ddpm_cifar10` b128/GPU, `--grad-sync ddp` | 6,989 | 11,967 (1.71×) | 21,858 (3.13×) |",
        H4,
        lambda s: _host(s, n(), n(2), n(4)),
        "| `ddpm_cifar10` b128/GPU, `--grad-sync ddp` | {:,.0f} | {:,.0f} ({:.2f}×) | {:,.0f} ({:.2f}×) |",
    ),
    Figure(
        (BENCHMARKS,),
        "| the same, `flat` | (1 GPU's) | 12,662 (1.81×) | 14,624 (2.09×) |",
        H4,
        lambda s: _host(s, n(), n(2, "flat"), n(4, "flat"))[1:],
        "| the same, `flat` | (1 GPU's) | {:,.0f} ({:.2f}×) | {:,.0f} ({:.2f}×) |",
    ),
    Figure(
        (BENCHMARKS,),
        "| the same, `ddp-nosplit` | (1 GPU's) | – | 21,291 (3.05×) |",
        H4,
        lambda s: _host(s, n(), n(4, "ddp-nosplit"))[1:],
        "| the same, `ddp-nosplit` | (1 GPU's) | – | {:,.0f} ({:.2f}×) |",
    ),
    Figure(
        (BENCHMARKS,),
        "| GPU span, ms | 19.1 | 37.1 / 36.5 / 35.1 / 36.9 |",
        H4,
        lambda s: (*tr(s, "ddp-np1", "span_ms"), *tr(s, "ddp-np4", "span_ms")),
        "| GPU span, ms | {:.1f} | {:.1f} / {:.1f} / {:.1f} / {:.1f} |",
    ),
    Figure(
        (BENCHMARKS,),
        "| GPU idle, ms | 1.4 | 1.4 / 17.2 / 1.4 / 1.4 |",
        H4,
        lambda s: (*tr(s, "ddp-np1", "idle_ms"), *tr(s, "ddp-np4", "idle_ms")),
        "| GPU idle, ms | {:.1f} | {:.1f} / {:.1f} / {:.1f} / {:.1f} |",
    ),
    Figure(
        (BENCHMARKS,),
        "| NCCL kernels / exposed, ms | 0 / 0 | 28.5 / 0.9 / 26.0 / 28.4 and 14.1 / 0.5 / 11.8 / 13.4 |",
        H4,
        lambda s: (
            *(tr(s, "ddp-np1", k)[0] for k in ("nccl_ms", "nccl_exposed_ms")),
            *(v for k in ("nccl_ms", "nccl_exposed_ms") for v in tr(s, "ddp-np4", k)),
        ),
        "| NCCL kernels / exposed, ms | {:.0f} / {:.0f} | {:.1f} / {:.1f} / {:.1f} / {:.1f} and {:.1f} / {:.1f} / "
        "{:.1f} / {:.1f} |",
    ),
    Figure(
        (BENCHMARKS,),
        "| CUDA graph launches / kernel launches | 2 / 53 | 14 / 398 on every rank |",
        H4,
        lambda s: (
            *(tr(s, "ddp-np1", k)[0] for k in ("graph_launches", "kernel_launches")),
            *(v for k in ("graph_launches", "kernel_launches") for v in set(tr(s, "ddp-np4", k))),
        ),
        "| CUDA graph launches / kernel launches | {:.0f} / {:.0f} | {:.0f} / {:.0f} on every rank |",
    ),
    # hosts A and B
    Figure(
        (BENCHMARKS,),
        "| host A | 7,015 | 8,012 (1.14×) | 16,454 (2.35×) | 16,558 (2.36×) |",
        HA,
        lambda s: _host(s, n(), n(2), n(4), n(4, "ddp-nosplit")),
        "| host A | {:,.0f} | {:,.0f} ({:.2f}×) | {:,.0f} ({:.2f}×) | {:,.0f} ({:.2f}×) |",
    ),
    Figure(
        (BENCHMARKS,),
        "| host B | 6,741 | 7,823 (1.16×) | 16,367 (2.43×) | – |",
        HB,
        lambda s: _host(s, n(), n(2), n(4)),
        "| host B | {:,.0f} | {:,.0f} ({:.2f}×) | {:,.0f} ({:.2f}×) | – |",
    ),
    Figure(
        (BENCHMARKS,),
        "| the first host (the table above) | 6,989 | 11,967 (1.71×) | 21,858 (3.13×) | 21,291 (3.05×) |",
        H4,
        lambda s: _host(s, n(), n(2), n(4), n(4, "ddp-nosplit")),
        "| the first host (the table above) | {:,.0f} | {:,.0f} ({:.2f}×) | {:,.0f} ({:.2f}×) | {:,.0f} ({:.2f}×) |",
    ),
    Figure(
        (BENCHMARKS,),
        "| host A | 12.6 | 28.6 | 28.3 | 24.1 |",
        (A_ONE[0], A_DDP[0], A_DDP[1], A_NOSPLIT),
        lambda *r: tuple(enq(x) for x in r),
        "| host A | {:.1f} | {:.1f} | {:.1f} | {:.1f} |",
    ),
    Figure(
        (BENCHMARKS,),
        "| host B | 13.4 | 30.9 | 29.3 | – |",
        (A_ONE[1], A_DDP[2], A_DDP[3]),
        lambda *r: tuple(enq(x) for x in r),
        "| host B | {:.1f} | {:.1f} | {:.1f} | – |",
    ),
    Figure(
        (BENCHMARKS,),
        "| the first host | 10.4 | 20.4 | 22.0 | 21.3 |",
        H4_FIRST,
        lambda *r: tuple(enq(x) for x in r),
        "| the first host | {:.1f} | {:.1f} | {:.1f} | {:.1f} |",
    ),
    Figure(
        (BENCHMARKS,),
        "One GPU runs the step in about 18 ms (7,015 images/s at 128 a step). A single process enqueues it in "
        "12.6–13.4 ms and stays ahead. A DDP rank on the same host needs 24–31 ms of host time per step, and its rate "
        "follows that: 4,006 images/s per rank on 2 GPUs of host A is 32 ms a step. Every rank's process kept one core "
        "busy (1.0–1.25 cores). The host was late on 30–64% of the steps",
        (HA, *A_ONE, *A_DDP, A_NOSPLIT),
        lambda a, *r: (
            ms(128, rate(a, n())),
            rate(a, n()),
            *(f(enq(x) for x in r[:2]) for f in (min, max)),
            *(f(enq(x) for x in r[2:]) for f in (min, max)),
            rate(a, n(2)) / 2,
            ms(256, rate(a, n(2))),
            *(f(k["cpu_cores"] for x in r[2:6] for k in x["figures"]["ranks"]) for f in (min, max)),
            100 * min(st(x)["host_behind_mean"] for x in r[2:6]),
            max(st(x)["host_behind_mean"] for x in r[2:6]),
        ),
        "One GPU runs the step in about {:.0f} ms ({:,.0f} images/s at 128 a step). A single process enqueues it in "
        "{:.1f}–{:.1f} ms and stays ahead. A DDP rank on the same host needs {:.0f}–{:.0f} ms of host time per step, "
        "and its rate follows that: {:,.0f} images/s per rank on 2 GPUs of host A is {:.0f} ms a step. Every rank's "
        "process kept one core busy ({:.1f}–{:.2f} cores). The host was late on {:.0f}–{:.0%} of the steps",
    ),
    Figure(
        (BENCHMARKS,),
        "took 0.71 ms alone there (302 GB/s bus bandwidth over NVLink, `nccl_probe`). The first host enqueued a DDP "
        "step in 20–22 ms, about its GPU's step, and scaled 3.13×",
        (AB_RAW.format("a", "nccl/probe-np4"), H4, *H4_FIRST[1:3]),
        lambda p, s, two, four: (
            p["all_reduce"][2]["ms"],
            p["all_reduce"][2]["busbw_gb_s"],
            enq(two),
            enq(four),
            x(s, n(4), n())[1],
        ),
        "took {:.2f} ms alone there ({:.0f} GB/s bus bandwidth over NVLink, `nccl_probe`). The first host enqueued a "
        "DDP step in {:.0f}–{:.0f} ms, about its GPU's step, and scaled {:.2f}×",
    ),
    Figure(
        (BENCHMARKS,),
        "`ddp-nosplit`, with 2 graph launches, still took 24 ms",
        A_NOSPLIT,
        lambda r: (enq(r),),
        "`ddp-nosplit`, with 2 graph launches, still took {:.0f} ms",
    ),
    Figure(
        (BENCHMARKS,),
        "the data-free run pinned that way made 14,675 samples/s (its host late on 86% of the worst rank's steps); the "
        "`gpu` loader made 15,450, 105% of that and 93.9% of the unpinned data-free rate, at 0.72% starvation (rank 1 "
        "made the others wait). That 105% is run-to-run spread",
        (HA, A_FREE4, A_GPU4),
        lambda s, free, gpu: (
            free["figures"][W],
            st(free)["host_behind_max"],
            gpu["figures"][W],
            gpu["vs_data_free"],
            gpu["figures"][W] / rate(s, n(4)),
            st(gpu)["starvation"],
            st(gpu)["waited_on_rank"],
            gpu["vs_data_free"],
        ),
        "the data-free run pinned that way made {:,.0f} samples/s (its host late on {:.0%} of the worst rank's steps); "
        "the `gpu` loader made {:,.0f}, {:.0%} of that and {:.1%} of the unpinned data-free rate, at {:.2%} "
        "starvation (rank {} made the others wait). That {:.0%} is run-to-run spread",
    ),
    Figure(
        (BENCHMARKS,),
        "One GPU took 106–124 s and 2 ranks 136–138 s (14 DDP graphs built). The first 4-rank run took 151–167 s",
        (*A_ONE, *A_DDP),
        lambda a1, b1, a2, a4, b2, b4: tuple(
            f(first(x) for x in pair) for pair in ((a1, b1), (a2, b2), (a4, b4)) for f in (min, max)
        ),
        "One GPU took {:.0f}–{:.0f} s and 2 ranks {:.0f}–{:.0f} s (14 DDP graphs built). The first 4-rank run took "
        "{:.0f}–{:.0f} s",
    ),
    Figure(
        (BENCHMARKS,),
        "A second 4-rank run of the same graphs started in 43 s, and `ddp-nosplit` in 14 s",
        (A_FREE4, A_NOSPLIT),
        lambda a, b: (first(a), first(b)),
        "A second 4-rank run of the same graphs started in {:.0f} s, and `ddp-nosplit` in {:.0f} s",
    ),
)
UNCHECKED = {  # figures of finding 7 that no raw result holds, and why
    BENCHMARKS: {"3.7 MB": "not kept: the size of the first 4-H200 host's full profiler traces, which were not kept"}
}
