"""The measured figures of docs/BENCHMARKS.md's finding 7, its questions and answer and the step graph on hosts E and
C (weak scaling, the loaders at 4 cores a rank, convert --vae on 2 and 4 GPUs), each against its raw result under
bench/results; doc_figures_f7b.py to f74.py hold the rest of the finding and import the helpers here."""

from __future__ import annotations

import statistics

from doc_figures import BENCHMARKS, F7_C, F7_D, F7_E, VAE, Figure, W, rate

E_RAW, C_RAW, D_RAW = (
    f"{d}/raw.tar.xz:./" for d in ("f7_late_ema_4xh200", "f7_step_graph_4xh200", "f7_buckets_4xh100")
)
N = "datafree-{}bs{}-{}-cpus{}-bf16-compiled-{}r{}"  # a data-free run's name
SG = "step-graph"
AB_RAW = "f7_scaling_4xh200_hosts_ab/raw.tar.xz:./host-{}/{}.json"
H4, H4_RAW = "f7_scaling_4xh200/summary.json", "f7_scaling_4xh200/raw.tgz:./"  # the first 4-H200 host, DDP
HA, HB = (f"f7_scaling_4xh200_hosts_ab/summary-host-{h}.json" for h in "ab")
H100, H100_RAW = "f7_scaling_2xh100/summary.json", "f7_scaling_2xh100/raw.tar.xz:./"
H200, H200_RAW = "f7_scaling_2xh200/summary.json", "f7_scaling_2xh200/raw.tar.xz:./"


def n(np: int = 1, how: str = "", r: int = 0, bs: int = 128, model: str = "ddpm_cifar10", cpus: str = "all") -> str:
    return N.format(f"np{np}-" if np > 1 else "", bs, model, cpus, f"{how}-" if how else "", r)


def dit(np: int = 1, how: str = "") -> str:
    return n(np, how, bs=256, model="dit_b2")


def run(s: dict, name: str) -> dict:
    return next(r for r in s["runs"] if r["name"] == name)


def x(s: dict, name: str, one: str) -> tuple:
    """A run's rate and its ratio to a one-GPU run's."""
    return rate(s, name), rate(s, name) / rate(s, one)


def ms(batch: int, per_s: float) -> float:
    """A step's milliseconds at `per_s` samples/s, `batch` samples a step."""
    return 1000 * batch / per_s


def st(raw: dict) -> dict:
    return raw["figures"]["starvation"]


def tr(s: dict, name: str, key: str) -> list:
    """A traced run's figure, rank by rank."""
    return [t[key] for t in s["traces"] if t["run"] == name]


def _c_loader(s: dict, raw: dict, name: str, keep: tuple) -> tuple:
    """A host-C loader row's cells: rate, then of `keep`: 0 its share of the pinned data-free rate, 1 of the slower
    unpinned data-free run's, 2 starvation mean, 3 of any rank, 4 the rank waited on, 5 the worst rank's host late."""
    me = run(s, name)
    free = min(rate(s, n(4, SG, r)) for r in (0, 1))
    cells = (me["vs_data_free"], me[W] / free, me["starvation"], me["starvation_any"], me["waited_on_rank"])
    return me[W], *((*cells, st(raw)["host_behind_max"])[k] for k in keep)


def _c_table_row(s: dict, how: str) -> tuple:
    """A host-C weak-scaling row: each process's rate at 1 and 2 GPUs, their ratio to the faster one-GPU process,
    then at 4 GPUs and theirs (one figure where both round alike, else least and most)."""
    one = max(rate(s, n(how=how, r=r)) for r in (0, 1))

    def ratios(p: int) -> tuple:
        lo, hi = sorted(rate(s, n(p, how, r)) / one for r in (0, 1))
        return (lo,) if f"{lo:.2f}" == f"{hi:.2f}" else (lo, hi)

    rates = [rate(s, n(p, how, r)) for p in (1, 2, 4) for r in (0, 1)]
    return (*rates[:4], *ratios(2), *rates[4:], *ratios(4))


C_LOADER = "{}-np4-bs128-ddpm_cifar10-cpus4-bf16-compiled-step-graph-r0"
C_DDP = [f"{C_RAW}weak-ddp/{n(p, '', r)}.json" for p in (2, 4) for r in (0, 1)]  # host C's DDP runs on several GPUs
C_ROWS = (  # the host-C loader table: (run, the row as written, the row's format, its cells after the rate)
    (
        n(4, SG, cpus="4"),
        "| data-free, pinned to 4 cores per rank | 25,708 | – | 99.6% | – | 0% |",
        "| data-free, pinned to 4 cores per rank | {:,.0f} | – | {:.1%} | – | {:.0%} |",
        (1, 5),
    ),
    (
        C_LOADER.format("gpu-wna-pinna"),
        "| `gpu` | 25,721 | 100.1% | 99.7% | 0.10% / 0.10% | 0% |",
        "| `gpu` | {:,.0f} | {:.1%} | {:.1%} | {:.2%} / {:.2%} | {:.0%} |",
        (0, 1, 2, 3, 5),
    ),
    (
        C_LOADER.format("hdf5-w3-pinon"),
        "| `hdf5`, 3 workers | 25,557 | 99.4% | 99.0% | 0.36% / 0.79% | 1% |",
        "| `hdf5`, 3 workers | {:,.0f} | {:.1%} | {:.1%} | {:.2%} / {:.2%} | {:.0%} |",
        (0, 1, 2, 3, 5),
    ),
    (
        C_LOADER.format("torch-w3-pinon"),
        "| files baseline (`torch`), 3 workers | 7,017 | 27.3% | 27.2% | 54.4% / 72.7% (rank 3 made the others wait) "
        "| 34% |",
        "| files baseline (`torch`), 3 workers | {:,.0f} | {:.1%} | {:.1%} | {:.1%} / {:.1%} (rank {} made the others "
        "wait) | {:.0%} |",
        (0, 1, 2, 3, 4, 5),
    ),
)


def _c_graph_ddp_one(s: dict) -> tuple:
    """The one-GPU step graph's rates against DDP's on host C: how much slower (least, most)."""
    slower = [1 - rate(s, n(how=SG, r=g)) / rate(s, n(r=d)) for g in (0, 1) for d in (0, 1)]
    return min(slower), max(slower)


FIGURES = (
    # host E
    Figure(
        (BENCHMARKS,),
        "| `ddpm_cifar10` b128/GPU, `--grad-sync step-graph` | 6,978 | 13,715 (1.97×) | 26,368 (3.78×) |",
        F7_E,
        lambda s: (rate(s, n(how=SG)), *x(s, n(2, SG), n(how=SG)), *x(s, n(4, SG), n(how=SG))),
        "| `ddpm_cifar10` b128/GPU, `--grad-sync step-graph` | {:,.0f} | {:,.0f} ({:.2f}×) | {:,.0f} ({:.2f}×) |",
    ),
    Figure(
        (BENCHMARKS,),
        "| the same, one GPU with the CUDA graphs of torch.compile (`reduce-overhead`) | 7,085 | – | (3.72× of it) |",
        F7_E,
        lambda s: (rate(s, n()), x(s, n(4, SG), n())[1]),
        "| the same, one GPU with the CUDA graphs of torch.compile (`reduce-overhead`) | {:,.0f} | – | ({:.2f}× of "
        "it) |",
    ),
    Figure(
        (BENCHMARKS,),
        "| `dit_b2` b256/GPU on 4×32×32 latents, `step-graph` | 2,878 | – | 10,882 (3.78×) |",
        F7_E,
        lambda s: (rate(s, dit(how=SG)), *x(s, dit(4, SG), dit(how=SG))),
        "| `dit_b2` b256/GPU on 4×32×32 latents, `step-graph` | {:,.0f} | – | {:,.0f} ({:.2f}×) |",
    ),
    Figure(
        (BENCHMARKS,),
        "| the same, `ddp` | 2,889 | – | 10,568 (3.66×) |",
        F7_E,
        lambda s: (rate(s, dit()), *x(s, dit(4), dit())),
        "| the same, `ddp` | {:,.0f} | – | {:,.0f} ({:.2f}×) |",
    ),
    Figure(
        (BENCHMARKS,),
        "(`reduce-overhead`, 7,085 against 6,978 images/s), so against that, 4 GPUs make 3.72×",
        F7_E,
        lambda s: (rate(s, n()), rate(s, n(how=SG)), x(s, n(4, SG), n())[1]),
        "(`reduce-overhead`, {:,.0f} against {:,.0f} images/s), so against that, 4 GPUs make {:.2f}×",
    ),
    Figure(
        (BENCHMARKS,),
        "torch.compile's own CUDA graphs were 1.5–6% faster than the step graph",
        (F7_E, F7_C),
        lambda e, c: (
            100 * (rate(e, n()) / rate(e, n(how=SG)) - 1),
            100 * max(rate(c, n(r=d)) / rate(c, n(how=SG, r=g)) - 1 for g in (0, 1) for d in (0, 1)),
        ),
        "torch.compile's own CUDA graphs were {:.1f}–{:.0f}% faster than the step graph",
    ),
    Figure(
        (BENCHMARKS,),
        "The one-GPU gap to `reduce-overhead` was 4–6% on host C (6,693–6,809 against 7,104–7,119); on host E it is "
        "1.5%",
        (F7_C, F7_E),
        lambda c, e: (
            *(100 * v for v in _c_graph_ddp_one(c)),
            *sorted(rate(c, n(how=SG, r=r)) for r in (0, 1)),
            *sorted(rate(c, n(r=r)) for r in (0, 1)),
            1 - rate(e, n(how=SG)) / rate(e, n()),
        ),
        "The one-GPU gap to `reduce-overhead` was {:.0f}–{:.0f}% on host C ({:,.0f}–{:,.0f} against {:,.0f}–{:,.0f}); "
        "on host E it is {:.1%}",
    ),
    Figure(
        (BENCHMARKS,),
        "What is left on 4 GPUs is about 1.1 ms a step (19.4 ms against one GPU's 18.3 ms): the all-reduce of the "
        "whole 143 MB gradient, which nothing overlaps (0.75–0.92 ms in host D's traces)",
        (F7_E, F7_D, "f7_scaling_2xh100/raw.tar.xz:./nccl/probe-np2.json"),
        lambda e, d, probe: (
            ms(512, rate(e, n(4, SG))) - ms(128, rate(e, n(how=SG))),
            ms(512, rate(e, n(4, SG))),
            ms(128, rate(e, n(how=SG))),
            probe["all_reduce"][2]["bytes"] / 1e6,
            *(f(sorted(tr(d, "graph-np4", "nccl_ms"))[:3]) for f in (min, max)),  # the three ranks not waited for
        ),
        "What is left on 4 GPUs is about {:.1f} ms a step ({:.1f} ms against one GPU's {:.1f} ms): the all-reduce of "
        "the whole {:.0f} MB gradient, which nothing overlaps ({:.2f}–{:.2f} ms in host D's traces)",
    ),
    Figure(
        (BENCHMARKS,),
        "the whole command took 37.8 and 32.1 s against one GPU's 36.9 s, 0.98× and 1.15× as fast; its encoding alone "
        "ran 1.79× as fast on 2 and 2.70× on 4 (456.8 and 686.8 against 254.6 images/s)",
        (VAE.format(2), VAE.format(4)),
        lambda a, b: (
            a["wall_s"],
            b["wall_s"],
            a["one_gpu_wall_s"],
            a["wall_ratio"],
            b["wall_ratio"],
            a["pace_ratio"],
            b["pace_ratio"],
            a["encoded_per_s"],
            b["encoded_per_s"],
            a["one_gpu_encoded_per_s"],
        ),
        "the whole command took {:.1f} and {:.1f} s against one GPU's {:.1f} s, {:.2f}× and {:.2f}× as fast; its "
        "encoding alone ran {:.2f}× as fast on 2 and {:.2f}× on 4 ({:.1f} and {:.1f} against {:.1f} images/s)",
    ),
    Figure(
        (BENCHMARKS,),
        "the survivor was gone 4.3 s later and `torchrun` exited 1",
        E_RAW + "gputest/rank_kill_nccl.json",
        lambda k: (k["survivor_gone_s"], k["torchrun_exit"]),
        "the survivor was gone {:.1f} s later and `torchrun` exited {}",
    ),
    # host C
    Figure(
        (BENCHMARKS,),
        "`dit_b2` 3.80× (host C, one run)",
        F7_C,
        lambda s: (x(s, dit(4, SG), dit(how=SG))[1],),
        "`dit_b2` {:.2f}× (host C, one run)",
    ),
    Figure(
        (BENCHMARKS,),
        "its ranks' hosts were late on 20–49% of the steps, the step graph's on none",
        C_DDP,
        lambda *r: (100 * min(st(x)["host_behind_mean"] for x in r), max(st(x)["host_behind_mean"] for x in r)),
        "its ranks' hosts were late on {:.0f}–{:.0%} of the steps, the step graph's on none",
    ),
    Figure(
        (BENCHMARKS,),
        "With the step graph `gpu` (100.1%) and `hdf5` (99.4%) fed 4 ranks at 4 cores each (host C, one run each, "
        "against the data-free rate pinned to the same 4 cores a rank; 99.3–99.7% and 98.6–99.0% of the unpinned "
        "one's two fresh processes); the files baseline reached 27%",
        F7_C,
        lambda s: (
            run(s, C_LOADER.format("gpu-wna-pinna"))["vs_data_free"],
            run(s, C_LOADER.format("hdf5-w3-pinon"))["vs_data_free"],
            *(
                100 * f(rate(s, C_LOADER.format(b)) / rate(s, n(4, SG, r)) for r in (0, 1))
                for b in ("gpu-wna-pinna", "hdf5-w3-pinon")
                for f in (min, max)
            ),
            run(s, C_LOADER.format("torch-w3-pinon"))["vs_data_free"],
        ),
        "With the step graph `gpu` ({:.1%}) and `hdf5` ({:.1%}) fed 4 ranks at 4 cores each (host C, one run each, "
        "against the data-free rate pinned to the same 4 cores a rank; {:.1f}–{:.1f}% and {:.1f}–{:.1f}% of the "
        "unpinned one's two fresh processes); the files baseline reached {:.0%}",
    ),
    Figure(
        (BENCHMARKS,),
        "| `ddpm_cifar10` b128/GPU, `--grad-sync step-graph` | 6,693 / 6,809 | 13,054 / 13,058 (1.92×) | 25,915 / "
        "25,803 (3.79–3.81×) |",
        F7_C,
        lambda s: _c_table_row(s, SG),
        "| `ddpm_cifar10` b128/GPU, `--grad-sync step-graph` | {:,.0f} / {:,.0f} | {:,.0f} / {:,.0f} ({:.2f}×) | "
        "{:,.0f} / {:,.0f} ({:.2f}–{:.2f}×) |",
    ),
    Figure(
        (BENCHMARKS,),
        "| the same, `--grad-sync ddp` (CUDA graphs of torch.compile) | 7,119 / 7,104 | 10,318 / 9,667 (1.36–1.45×) | "
        "14,444 / 21,397 (2.03–3.01×) |",
        F7_C,
        lambda s: _c_table_row(s, ""),
        "| the same, `--grad-sync ddp` (CUDA graphs of torch.compile) | {:,.0f} / {:,.0f} | {:,.0f} / {:,.0f} "
        "({:.2f}–{:.2f}×) | {:,.0f} / {:,.0f} ({:.2f}–{:.2f}×) |",
    ),
    Figure(
        (BENCHMARKS,),
        "| `dit_b2` b256/GPU on 4×32×32 latents, `step-graph` (one run) | 2,807 | – | 10,674 (3.80×) |",
        F7_C,
        lambda s: (rate(s, dit(how=SG)), *x(s, dit(4, SG), dit(how=SG))),
        "| `dit_b2` b256/GPU on 4×32×32 latents, `step-graph` (one run) | {:,.0f} | – | {:,.0f} ({:.2f}×) |",
    ),
    Figure(
        (BENCHMARKS,),
        "| the same, `ddp` / `flat` (one run) | 2,836 | – | 10,445 (3.68×) / 10,785 (3.80×) |",
        F7_C,
        lambda s: (rate(s, dit()), *x(s, dit(4), dit()), *x(s, dit(4, "flat"), dit())),
        "| the same, `ddp` / `flat` (one run) | {:,.0f} | – | {:,.0f} ({:.2f}×) / {:,.0f} ({:.2f}×) |",
    ),
    *(
        Figure(
            (BENCHMARKS,),
            text,
            (F7_C, f"{C_RAW}loaders-cpus4/{name}.json"),
            lambda s, r, name=name, keep=keep: _c_loader(s, r, name, keep),
            fmt,
        )
        for name, text, fmt, keep in C_ROWS
    ),
    Figure(
        (BENCHMARKS,),
        "(4 GPUs: 14,444 then 21,397), while the step graph's moved by 0.4% (1.7% on one GPU)",
        F7_C,
        lambda s: (
            rate(s, n(4, "", 0)),
            rate(s, n(4, "", 1)),
            *(
                max(rate(s, n(p, SG, r)) for r in (0, 1)) / min(rate(s, n(p, SG, r)) for r in (0, 1)) - 1
                for p in (4, 1)
            ),
        ),
        "(4 GPUs: {:,.0f} then {:,.0f}), while the step graph's moved by {:.1%} ({:.1%} on one GPU)",
    ),
    Figure(
        (BENCHMARKS,),
        "a 4-rank step takes 19.8 ms against one GPU's 19.0 ms, about the 0.71 ms one all-reduce took alone on host A",
        (F7_C, AB_RAW.format("a", "nccl/probe-np4")),
        lambda s, probe: (
            ms(512, statistics.median(rate(s, n(4, SG, r)) for r in (0, 1))),
            ms(128, statistics.median(rate(s, n(how=SG, r=r)) for r in (0, 1))),
            probe["all_reduce"][2]["ms"],
        ),
        "a 4-rank step takes {:.1f} ms against one GPU's {:.1f} ms, about the {:.2f} ms one all-reduce took alone on "
        "host A",
    ),
    Figure(
        (BENCHMARKS,),
        "one-GPU step was about 1 ms slower",
        F7_C,
        lambda s: (
            ms(128, statistics.median(rate(s, n(how=SG, r=r)) for r in (0, 1)))
            - ms(128, statistics.median(rate(s, n(r=r)) for r in (0, 1))),
        ),
        "one-GPU step was about {:.0f} ms slower",
    ),
    Figure(
        (BENCHMARKS,),
        "the 2-GPU run's first step took 11 s; DDP's first 2- and 4-rank steps took 120 and 126 s",
        tuple(f"{C_RAW}weak-{g}/{n(p, h)}.json" for g, p, h in (("graph", 2, SG), ("ddp", 2, ""), ("ddp", 4, ""))),
        lambda *r: tuple(x["figures"]["compile"]["first_step_s"] for x in r),
        "the 2-GPU run's first step took {:.0f} s; DDP's first 2- and 4-rank steps took {:.0f} and {:.0f} s",
    ),
)
UNCHECKED = {  # figures of finding 7 that no raw result holds, and why
    BENCHMARKS: {
        "1.95×": "the goal asked of 2 GPUs (the question, and the bar DDP fell short of), not a measurement",
        "3.85×": "the goal asked of 4 GPUs (the question, and the bar DDP fell short of), not a measurement",
    }
}
