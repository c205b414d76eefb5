"""Finding 8 of docs/BENCHMARKS.md, "Before these fixes" and "Epoch boundaries and two ranks": the stream loader alone
against its workers, in training on one H200 and on two ranks, against bench/results/f8_stream_pace_h200/."""

from __future__ import annotations

import json
import statistics

from doc_figures import BENCHMARKS, RESULTS, Figure
from doc_figures_f8 import _windows

PACE = "f8_stream_pace_h200/{}"
CELL = {  # the loader alone in the workers table: (folder and file prefix of each cell, the workers it shows)
    "before": ("before/c16_w{}.json", (1, 2, 4, 8)),
    "blocks": ("blocks/c16_w{}_call1.json", (1, 2, 4, 8, 16)),
    "final": ("final/cd_w{}.json", (1, 2, 4, 8, 16)),
}
CELLS = {k: tuple(PACE.format(f.format(w)) for w in ws) for k, (f, ws) in CELL.items()}
FINAL = {k: PACE.format(f"final/train_{k}/summary.json") for k in ("gpu", "sd", "gpu2", "sd2")}
EPOCH = 390  # steps in an epoch of 50,000 images at batch 128, a setting


def _cold_warm(*cells: dict) -> tuple:
    return tuple(c["epochs"][e]["rate"] for c in cells for e in (0, 1))


def _in_epochs(source: str) -> tuple:
    """A run's median 50-step window inside epoch 1 and inside epoch 2, then its windows holding an epoch boundary."""
    inside: dict[int, list[float]] = {}
    edges = []
    for step, w in _windows(source):
        if (step - 1) // EPOCH != (step - 50) // EPOCH:
            edges.append(w)
        else:
            inside.setdefault((step - 1) // EPOCH, []).append(w)
    return statistics.median(inside[0]), statistics.median(inside[1]), *edges


def _final_row(run: str, ref: str | None = None) -> object:
    """A row of the in-training table: whole-run rate (and its share of `ref`'s), starvation, windows."""
    return lambda r, *g: (
        r["samples_per_s"],
        *((r["samples_per_s"] / g[0]["samples_per_s"],) if g else ()),
        r["starvation"]["starvation"],
        *_in_epochs(run),
    )


FINAL_ROWS = (
    ("gpu", None, "| `gpu`, run 1 | 6,471 | 0.9% | 7,004 / 6,992 | 6,983 / 6,977 |", "| `gpu`, run 1 | {:,.0f} |"),
    (
        "sd",
        "gpu2",
        "| `stream` from s3://, run 1 | 6,777 (96.4% of gpu run 2) | 3.7% | 6,980 / 6,988 | 5,727 / 5,744 |",
        "| `stream` from s3://, run 1 | {:,.0f} ({:.1%} of gpu run 2) |",
    ),
    ("gpu2", None, "| `gpu`, run 2 | 7,029 | 0.8% | 7,047 / 7,042 | 7,042 / 7,044 |", "| `gpu`, run 2 | {:,.0f} |"),
)
CW = "{:,.0f} / {:,.0f}"
WORKERS_ROWS = (
    ("before", "| before: full in-shard shuffle, 16 MiB shards (9) | " + " | ".join([CW] * 4) + " | – |"),
    ("blocks", "| blocks of 256, 16 MiB shards (9) | " + " | ".join([CW] * 5) + " |"),
    (
        "final",
        "| as shipped: blocks of 256, shards of 1,024 images (49) | "
        + " | ".join([CW, CW, "**" + CW + "**", CW, CW])
        + " |",
    ),
)
WORKERS_TEXT = (
    "| before: full in-shard shuffle, 16 MiB shards (9) | 4,912 / 5,305 | 3,799 / 3,761 | 3,061 / 2,935 | "
    "2,586 / 2,269 | – |",
    "| blocks of 256, 16 MiB shards (9) | 30,861 / 61,406 | 14,952 / 15,581 | 13,618 / 13,430 | 9,476 / 9,783 | "
    "9,883 / 10,116 |",
    "| as shipped: blocks of 256, shards of 1,024 images (49) | 25,264 / 45,189 | 36,440 / 61,842 | "
    "**38,942 / 73,096** | 40,837 / 67,349 | 43,974 / 64,265 |",
)
EPOCHS = "f8_stream_pace_h200/epochs/{}/train_{}/summary.json"
EPOCH_ROWS = (  # (call, `gpu` tag, `stream` tag, the row as written before its rates)
    (
        "1_aligned_prestart",
        "gpu",
        "sd",
        "| blocks counted from the shard's start; next epoch's workers forked before this one ends (2de087f) | H200, "
        "16 cores | ",
    ),
    (
        "2_stop_in_thread",
        "gpu",
        "sd",
        "| + an epoch's workers stopped in a thread after its last batch (4b552a9) | H200, 16 cores | ",
    ),
    ("3_fork_server", "gpu", "sd", "| + the next epoch's workers from a fork server (d8e0fe6) | H200, 16 cores | "),
    ("4_persistent_2xh200", "r1gpu", "r1sd", "| **workers persist across epochs (884a7c1)** | 2×H200, 32 cores | "),
)
EPOCH_TEXT = (
    "6,839 / 6,751 | 98.7% | 2.6% | 147 ms | 11.7% / 10.7% |",
    "7,009 / 6,808 | 97.1% | 3.9% | 412 ms | 29.9% / 6.4% |",
    "6,973 / 6,754 | 96.9% | 4.5% | 428 ms | 30.9% / 10.9% |",
    "7,058 / 6,974 | **98.8%** | 1.3% | 39 ms | 2.4% / 1.0% |",
)


def _metrics(source: str) -> list[dict]:
    return [json.loads(line) for line in (RESULTS / source).with_name("metrics.jsonl").read_text().splitlines()]


def _boundaries(source: str, epoch: int = EPOCH) -> list[float]:
    """The starvation at each epoch boundary: the worse of the 50-step window holding it and the one before, since a
    loader that reads ahead starts the next epoch before the training loop reaches it."""
    rows = {r["step"]: r["starvation"] for r in _metrics(source)}
    edges = range(epoch, max(rows), epoch)
    return [max(rows.get(-(-b // 50) * 50, 0.0), rows.get(-(-b // 50) * 50 - 50, 0.0)) for b in edges]


def _epoch_row(sd_source: str) -> object:
    """`gpu` and `stream` rates, their ratio, the stream run's starvation and worst wait, then its two boundaries."""
    return lambda g, r: (
        g["samples_per_s"],
        r["samples_per_s"],
        r["samples_per_s"] / g["samples_per_s"],
        r["starvation"]["starvation"],
        r["starvation"]["wait_max_ms"],
        *_boundaries(sd_source),
    )


EP = {(c, t): EPOCHS.format(c, t) for c, g, sd, _ in EPOCH_ROWS for t in (g, sd)}
ONE_GPU = tuple(EP[c, g] for c, g, _, _ in EPOCH_ROWS)  # the `gpu` runs on one H200, against which "what it eats"
ALONE = tuple(f"f8_stream_pace_h200/epochs/1_aligned_prestart/cd_w{w}.json" for w in (1, 2, 4, 8))
PERSIST = {t: EPOCHS.format("4_persistent_2xh200", t) for t in ("r1gpu", "r1sd", "r2gpu", "r2sd")}
DIT_EP = tuple(EPOCHS.format("2_stop_in_thread", t) for t in ("dgpu", "dsd"))
EP_STREAM = tuple(
    EPOCHS.format(c, t)
    for c, t in (*((c, sd) for c, _, sd, _ in EPOCH_ROWS), ("2_stop_in_thread", "dsd"), ("4_persistent_2xh200", "r2sd"))
)


def _pace(gpu: str) -> tuple:
    """The stream runs' median windows inside epoch 1 and 2 against a `gpu` run's: the range over every pairing."""
    mine = [m for k in ("sd", "sd2") for m in _in_epochs(FINAL[k])[:2]]
    ref = _in_epochs(FINAL[gpu])[:2]
    return min(mine) / max(ref), max(mine) / min(ref)


def _starved_inside() -> tuple:
    """The stream runs' starvation range (in %) over their windows inside an epoch, after the first 100 steps."""
    xs = [
        100 * r["starvation"]
        for k in ("sd", "sd2")
        for r in _metrics(FINAL[k])
        if r["step"] > 100 and (r["step"] - 1) // EPOCH == (r["step"] - 50) // EPOCH
    ]
    return min(xs), max(xs)


def _edges() -> tuple:
    """The stream runs' windows holding an epoch boundary, each against the same run's median window inside the epoch
    before (min, max), then their starvation (min, max, in %)."""
    pace = [e / inside for k in ("sd", "sd2") for inside, e in zip(_in_epochs(FINAL[k])[:2], _in_epochs(FINAL[k])[2:])]
    starved = [
        100 * r["starvation"]
        for k in ("sd", "sd2")
        for r in _metrics(FINAL[k])
        if (r["step"] - 1) // EPOCH != (r["step"] - 50) // EPOCH
    ]
    return 100 * min(pace), 100 * max(pace), min(starved), max(starved)


FIGURES = (
    Figure(
        (BENCHMARKS,),
        "Inside an epoch the stream loader is at the GPU's pace: 99.0–99.5% of the faster `gpu` run's windows "
        "(99.7–100.2% of the slower one's), starved 0.7–1.2% a window",
        tuple(FINAL.values()),
        lambda *_: (*(100 * x for x in (*_pace("gpu2"), *_pace("gpu"))), *_starved_inside()),
        "Inside an epoch the stream loader is at the GPU's pace: {:.1f}–{:.1f}% of the faster `gpu` run's windows "
        "({:.1f}–{:.1f}% of the slower one's), starved {:.1f}–{:.1f}% a window",
    ),
    Figure(
        (BENCHMARKS,),
        "a 50-step window there ran at 82–86% (starved 14–18%)",
        (FINAL["sd"], FINAL["sd2"]),
        lambda *_: _edges(),
        "a 50-step window there ran at {:.0f}–{:.0f}% (starved {:.0f}–{:.0f}%)",
    ),
    Figure(
        (BENCHMARKS,),
        "The two `gpu` runs differ by 8.6% over the whole run",
        (FINAL["gpu"], FINAL["gpu2"]),
        lambda a, b: (b["samples_per_s"] / a["samples_per_s"] - 1,),
        "The two `gpu` runs differ by {:.1%} over the whole run",
    ),
    Figure(
        (BENCHMARKS,),
        "the first run built its compiled graphs (109 s; the later runs found them in the cache), and its first "
        "window, which holds the build, ran at 58 samples/s",
        FINAL["gpu"],
        lambda g: (g["compile"]["first_step_s"], _metrics(FINAL["gpu"])[0]["images_per_s"]),
        "the first run built its compiled graphs ({:.0f} s; the later runs found them in the cache), and its first "
        "window, which holds the build, ran at {:.0f} samples/s",
    ),
    Figure(
        (BENCHMARKS,),
        "1.0–1.3 s to open (manifest, index) and 0.64–0.91 s to the first batch",
        CELLS["final"],
        lambda *c: (
            min(x["open_s"] for x in c),
            max(x["open_s"] for x in c),
            min(x["epochs"][0]["first_batch_s"] for x in c),
            max(x["epochs"][0]["first_batch_s"] for x in c),
        ),
        "{:.1f}–{:.1f} s to open (manifest, index) and {:.2f}–{:.2f} s to the first batch",
    ),
    *(
        Figure(
            (BENCHMARKS,),
            head + text,
            (EP[c, g], EP[c, sd]),
            _epoch_row(EP[c, sd]),
            head
            + ("{:,.0f} / {:,.0f} | " + ("**{:.1%}**" if "**" in text else "{:.1%}"))
            + " | {:.1%} | {:.0f} ms | {:.1%} / {:.1%} |",
        )
        for (c, g, sd, head), text in zip(EPOCH_ROWS, EPOCH_TEXT, strict=True)
    ),
    Figure(
        (BENCHMARKS,),
        "its window lost 6–11% where the boundary's had",
        (EP["2_stop_in_thread", "sd"], EP["3_fork_server", "sd"]),
        lambda *_: tuple(
            f(100 * _boundaries(EP[c, "sd"])[1] for c in ("2_stop_in_thread", "3_fork_server")) for f in (min, max)
        ),
        "its window lost {:.0f}–{:.0f}% where the boundary's had",
    ),
    Figure(
        (BENCHMARKS,),
        "the first 100 steps (the cold epoch's start, 5.5% against the `gpu` loader's 4.5%)",
        (PERSIST["r1sd"], PERSIST["r1gpu"]),
        lambda *_: tuple(
            next(r["starvation"] for r in _metrics(PERSIST[t]) if r["step"] == 100) for t in ("r1sd", "r1gpu")
        ),
        "the first 100 steps (the cold epoch's start, {:.1%} against the `gpu` loader's {:.1%})",
    ),
    Figure(
        (BENCHMARKS,),
        "(the stream loader's host wait per step is 0.65 ms against 0.04 ms)",
        (PERSIST["r1sd"], PERSIST["r1gpu"]),
        lambda r, g: (r["starvation"]["wait_median_ms"], g["starvation"]["wait_median_ms"]),
        "(the stream loader's host wait per step is {:.2f} ms against {:.2f} ms)",
    ),
    Figure(
        (BENCHMARKS,),
        "`gpu` 13,326 and `stream` 13,074 samples/s, **98.1%**. The printed starvation (3.5%, the time both GPUs "
        "waited for some rank's batch) accounts for the 1.9% lost against the `gpu` loader's 1.1%",
        (PERSIST["r2gpu"], PERSIST["r2sd"]),
        lambda g, r: (
            g["samples_per_s"],
            r["samples_per_s"],
            r["samples_per_s"] / g["samples_per_s"],
            r["starvation"]["starvation"],
            1 - r["samples_per_s"] / g["samples_per_s"],
            g["starvation"]["starvation"],
        ),
        "`gpu` {:,.0f} and `stream` {:,.0f} samples/s, **{:.1%}**. The printed starvation ({:.1%}, the time both GPUs "
        "waited for some rank's batch) accounts for the {:.1%} lost against the `gpu` loader's {:.1%}",
    ),
    Figure(
        (BENCHMARKS,),
        "`gpu` 2,673 and `stream` 2,633 samples/s, 98.5%, the first epoch's boundary window starved 12.2%",
        DIT_EP,
        lambda g, r: (
            g["samples_per_s"],
            r["samples_per_s"],
            r["samples_per_s"] / g["samples_per_s"],
            _boundaries(DIT_EP[1], 16384 // 128)[0],
        ),
        "`gpu` {:,.0f} and `stream` {:,.0f} samples/s, {:.1%}, the first epoch's boundary window starved {:.1%}",
    ),
    Figure(
        (BENCHMARKS,),
        "0.47–0.77 s in training (`first_batch_s` in each `summary.json`), and 1.16–1.29 s for the loader alone",
        EP_STREAM + ALONE,
        lambda *r: (
            min(x["first_batch_s"] for x in r[: len(EP_STREAM)]),
            max(x["first_batch_s"] for x in r[: len(EP_STREAM)]),
            min(x["epochs"][0]["first_batch_s"] for x in r[len(EP_STREAM) :]),
            max(x["epochs"][0]["first_batch_s"] for x in r[len(EP_STREAM) :]),
        ),
        "{:.2f}–{:.2f} s in training (`first_batch_s` in each `summary.json`), and {:.2f}–{:.2f} s for the loader "
        "alone",
    ),
    Figure(
        (BENCHMARKS,),
        "14,564 / 27,044, 19,803 / 36,762, 22,106 / 45,901, 20,031 / 46,232. 1 to 8 workers is 1.4× cold and 1.7× warm",
        ALONE,
        lambda *c: (*_cold_warm(*c), *(c[3]["epochs"][e]["rate"] / c[0]["epochs"][e]["rate"] for e in (0, 1))),
        "{:,.0f} / {:,.0f}, {:,.0f} / {:,.0f}, {:,.0f} / {:,.0f}, {:,.0f} / {:,.0f}. 1 to 8 workers is {:.1f}× cold "
        "and {:.1f}× warm",
    ),
    Figure(
        (BENCHMARKS,),
        "14,564 images/s cold, 27,044 warm: 2.1× and 3.9× what one H200 eats",
        (ALONE[0], *ONE_GPU),
        lambda c, *g: (
            *_cold_warm(c),
            *(c["epochs"][e]["rate"] / statistics.median(x["samples_per_s"] for x in g) for e in (0, 1)),
        ),
        "{:,.0f} images/s cold, {:,.0f} warm: {:.1f}× and {:.1f}× what one H200 eats",
    ),
    Figure(
        (BENCHMARKS,),
        "98.8% of the `gpu` loader's rate over a 2-epoch run on one GPU and at 98.1% on two ranks of one host",
        tuple(PERSIST.values()),
        lambda g1, s1, g2, s2: (s1["samples_per_s"] / g1["samples_per_s"], s2["samples_per_s"] / g2["samples_per_s"]),
        "{:.1%} of the `gpu` loader's rate over a 2-epoch run on one GPU and at {:.1%} on two ranks of one host",
    ),
    Figure(
        (BENCHMARKS,),
        "The loader alone reads 38,942 CIFAR-10 images/s from the store and 73,096 from its cache with the default 4 "
        "workers, 12.7× and 24.9× what the same loader read before the fixes below (3,061 and 2,935), 5.5–10.4× what "
        "one H200 eats. Before them, more workers made it slower (4,912 images/s with 1 worker, 2,586 with 8, cold)",
        (CELLS["final"][2], CELLS["before"][2], FINAL["gpu2"], CELLS["before"][0], CELLS["before"][3]),
        lambda new, old, gpu, one, eight: (
            *_cold_warm(new),
            *(new["epochs"][e]["rate"] / old["epochs"][e]["rate"] for e in (0, 1)),
            *_cold_warm(old),
            *(new["epochs"][e]["rate"] / gpu["samples_per_s"] for e in (0, 1)),
            one["epochs"][0]["rate"],
            eight["epochs"][0]["rate"],
        ),
        "The loader alone reads {:,.0f} CIFAR-10 images/s from the store and {:,.0f} from its cache with the default "
        "4 workers, {:.1f}× and {:.1f}× what the same loader read before the fixes below ({:,.0f} and {:,.0f}), "
        "{:.1f}–{:.1f}× what one H200 eats. Before them, more workers made it slower ({:,.0f} images/s with 1 worker, "
        "{:,.0f} with 8, cold)",
    ),
    Figure(
        (BENCHMARKS,),
        "shards still fell from 30,861 images/s (1 worker) to 9,476 (8)",
        (CELLS["blocks"][0], CELLS["blocks"][3]),
        lambda one, eight: (one["epochs"][0]["rate"], eight["epochs"][0]["rate"]),
        "shards still fell from {:,.0f} images/s (1 worker) to {:,.0f} (8)",
    ),
    Figure(
        (BENCHMARKS,),
        "13,145 / 14,645 images/s with 1 thread, 12,065 / 12,860 with 16; before the fix, 2 MiB shards, 8 workers: "
        "21,897 / 32,002 and 22,622 / 31,961",
        tuple(
            PACE.format(f)
            for f in (
                "blocks/c16_w4_t1_call2.json",
                "blocks/c16_w4_call2.json",
                "before/c2_w8_t1.json",
                "before/c2_w8.json",
            )
        ),
        _cold_warm,
        "{:,.0f} / {:,.0f} images/s with 1 thread, {:,.0f} / {:,.0f} with 16; before the fix, 2 MiB shards, 8 workers: "
        "{:,.0f} / {:,.0f} and {:,.0f} / {:,.0f}",
    ),
    Figure(
        (BENCHMARKS,),
        "ran at 77–99% of one core while the workers waited (the monitor's medians in each cell's JSON), so more "
        "workers add little: 1 to 8 workers is 1.6× cold and 1.5× warm",
        CELLS["final"],
        lambda *c: (
            min(e["main_cpu"] for x in c[2:] for e in x["epochs"]),
            max(e["main_cpu"] for x in c[2:] for e in x["epochs"]),
            *(c[3]["epochs"][e]["rate"] / c[0]["epochs"][e]["rate"] for e in (0, 1)),
        ),
        "ran at {:.0f}–{:.0f}% of one core while the workers waited (the monitor's medians in each cell's JSON), so "
        "more workers add little: 1 to 8 workers is {:.1f}× cold and {:.1f}× warm",
    ),
    *(
        Figure((BENCHMARKS,), text, CELLS[k], _cold_warm, fmt)
        for (k, fmt), text in zip(WORKERS_ROWS, WORKERS_TEXT, strict=True)
    ),
    *(
        Figure(
            (BENCHMARKS,),
            text,
            (FINAL[run], FINAL[ref]) if ref else FINAL[run],
            _final_row(FINAL[run], ref),
            head + " {:.1%} | {:,.0f} / {:,.0f} | {:,.0f} / {:,.0f} |",
        )
        for run, ref, text, head in FINAL_ROWS
    ),
)
UNCHECKED = {
    BENCHMARKS: {
        "2–3%": "arithmetic on the boundary windows above: what their 14–18% costs over the run's 800 steps",
        "0.8×": "a bar (the share of linear scaling asked of the loader), not a measurement",
    },
}
