"""Finding 1 of docs/BENCHMARKS.md (its lines 18 to 130), the prose around the tables of its grids on today's code:
each figure against the results.csv or per-run JSON of its grid under bench/results."""

from __future__ import annotations

import statistics

from doc_figures import BENCHMARKS, F1M, F1M_FREE, F1P, RESULTS, Figure
from doc_figures_f1to4 import F1W4, _runs

F1W4_RUNS = tuple(sorted(f"f1_w4_h200/{p.name}" for p in (RESULTS / "f1_w4_h200").glob("*-r*.json")))
F1M_HDF5 = tuple(sorted(f"f1_more_h200/{p.name}" for p in (RESULTS / "f1_more_h200").glob("hdf5-w[08]-*.json")))
TORCH, HDF5 = ("torch", "4", "True"), ("hdf5", "4", "True")  # the 4-worker pinned cells


def _col(rows: list[dict], col: str, *config: str) -> list[float]:
    return [float(r[col]) for r in _runs(rows, *config)]


def _med(rows: list[dict], col: str, *config: str) -> float:
    return statistics.median(_col(rows, col, *config))


def _apart(xs: list[float]) -> float:
    """How far apart runs are: their range over the slowest."""
    return (max(xs) - min(xs)) / min(xs)


def _configs(rows: list[dict]) -> set[tuple]:
    return {(r["backend"], r["workers"], r["pin_memory"]) for r in rows if r["kind"] == "loader"}


def _slowest_torch(rows: list[dict]) -> dict:
    return min(_runs(rows, *TORCH), key=lambda r: float(r["vs_data_free"]))


def _hdf5_by_gpu(*runs: dict) -> tuple:
    """Finding 1's HDF5 runs at 0 then 8 workers, each in the order they ran, the first H200's before the second's."""
    first = min(runs, key=lambda r: r["run"]["when"])["run"]["hardware"]["gpu_uuid"]
    order = sorted(runs, key=lambda r: (r["run"]["hardware"]["gpu_uuid"] != first, r["run"]["when"]))
    return tuple(r for w in ("0", "8") for r in order if r["job"]["workers"] == int(w))


def _hdf5_0_and_8(*runs: dict) -> tuple:
    w0, w8 = _hdf5_by_gpu(*runs)[:3], _hdf5_by_gpu(*runs)[3:]
    slow = w0[2]["figures"]
    return (
        *(r["vs_data_free"] for r in w0),
        slow["starvation"]["starvation"],
        slow["starvation"]["host_behind"],
        slow["cpu_cores"],
        *(r["vs_data_free"] for r in w8),
    )


def _per_gpu_apart(*runs: dict) -> tuple:
    by: dict = {}
    for r in runs:
        by.setdefault(r["run"]["hardware"]["gpu_uuid"], []).append(r["figures"]["samples_per_s"])
    return max(_apart(xs) for xs in by.values()), _apart([x for xs in by.values() for x in xs])


FIGURES = (
    Figure(
        (BENCHMARKS,),
        "compiled model runs 7,038 samples/s with no input; DALI (100.4%), the resident `gpu` loader (100.0%), FFCV "
        "(99.5%) and the plain DataLoader over files (99.0%, one of its 3 runs at 94.0%) keep up with it; HDF5 does "
        "not (94.6%) while its starvation reads 0.2%",
        F1W4,
        lambda t: (
            _med(t, "samples_per_s"),
            *(_med(t, "vs_data_free", *c) for c in (("dali", "4", ""), ("gpu", "", ""), ("ffcv", "4", ""), TORCH)),
            min(_col(t, "vs_data_free", *TORCH)),
            _med(t, "vs_data_free", *HDF5),
            _med(t, "starvation", *HDF5),
        ),
        "compiled model runs {:,.0f} samples/s with no input; DALI ({:.1%}), the resident `gpu` loader ({:.1%}), FFCV "
        "({:.1%}) and the plain DataLoader over files ({:.1%}, one of its 3 runs at {:.1%}) keep up with it; HDF5 does "
        "not ({:.1%}) while its starvation reads {:.1%}",
    ),
    Figure(
        (BENCHMARKS,),
        "3 data-free runs (median 7,038 samples/s, 7,037–7,064)",
        F1W4,
        lambda t: (
            len(_col(t, "samples_per_s")),
            *(f(_col(t, "samples_per_s")) for f in (statistics.median, min, max)),
        ),
        "{} data-free runs (median {:,.0f} samples/s, {:,.0f}–{:,.0f})",
    ),
    Figure(
        (BENCHMARKS,),
        "**HDF5 lost 5–9% of the rate in every run, and starvation did not show it** (0.24–0.25%, the host behind on "
        "0.5% of the steps)",
        F1W4,
        lambda t: (
            100 * (1 - max(_col(t, "vs_data_free", *HDF5))),
            1 - min(_col(t, "vs_data_free", *HDF5)),
            100 * min(_col(t, "starvation", *HDF5)),
            max(_col(t, "starvation", *HDF5)),
            _med(t, "host_behind", *HDF5),
        ),
        "**HDF5 lost {:.0f}–{:.0%} of the rate in every run, and starvation did not show it** ({:.2f}–{:.2%}, the host "
        "behind on {:.1%} of the steps)",
    ),
    Figure(
        (BENCHMARKS,),
        "it takes 11–15 ms to enqueue a step of 18 ms, the median of each run",
        F1W4_RUNS,
        lambda *runs: (
            min(r["figures"]["starvation"]["enqueue_median_ms"] for r in runs),
            max(r["figures"]["starvation"]["enqueue_median_ms"] for r in runs),
            statistics.median(
                1000 * r["figures"]["starvation"]["wall_s"] / r["figures"]["starvation"]["steps"]
                for r in runs
                if r["job"]["backend"] is None
            ),
        ),
        "it takes {:.0f}–{:.0f} ms to enqueue a step of {:.0f} ms, the median of each run",
    ),
    Figure(  # what the verdict says now of that HDF5 cell, from its medians
        (BENCHMARKS,),
        '"yet 5% of the data-free rate is lost, 5% of it inside the steps, ... (NVML saw the GPU busy 92% of the '
        'time)"',
        F1W4,
        lambda t: (
            1 - _med(t, "vs_data_free", *HDF5),
            1 - _med(t, "vs_data_free", *HDF5) - _med(t, "starvation", *HDF5),
            _med(t, "nvml_gpu_util_pct", *HDF5),
        ),
        '"yet {:.0%} of the data-free rate is lost, {:.0%} of it inside the steps, ... (NVML saw the GPU busy {:.0f}% '
        'of the time)"',
    ),
    Figure(
        (BENCHMARKS,),
        "The torch baseline's three runs spread from 94.0% to 100.2%; its slow run waited for input (starvation 5.4%).",
        F1W4,
        lambda t: (
            min(_col(t, "vs_data_free", *TORCH)),
            max(_col(t, "vs_data_free", *TORCH)),
            float(_slowest_torch(t)["starvation"]),
        ),
        "The torch baseline's three runs spread from {:.1%} to {:.1%}; its slow run waited for input (starvation "
        "{:.1%}).",
    ),
    Figure(
        (BENCHMARKS,),
        "DALI above 100% is the run-to-run spread of the data-free rate (0.4%)",
        F1W4,
        lambda t: (_apart(_col(t, "samples_per_s")),),
        "DALI above 100% is the run-to-run spread of the data-free rate ({:.1%})",
    ),
    Figure(  # the pinned cells ran in the 4-worker grid, the unpinned ones in the next
        (BENCHMARKS,),
        "pin_memory off costs 9 points (DataLoader over files) and 12 points (HDF5) at 4 workers. HDF5 keeps up at 8 "
        "workers here (99.2%); at 0 workers it loses 7% again",
        (F1W4, F1M),
        lambda w4, more: (
            100 * (_med(w4, "vs_data_free", *TORCH) - _med(more, "vs_data_free", "torch", "4", "False")),
            100 * (_med(w4, "vs_data_free", *HDF5) - _med(more, "vs_data_free", "hdf5", "4", "False")),
            _med(more, "vs_data_free", "hdf5", "8", "True"),
            1 - _med(more, "vs_data_free", "hdf5", "0", "True"),
        ),
        "pin_memory off costs {:.0f} points (DataLoader over files) and {:.0f} points (HDF5) at 4 workers. HDF5 keeps "
        "up at 8 workers here ({:.1%}); at 0 workers it loses {:.0%} again",
    ),
    Figure(
        (BENCHMARKS,),
        "(22.2%, the GPU idle 76% of the time); with 8 workers it keeps up (99.7%)",
        F1M,
        lambda t: (
            _med(t, "vs_data_free", "torch", "0", "True"),
            _med(t, "starvation", "torch", "0", "True"),
            _med(t, "vs_data_free", "torch", "8", "True"),
        ),
        "({:.1%}, the GPU idle {:.0%} of the time); with 8 workers it keeps up ({:.1%})",
    ),
    Figure(
        (BENCHMARKS,),
        "starvation reads only 2.4–3.6%. The pinned 4-worker cells above (99.0% and 94.6%)",
        (F1M, F1W4),
        lambda more, w4: (
            100 * _med(more, "starvation", "torch", "4", "False"),
            _med(more, "starvation", "hdf5", "4", "False"),
            _med(w4, "vs_data_free", *TORCH),
            _med(w4, "vs_data_free", *HDF5),
        ),
        "starvation reads only {:.1f}–{:.1%}. The pinned 4-worker cells above ({:.1%} and {:.1%})",
    ),
    Figure(
        (BENCHMARKS,),
        "ran 93.4% and 94.9% on the first H200 and 64.3% on the second, where it waited for input (starvation 18.2%, "
        "the host behind on 96% of the steps), reading in the training process with 5.5 cores busy. At 8 workers its "
        "runs reached 93.4%, 99.8% (first H200) and 99.2% (second)",
        F1M_HDF5,
        _hdf5_0_and_8,
        "ran {:.1%} and {:.1%} on the first H200 and {:.1%} on the second, where it waited for input (starvation "
        "{:.1%}, the host behind on {:.0%} of the steps), reading in the training process with {:.1f} cores busy. At 8 "
        "workers its runs reached {:.1%}, {:.1%} (first H200) and {:.1%} (second)",
    ),
    Figure(
        (BENCHMARKS,),
        "by the widest of one GPU's data-free ranges (0.5%); the pick printed at the grid's end (`fastest.txt`) used "
        "the range across both GPUs (2.8%)",
        F1M_FREE,
        _per_gpu_apart,
        "by the widest of one GPU's data-free ranges ({:.1%}); the pick printed at the grid's end (`fastest.txt`) used "
        "the range across both GPUs ({:.1%})",
    ),
    Figure(
        (BENCHMARKS,),
        "Yes for HDF5: 89.5% against 100.5% pinned, 11 points. The DataLoader over files loses less (87.5% against "
        "92.0%), and on this H100 it did not keep up at 4 workers even pinned: its 3 runs spread from 84.3% to 97.6%.",
        F1P,
        lambda t: (
            _med(t, "vs_data_free", "hdf5", "4", "False"),
            _med(t, "vs_data_free", *HDF5),
            100 * (_med(t, "vs_data_free", *HDF5) - _med(t, "vs_data_free", "hdf5", "4", "False")),
            _med(t, "vs_data_free", "torch", "4", "False"),
            _med(t, "vs_data_free", *TORCH),
            len(_col(t, "vs_data_free", *TORCH)),
            min(_col(t, "vs_data_free", *TORCH)),
            max(_col(t, "vs_data_free", *TORCH)),
        ),
        "Yes for HDF5: {:.1%} against {:.1%} pinned, {:.0f} points. The DataLoader over files loses less ({:.1%} "
        "against {:.1%}), and on this H100 it did not keep up at 4 workers even pinned: its {} runs spread from {:.1%} "
        "to {:.1%}.",
    ),
    Figure(
        (BENCHMARKS,),
        "data-free 6,333 samples/s (6,299–6,342, 3 runs)",
        F1P,
        lambda t: (*(f(_col(t, "samples_per_s")) for f in (statistics.median, min, max)), len(_runs(t))),
        "data-free {:,.0f} samples/s ({:,.0f}–{:,.0f}, {} runs)",
    ),
    Figure(
        (BENCHMARKS,),
        "HDF5 pinned kept up here (100.5%) where it reached 94.6% on an H200",
        (F1P, F1W4),
        lambda pin, w4: (_med(pin, "vs_data_free", *HDF5), _med(w4, "vs_data_free", *HDF5)),
        "HDF5 pinned kept up here ({:.1%}) where it reached {:.1%} on an H200",
    ),
    Figure(
        (BENCHMARKS,),
        "(7.0% starvation, p95 wait 31 ms); on an H200 it reached 99.0%",
        (F1P, F1W4),
        lambda pin, w4: (
            _med(pin, "starvation", *TORCH),
            _med(pin, "wait_p95_ms", *TORCH),
            _med(w4, "vs_data_free", *TORCH),
        ),
        "({:.1%} starvation, p95 wait {:.0f} ms); on an H200 it reached {:.1%}",
    ),
)
UNCHECKED = {
    BENCHMARKS: {
        "4 ms": "arithmetic: the 18 ms step less the 11–15 ms it takes to enqueue, beside it",
        "16 ×": "a setting: the grid's axes, workers 0, 4, 8, 16 × pin_memory on/off",
    }
}
