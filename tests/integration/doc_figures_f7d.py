"""The measured figures of docs/BENCHMARKS.md's finding 7 on 2 H100s and 2 H200s (DDP and the other ways of averaging
the gradients, the NCCL probe, the loaders under two ranks, the trace of `flat`), against their raw results."""

from __future__ import annotations

from doc_figures import BENCHMARKS, Figure, W, _logged, rate
from doc_figures_f7 import H100, H100_RAW, H200, H200_RAW, ms, n, run, st, tr, x
from doc_figures_f7b import H100_LOADER, PROBE2, _host, _of_lost

H200_RAWS = [
    f"{H200_RAW}call1/weak-{g}/{n(2, h)}.json"
    for g, h in (("ddp", ""), ("bucket100", "ddp-bucket100"), ("nosplit", "ddp-nosplit"), ("flat", "flat"))
]
FLAT_OPS = H200_RAW + "call2/traces/flat-np2/profile/rank{}/ops.md"


def _h100_loader(s: dict, raw: dict, name: str) -> tuple:
    """A 2-H100 loader row: of the same cores' data-free rate, of the unpinned one, some rank starved, the rank waited
    on and its share, that waiting of the lost rate (none where under 1% was lost), the worst rank's host late."""
    me = run(s, name)
    of_lost = (_of_lost(s, name),) if me["vs_data_free"] <= 0.99 else ()  # "–" where under 1% was lost
    cells = (
        me["vs_data_free"],
        me[W] / rate(s, n(2)),
        me["starvation_any"],
        me["waited_on_rank"],
        me["waited_on_share"],
    )
    return (*cells, *of_lost, st(raw)["host_behind_max"])


OWN = ("aten::_foreach_copy_", "aten::reshape")  # the old `flat`'s own host work


def _flat_ops(ops: str) -> tuple:
    """From a rank's per-op table: the concatenation's ms, then the device-to-device copies' count and ms."""
    cat = _logged(ops, r"CatArrayBatchedCopy.*?\| ([\d.]+) \|")
    copies = _logged(ops, r"`Memcpy DtoD \(Device -> Device\)` \| ([\d.]+) \| [\d.]+% \| (\d+) \|")
    return cat[0], copies[1], copies[0]


def _top(trace: dict, op: str) -> float:
    return dict(trace["host_top"])[op]


H100_ROWS = (  # the 2-H100 loader table: (run, the row as written)
    (
        H100_LOADER.format("gpu-wna-pinna", 4),
        "| `gpu`, 4 cores per rank | 92.1% | 91.8% | 0.60% | rank 1 (92%) | 8% | 38% |",
    ),
    (
        H100_LOADER.format("hdf5-w3-pinon", 4),
        "| `hdf5`, 3 workers, 4 cores per rank | 93.3% | 93.0% | 1.89% | rank 0 (97%) | 28% | 42% |",
    ),
    (
        H100_LOADER.format("torch-w3-pinon", 4),
        "| `torch` files, 3 workers, 4 cores per rank | 82.6% | 82.4% | 1.87% | rank 1 (58%) | 11% | 33% |",
    ),
    (
        H100_LOADER.format("gpu-wna-pinna", 2),
        "| `gpu`, 2 cores per rank | 114.5% | 99.3% | 0.01% | rank 0 (91%) | – | 0% |",
    ),
    (
        H100_LOADER.format("hdf5-w1-pinon", 2),
        "| `hdf5`, 1 worker, 2 cores per rank | 99.6% | 86.4% | 3.65% | rank 1 (75%) | – | 43% |",
    ),
    (
        H100_LOADER.format("torch-w1-pinon", 2),
        "| `torch` files, 1 worker, 2 cores per rank | 39.4% | 34.2% | 58.46% | rank 1 (75%) | 97% | 80% |",
    ),
)


def _h100_fmt(text: str) -> str:
    """The row's format: its name as written, then the cells' rounding ("–" where under 1% of the rate was lost)."""
    name = text.split(" | ")[0]
    lost = "–" if "| – |" in text else "{:.0%}"
    return name + f" | {{:.1%}} | {{:.1%}} | {{:.2%}} | rank {{}} ({{:.0%}}) | {lost} | {{:.0%}} |"


FIGURES = (
    # 2 H100s
    *(
        Figure((BENCHMARKS,), text, H100, value, fmt)
        for text, value, fmt in (
            (
                "| `ddpm_cifar10` b128/GPU, `ddp` | 6,387 | 11,394 (1.78×) |",
                lambda s: _host(s, n(), n(2)),
                "| `ddpm_cifar10` b128/GPU, `ddp` | {:,.0f} | {:,.0f} ({:.2f}×) |",
            ),
            *(
                (
                    f"| the same, `{h}` | (1 GPU's) | {row} |",
                    lambda s, h=h: _host(s, n(), n(2, h))[1:],
                    f"| the same, `{h}` | (1 GPU's) | {{:,.0f}} ({{:.2f}}×) |",
                )
                for h, row in (
                    ("ddp-bucket100", "11,815 (1.85×)"),
                    ("ddp-nosplit", "11,660 (1.83×)"),
                    ("flat", "10,659 (1.67×)"),
                )
            ),
            (
                "| `dit_b2` b256/GPU on 4×32×32 latents, `ddp` / `flat` | 2,589 | 4,843 (1.87×) / 4,995 (1.93×) |",
                lambda s: _host(s, n(bs=256, model="dit_b2"), *(n(2, h, bs=256, model="dit_b2") for h in ("", "flat"))),
                "| `dit_b2` b256/GPU on 4×32×32 latents, `ddp` / `flat` | {:,.0f} | {:,.0f} ({:.2f}×) / {:,.0f} "
                "({:.2f}×) |",
            ),
            (
                "| strong: `ddpm_cifar10` global batch 512 (512, then 256 per GPU) | 7,850 | 13,386 (1.71×) |",
                lambda s: _host(s, n(bs=512), n(2, bs=256)),
                "| strong: `ddpm_cifar10` global batch 512 (512, then 256 per GPU) | {:,.0f} | {:,.0f} ({:.2f}×) |",
            ),
        )
    ),
    *(
        Figure(
            (BENCHMARKS,),
            text,
            PROBE2,
            lambda p, k=k: (
                p["all_reduce"][k]["bytes"] / 1e6,
                p["all_reduce"][k]["ms"],
                p["all_reduce"][k]["busbw_gb_s"],
            ),
            text.split(" | ")[0] + " | {:.1f} | {:.3f} | {:.0f} |",
        )
        for k, text in enumerate(
            (
                "| 1 MB fp32 | 1.0 | 0.039 | 27 |",
                "| one 25 MB DDP bucket | 26.2 | 0.148 | 177 |",
                "| the whole `ddpm_cifar10` gradient, fp32 | 143.0 | 0.559 | 256 |",
                "| the same in bf16 | 71.5 | 0.313 | 228 |",
            )
        )
    ),
    Figure(
        (BENCHMARKS,),
        "| `flat`'s copies of 304 gradients into one buffer and back, host launch time included | | 1.165 | |",
        PROBE2,
        lambda p: (p["tensors"], p["flat_copies_ms"]),
        "| `flat`'s copies of {} gradients into one buffer and back, host launch time included | | {:.3f} | |",
    ),
    *(
        Figure(
            (BENCHMARKS,),
            text,
            (H100, f"{H100_RAW}loaders-cpus{name.split('-cpus')[1][0]}/{name}.json"),
            lambda s, r, name=name: _h100_loader(s, r, name),
            _h100_fmt(text),
        )
        for name, text in H100_ROWS
    ),
    Figure(
        (BENCHMARKS,),
        "(9,884 samples/s, host late on 25% of its steps)",
        f"{H100_RAW}loaders-cpus2/{H100_LOADER.format('datafree', 2)}.json",
        lambda r: (r["figures"][W], st(r)["host_behind_max"]),
        "({:,.0f} samples/s, host late on {:.0%} of its steps)",
    ),
    # 2 H200s
    *(
        Figure(
            (BENCHMARKS,),
            text,
            (H200, raw),
            lambda s, r, h=h: (*_host(s, n(), n(2, h))[(0 if h == "" else 1) :], st(r)["host_behind_max"]),
            fmt,
        )
        for h, raw, text, fmt in (
            (
                "",
                H200_RAWS[0],
                "| `ddpm_cifar10` b128/GPU, `ddp` | 6,962 | 10,349 (1.49×) | 40% |",
                "| `ddpm_cifar10` b128/GPU, `ddp` | {:,.0f} | {:,.0f} ({:.2f}×) | {:.0%} |",
            ),
            *(
                (
                    h,
                    raw,
                    f"| the same, `{h}` | (1 GPU's) | {row} |",
                    f"| the same, `{h}` | (1 GPU's) | {{:,.0f}} ({{:.2f}}×) | {{:.0%}} |",
                )
                for h, raw, row in (
                    ("ddp-bucket100", H200_RAWS[1], "11,421 (1.64×) | 38%"),
                    ("ddp-nosplit", H200_RAWS[2], "11,132 (1.60×) | 2%"),
                    ("flat", H200_RAWS[3], "12,569 (1.81×) | 0%"),
                )
            ),
        )
    ),
    Figure(
        (BENCHMARKS,),
        "| GPU span / busy / idle, ms | 29.8 / 27.9 / 1.9 | 30.5 / 19.2 / 11.2 |",
        H200,
        lambda s: tuple(t[k] for t in s["traces"] for k in ("span_ms", "busy_ms", "idle_ms")),
        "| GPU span / busy / idle, ms | {:.1f} / {:.1f} / {:.1f} | {:.1f} / {:.1f} / {:.1f} |",
    ),
    Figure(
        (BENCHMARKS,),
        "| NCCL all-reduce kernel, ms (all of it exposed) | 9.15 | 0.49 |",
        H200,
        lambda s: (
            *tr(s, "flat-np2", "nccl_ms"),
            "(all of it exposed)" if tr(s, "flat-np2", "nccl_ms") == tr(s, "flat-np2", "nccl_exposed_ms") else "",
        ),
        "| NCCL all-reduce kernel, ms {2} | {0:.2f} | {1:.2f} |",
    ),
    Figure(
        (BENCHMARKS,),
        "there DDP came out at 1.78× and `flat` last at 1.67×, here `flat` first at 1.81× and DDP last at 1.49×",
        (H100, H200),
        lambda a, b: (x(a, n(2), n())[1], x(a, n(2, "flat"), n())[1], x(b, n(2, "flat"), n())[1], x(b, n(2), n())[1]),
        "there DDP came out at {:.2f}× and `flat` last at {:.2f}×, here `flat` first at {:.2f}× and DDP last at "
        "{:.2f}×",
    ),
    Figure(
        (BENCHMARKS,),
        "(18.4 ms against 20.0 ms), the two DDP forms that cut the compiled step at the buckets (`ddp`, "
        "`ddp-bucket100`) left the host late on 38–40% of the worst rank's steps, while `flat` and `ddp-nosplit`, one "
        "graph each, kept the host ahead (0–2%)",
        (H200, H100, *H200_RAWS),
        lambda a, b, ddp, bucket, nosplit, flat: (
            ms(128, rate(a, n())),
            ms(128, rate(b, n())),
            100 * st(bucket)["host_behind_max"],
            st(ddp)["host_behind_max"],
            100 * st(flat)["host_behind_max"],
            st(nosplit)["host_behind_max"],
        ),
        "({:.1f} ms against {:.1f} ms), the two DDP forms that cut the compiled step at the buckets (`ddp`, "
        "`ddp-bucket100`) left the host late on {:.0f}–{:.0%} of the worst rank's steps, while `flat` and "
        "`ddp-nosplit`, one graph each, kept the host ahead ({:.0f}–{:.0%})",
    ),
    Figure(
        (BENCHMARKS,),
        "rank 0's all-reduce kernel waited 9.2 ms for rank 1, whose GPU sat idle 11.2 ms",
        H200,
        lambda s: (tr(s, "flat-np2", "nccl_exposed_ms")[0], tr(s, "flat-np2", "idle_ms")[1]),
        "rank 0's all-reduce kernel waited {:.1f} ms for rank 1, whose GPU sat idle {:.1f} ms",
    ),
    Figure(
        (BENCHMARKS,),
        "an all-reduce of 0.49 ms, the concatenation 0.27 ms, and 254 device-to-device copies of the averaged "
        "gradients back into place (0.29 ms)",
        (H200, FLAT_OPS.format(1)),
        lambda s, o: (tr(s, "flat-np2", "nccl_ms")[1], *_flat_ops(o)),
        "an all-reduce of {:.2f} ms, the concatenation {:.2f} ms, and {:.0f} device-to-device copies of the averaged "
        "gradients back into place ({:.2f} ms)",
    ),
    Figure(
        (BENCHMARKS,),
        "It ran the same operators in 11.6 ms a step on rank 0 and in 18.3 ms on rank 1, the rank that made the other "
        "wait: one rank's host was 1.6× slower at the same work. Of that time, the old `flat`'s own launches were "
        "about 40%: copying the averaged gradients back (`_foreach_copy_`, 3.0 and 4.4 ms: one copy per gradient, as "
        "the layouts differed) and reshaping 254 gradients for the concatenation (1.3 and 2.2 ms). The compiled "
        "graphs' replay took 2.3 and 3.4 ms, the optimizer 1.3 and 2.3 ms",
        H200,
        lambda s: (
            *(t["host_ms"] for t in s["traces"]),
            s["traces"][1]["host_ms"] / s["traces"][0]["host_ms"],
            # "about": the two ranks' share together, to the nearest tenth
            round(sum(_top(t, o) for t in s["traces"] for o in OWN) / sum(t["host_ms"] for t in s["traces"]), 1),
            *(
                _top(t, o)
                for o in (*OWN, "Torch-Compiled Region: 0/0", "Optimizer.step#Adam.step")
                for t in s["traces"]
            ),
        ),
        "It ran the same operators in {:.1f} ms a step on rank 0 and in {:.1f} ms on rank 1, the rank that made the "
        "other wait: one rank's host was {:.1f}× slower at the same work. Of that time, the old `flat`'s own launches "
        "were about {:.0%}: copying the averaged gradients back (`_foreach_copy_`, {:.1f} and {:.1f} ms: one copy per "
        "gradient, as the layouts differed) and reshaping 254 gradients for the concatenation ({:.1f} and {:.1f} ms). "
        "The compiled graphs' replay took {:.1f} and {:.1f} ms, the optimizer {:.1f} and {:.1f} ms",
    ),
)
UNCHECKED: dict[str, dict[str, str]] = {}  # every measured figure of this part is checked
