"""Where each headline figure in README.md and docs/ comes from: the text as written (in every doc that repeats it),
the raw file under bench/results, the expression over it and the rounding (a format string). A figure that no longer
matches its raw result, or a doc that no longer says it the same way, fails tests/integration/test_doc_figures.py."""

from __future__ import annotations

import csv
import functools
import io
import json
import re
import statistics
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
README, BENCHMARKS, TRAINING = "README.md", "docs/BENCHMARKS.md", "docs/TRAINING.md"
F1 = "f1_cifar10_bs128/raw.tar.xz:results.csv"
F5 = "f5_watch/raw.tar.xz:diffusers-shipped/watch.json"
F6 = "f6_latent_h100/raw.tar.xz:m2_images/{}/results.csv"
F7_E, F7_C, F7_D = (f"{d}/summary.json" for d in ("f7_late_ema_4xh200", "f7_step_graph_4xh200", "f7_buckets_4xh100"))
VAE = "f7_late_ema_4xh200/raw.tar.xz:./gputest/convert_vae_{}gpus.json"
COLD = "cold_start_h100/raw.tar.xz:precompile/{}_first/cold_start.json"
F8 = "f8_stream_pace_h200/ahead/{}/train_{}/summary.json"
F8_4 = tuple(F8.format("3_download_lock_4xh200", t) for t in ("r4gpu", "r4sd", "r4sd2", "r4sd_100M", "r4sd_1G"))
F8_1 = (F8.format("2_one_client_4xh200", "r1gpu"), F8.format("2_one_client_4xh200", "r1sd"))
F8_D = (F8.format("4_latents_h200", "dgpu"), F8.format("4_latents_h200", "dsd"))


@dataclass(frozen=True)
class Figure:
    docs: tuple[str, ...]  # every doc that says it, in these words
    text: str  # as written, whitespace aside
    source: str | tuple[str, ...]  # under bench/results; "archive:member" inside an archive
    value: Callable[..., tuple]  # the figures, from the loaded source (one argument per source)
    fmt: str  # the rounding: fmt.format(*value) must give text


@functools.cache  # several hundred figures read the same few archives; no value function changes what it reads
def load(source: str) -> object:
    """A JSON or CSV result under bench/results, plain or a member of an archive (CSV as a list of rows)."""
    path, _, member = source.partition(":")
    if member:
        with tarfile.open(RESULTS / path) as tar:
            raw = tar.extractfile(member).read().decode()
    elif path.endswith(".xz"):  # a large text result kept compressed (a profile)
        import lzma

        raw = lzma.open(RESULTS / path, "rt").read()
    else:
        raw = (RESULTS / path).read_text()
    if source.endswith(".ms"):  # a command's wall time in milliseconds, as bench/studies/text_gpu.sh writes it
        return float(raw)
    if source.endswith(".span"):  # its start and end, and the manifest's time of writing (Unix seconds, a line each)
        return [float(x) for x in raw.split()]
    if source.endswith((".log", ".txt", ".md", ".txt.xz")):  # what a study or the bench printed as it ran
        return raw
    return list(csv.DictReader(io.StringIO(raw))) if source.endswith(".csv") else json.loads(raw)


def values(figure: Figure) -> tuple:
    sources = (figure.source,) if isinstance(figure.source, str) else figure.source
    return figure.value(*(load(s) for s in sources))


def med(rows: list[dict], col: str, **where: str) -> float:
    """The median of a CSV column over the rows whose fields equal `where`."""
    return statistics.median(float(r[col]) for r in rows if all(r[k] == v for k, v in where.items()))


def rate(summary: dict, name: str) -> float:
    """A run's samples/s in a scaling summary.json, by its name."""
    return next(r["samples_per_s"] for r in summary["runs"] if r["name"] == name)


DF, HDF5_8, TORCH_0 = (
    {"kind": "data_free"},
    {"backend": "hdf5", "workers": "8", "pin_memory": "True"},
    {"backend": "torch", "workers": "0", "pin_memory": "True"},
)
G = "datafree-{}bs128-ddpm_cifar10-cpusall-bf16-compiled-{}r{}"  # a step-graph or DDP data-free run of finding 7
GRAPH, DDP = "step-graph-", ""
C4 = "{}-np4-bs128-ddpm_cifar10-cpus4-bf16-compiled-step-graph-r0"  # finding 7's loaders at 4 cores a rank
DIT = "datafree-{}bs256-dit_b2-cpusall-bf16-compiled-{}r0"
F9_STUDY = tuple(f"f9_text_h100/study/text_cache_{e}.json" for e in ("clip", "t5"))
F9_GRID = tuple(  # the pinned grid on 2 cores: every local backend, then the stream loader from s3://
    f"f9_text_h200/grid_cpus2/{b}-bs256-dit_b2_text-cpus2-bf16-compiled-r{r}.json"
    for b in ("hdf5-w2-pinon", "stream-w2-pinon", "gpu-wna-pinna", "dali-w2-pinna", "torch-w2-pinon")
    for r in (0, 1)
) + ("f9_text_h200/grid_cpus2/ffcv-w2-pinna-bs256-dit_b2_text-cpus2-bf16-compiled-r0.json",)
F9_S3 = tuple(
    f"f9_text_h200/grids3_cpus2/stream-w2-pinon-bs256-dit_b2_text-cpus2-bf16-compiled-r{r}.json" for r in range(3)
)
F9_AGAIN = {  # the third grid on 2 cores, on today's code: each cell's runs
    c: tuple(
        sorted(
            f"f9_text_h200/grid_again_cpus2/{p.name}"
            for p in (RESULTS / "f9_text_h200/grid_again_cpus2").glob(f"{c}-*-r*.json")
        )
    )
    for c in ("dali-w2", "dali-w1", "hdf5-w2", "torch-w2")
}
F9_RATE = "f9_text_h200/rate/encoder_rates.json"
F9_RATE2 = "f9_text_4xh200/rate/encoder_rates.json"  # after the encoder's hash moved beside the encoding
ROW = "| {:,.0f} | {:,.0f} ({:.0%}) | {:,.0f} ({:.0%}) | {:,.0f} ({:.0%}) |"  # a writer-rate table's row after its name
F9_STARTS = "f9_epoch_starts_cpu2/epoch_starts.json"  # what an epoch start costs each loader alone, 2 cores
F9_RESIDENT = tuple(  # the resident loader again, once it drew each epoch's order on the host
    f"f9_text_h200/grid_resident_cpus2/gpu-wna-pinna-bs256-dit_b2_text-cpus2-bf16-compiled-r{r}.json" for r in range(3)
)
F1W = {  # finding 1 on today's code: each backend's fresh processes at 4 workers
    b: tuple(sorted(p.name for p in (RESULTS / "f1_w4_h200").glob(f"{b}-*.json")))
    for b in ("datafree", "dali", "gpu", "ffcv", "torch", "hdf5")
}
F1W = {b: tuple(f"f1_w4_h200/{n}" for n in names) for b, names in F1W.items()}
F1M = "f1_more_h200/results.csv"  # finding 1's 0 and 8 workers pinned, 4 unpinned, on today's code (two H200s)
F1M_FREE = tuple(sorted(f"f1_more_h200/{p.name}" for p in (RESULTS / "f1_more_h200").glob("datafree-*.json")))
F1M_ROWS = (  # its table: (name, backend, workers as in the CSV, as shown, pin, the row as written)
    ("torch (baseline)", "torch", "0", "0", "on", (1516, 1251, 1884, 0.222, 0.758)),
    ("torch (baseline)", "torch", "4", "4", "off", (6327, 6226, 6424, 0.902, 0.024)),
    ("torch (baseline)", "torch", "8", "8", "on", (6843, 6819, 6928, 0.997, 0.003)),
    ("hdf5", "hdf5", "0", "0", "on", (6391, 4507, 6493, 0.934, 0.008)),
    ("hdf5", "hdf5", "4", "4", "off", (5795, 5708, 6276, 0.826, 0.036)),
    ("hdf5", "hdf5", "8", "8", "on", (6831, 6391, 6956, 0.992, 0.002)),
    ("ffcv", "ffcv", "1", "1 (0 asked)", "–", (6793, 6787, 6943, 0.992, 0.002)),
    ("ffcv", "ffcv", "8", "8", "–", (6966, 6804, 6989, 0.994, 0.002)),
    ("dali", "dali", "1", "1 (0 asked)", "–", (7000, 6851, 7038, 1.001, 0.000)),
    ("dali", "dali", "8", "8", "–", (7000, 6873, 7011, 0.999, 0.000)),
)
NEWCOMER = "cpu_newcomer_2cores/run.log"  # the newcomer's CPU path on 2 cores, as it printed
F1W_SUMMARY = "f1_w4_h200/summary.json"
F1P = "f1_pin_h100/results.csv"  # finding 1 at 4 workers, pin_memory on and off, one H100
F9_MORE = {  # ffcv, resident and stream on today's code, one H100: each cell's runs
    c: tuple(
        sorted(
            f"f9_text_h100/grid_more_cpus2/{p.name}"
            for p in (RESULTS / "f9_text_h100/grid_more_cpus2").glob(f"{c}-*-r*.json")
        )
    )
    for c in ("ffcv-w2", "gpu-wna", "stream-w2")
}
F9_GRAPHS = tuple(
    f"f9_text_h100/{d}/encoder_rates.json" for d in ("rate_eager", "rate_graphs", "rate_graphs_copy_stream")
)
F9_CONVERT = {  # convert --vae / --text-encoder on 1 and 4 GPUs: (folder, what it converted)
    "vae": ("f9_convert_4xh200", "vae"),
    "vae_stages": ("f9_convert_4xh200_stages", "vae"),
    "t5": ("f9_convert_4xh200", "t5"),
    "t5_stages": ("f9_convert_4xh200_stages", "t5"),
    "listed": ("f9_text_4xh200/t5_listed", "t5"),
    "host_group": ("f9_text_4xh200/t5_host_group", "t5"),
    "raw_send": ("f9_text_4xh200/t5_raw_send", "t5"),
}
F9_CONVERT = {
    k: tuple(f"{d}/{w}_gpus{g}.{x}" for g in (1, 4) for x in ("manifest.json", "ms"))
    for k, (d, w) in F9_CONVERT.items()
}
F9_BS256 = tuple(f"f9_text_4xh200/t5_raw_send/t5_bs256_gpus{g}.{x}" for g in (1, 4) for x in ("manifest.json", "ms"))


def _shares(gpu: dict, *streams: dict) -> tuple:
    """Each stream run's samples/s over the same call's `gpu` run's."""
    return tuple(s["samples_per_s"] / gpu["samples_per_s"] for s in streams)


def _host_c(s: dict, how: str) -> tuple:
    one = max(rate(s, G.format("", how, r)) for r in (0, 1))  # against the faster of the two one-GPU processes
    two = [rate(s, G.format("np2-", how, r)) / one for r in (0, 1)]
    four = [rate(s, G.format("np4-", how, r)) / one for r in (0, 1)]
    return min(two), max(two), min(four), max(four)


def _fed(s: dict) -> tuple:
    fed = [rate(s, C4.format(name)) for name in ("gpu-wna-pinna", "hdf5-w3-pinon")]
    unpinned = [rate(s, G.format("np4-", GRAPH, r)) for r in (0, 1)]
    return min(fed) / rate(s, C4.format("datafree")), min(fed) / max(unpinned), min(fed) / min(unpinned)


def _cold(runs: list[dict], variant: str, kind: str, key: str) -> float:
    return statistics.median(r["compile"][key] for r in runs if r["variant"] == variant and r["kind"] == kind)


def _cold_all(*rounds: dict) -> tuple:
    runs = [r for part in rounds for r in part["runs"]]
    return tuple(_cold(runs, v, k, key) for v, k, key in COLD_CELLS)


COLD_CELLS = (
    ("before", "cold", "since_launch_s"),
    ("before", "warm", "since_launch_s"),
    ("before", "warm", "timed_since_launch_s"),
    ("after", "warm", "since_launch_s"),
    ("after", "warm", "timed_since_launch_s"),
)


def _e(s: dict) -> tuple:
    one = rate(s, G.format("", GRAPH, 0))
    return rate(s, G.format("np2-", GRAPH, 0)) / one, rate(s, G.format("np4-", GRAPH, 0)) / one


def _dit(s: dict) -> tuple:
    return tuple(rate(s, DIT.format("np4-", how)) / rate(s, DIT.format("", how)) for how in (GRAPH, DDP))


def _vae(two: dict, four: dict) -> tuple:
    return two["wall_ratio"], four["wall_ratio"], two["wall_s"], four["wall_s"], two["one_gpu_wall_s"]


def _median(runs: tuple, key: str) -> float:
    return statistics.median(r["figures"][key] if key == W else r[key] for r in runs)


def _f1w(*runs: dict) -> tuple:
    """dali, gpu, ffcv median shares; torch's median and range; hdf5's median and range (in F1W's order)."""
    by = {}
    for r in runs:
        by.setdefault(r["job"]["backend"], []).append(r["vs_data_free"])
    spread = [f(by[b]) for b in ("torch", "hdf5") for f in (statistics.median, min, max)]
    return (*(statistics.median(by[b]) for b in ("dali", "gpu", "ffcv")), *spread)


def _f9_grid(*runs: dict) -> tuple:
    """Each backend's median share of its grid's data-free rate; stream's from the local and the s3:// grids alike."""
    by = {}
    for r in runs:
        by.setdefault(r["job"]["backend"] + ("-s3" if r["job"]["data"].startswith("s3://") else ""), []).append(r)
    share = {b: statistics.median(r["vs_data_free"] for r in rs) for b, rs in by.items()}
    if round(share["stream"], 3) != round(share["stream-s3"], 3):
        raise ValueError(f"stream local {share['stream']:.3%} and from s3:// {share['stream-s3']:.3%} differ")
    return tuple(share[b] for b in ("hdf5", "stream", "ffcv", "gpu", "dali", "torch"))


def _f1m_row(rows: list[dict], backend: str, workers: str) -> tuple:
    """A loader's median rate and range, median share of the data-free rate and median starvation."""
    mine = [r for r in rows if r["backend"] == backend and r["workers"] == workers and r["kind"] == "loader"]
    rates = [float(r["samples_per_s"]) for r in mine]
    return (*_spread(rates), *(statistics.median(float(r[c]) for r in mine) for c in ("vs_data_free", "starvation")))


def _logged(log: str, pattern: str) -> tuple:
    """The numbers of the first line of a log matching `pattern` (its groups), as numbers."""
    match = re.search(pattern, log, re.M)
    return tuple(float(g.replace(",", "")) for g in match.groups())


def _config(summary: dict, backend: str) -> dict:
    return next(c for c in summary["scenarios"][0]["configurations"] if c["backend"] == backend)


def _pin_row(rows: list[dict], backend: str, pin: bool) -> tuple:
    """A 4-worker loader's median rate and range, median share, starvation, host behind and CPU cores, and runs."""
    mine = [r for r in rows if r["backend"] == backend and r["pin_memory"] == str(pin) and r["kind"] == "loader"]
    medians = (statistics.median(float(r[c]) for r in mine) for c in ("vs_data_free", "starvation", "host_behind"))
    cores = statistics.median(float(r["cpu_cores"]) for r in mine)
    return (*_spread([float(r["samples_per_s"]) for r in mine]), *medians, cores, len(mine))


GRID_ROW = "{:,.0f} ({:,.0f}–{:,.0f}) | {:.1%} | {:.1%} | {:.1f} | {:.1f} | {} |"  # a text grid's row after its name


def _grid_row(*runs: dict) -> tuple:
    """A grid cell's rate (median, range), share of the data-free rate, starvation, p95 wait, CPU cores and runs."""
    medians = (
        statistics.median(f(x) for x in runs)
        for f in (
            lambda x: x["vs_data_free"],
            lambda x: x["figures"]["starvation"]["starvation"],
            lambda x: x["figures"]["starvation"]["wait_p95_ms"],
            lambda x: x["figures"]["cpu_cores"],
        )
    )
    return (*_spread([x["figures"][W] for x in runs]), *medians, len(runs))


def _graphs_row(r: dict) -> tuple:
    return (
        r["run"]["commit"][:7],
        r["run"]["hardware"]["gpu_uuid"][:8],
        r["rows"][0]["repeats"],
        *_rate_row(r["rows"][0]),
    )


def _per_gpu_free(runs: tuple) -> tuple:
    """Each GPU's data-free median, range and run count, in the order the GPUs first ran."""
    by: dict = {}
    for r in sorted(runs, key=lambda r: r["run"]["when"]):
        by.setdefault(r["run"]["hardware"]["gpu_uuid"], []).append(r["figures"]["samples_per_s"])
    return tuple(x for v in by.values() for x in (*_spread(v), len(v)))


def _starts(record: dict, backend: str) -> dict:
    return next(r for r in record["rows"] if r["backend"] == backend)


def _torch_starts(record: dict) -> tuple:
    torch_row = _starts(record, "torch")
    return min(torch_row["first_ms"]), max(torch_row["first_ms"]), torch_row["rest_median_ms"]


def _both(xs: list[float]) -> tuple:
    """The median and the value every run rounds to (to 0.1%), NaN where they round apart."""
    same = len({f"{x:.1%}" for x in xs}) == 1
    return statistics.median(xs), xs[0] if same else float("nan")


def _spread(xs: list[float]) -> tuple:
    return statistics.median(xs), min(xs), max(xs)


def _rate_row(row: dict) -> tuple:
    m = row["median"]
    return (
        m["encoder_alone_per_s"],
        m["writer_no_files_per_s"],
        m["writer_no_files_of_alone"],
        m["writer_per_s /tmp"],
        m["writer_of_alone /tmp"],
        m["writer_per_s /dev/shm"],
        m["writer_of_alone /dev/shm"],
    )


def _row(study: dict) -> dict:
    return study["rows"][0]


ENCODE_STAGE = "text: encode the distinct captions"  # the caption writer's own clock, in --timings


def _stage(manifest: dict, name: str) -> float:
    return manifest["timings"]["stages"][name]["seconds"]


def _printed_stage(output: str, name: str = ENCODE_STAGE) -> float:
    """A stage's seconds in the --timings table a command printed."""
    return float(output.split(name)[1].split()[0])


PYSPY_HZ = 100  # the profiles' sampling rate: py-spy record --rate 100


def _convert_row(one: dict, one_ms: float, four: dict, four_ms: float) -> tuple:
    """(1 GPU s, 4 GPUs s, whole command ×, then the encoding: images/s 1 -> 4 and × for --vae, or the caption
    writer's seconds 1 -> 4 and ×)."""
    whole = (one_ms / 1000, four_ms / 1000, one_ms / four_ms)
    if "encoded_per_s" in one["timings"]:
        a, b = one["timings"]["encoded_per_s"], four["timings"]["encoded_per_s"]
        return (*whole, a, b, b / a)
    a, b = (_stage(m, ENCODE_STAGE) for m in (one, four))
    return (*whole, a, b, a / b)


def _fixed(*loaded) -> tuple:
    """The fixed costs over every convert row: import transformers, import diffusers, load the encoder, and the time
    outside the conversion's own clock on 1 and on 4 GPUs (min, max each)."""
    rows = [loaded[i : i + 4] for i in range(0, len(loaded), 4)]
    stages = [(m, name) for r in rows for m in r[0::2] for name in m["timings"]["stages"]]
    imports = {p: [_stage(m, n) for m, n in stages if n == f"import {p}"] for p in ("transformers", "diffusers")}
    load = [_stage(m, n) for m, n in stages if n == "load the text encoder"]
    outside = [[r[k + 1] / 1000 - r[k]["timings"]["wall_s"] for r in rows] for k in (0, 2)]
    return tuple(f(x) for x in (*imports.values(), load, *outside) for f in (min, max))


def _d(s: dict) -> tuple:
    one = rate(s, G.format("", GRAPH, 0))
    return rate(s, G.format("np2-", GRAPH, 0)) / one, rate(s, G.format("np4-", GRAPH, 0)) / one


W = "samples_per_s"
FIGURES = (
    Figure(
        (BENCHMARKS,),
        "**`train --loader fastest` takes hdf5 with 8 workers and pin_memory: 4,983 samples/s",
        F1,
        lambda t: (med(t, W, **HDF5_8),),
        "**`train --loader fastest` takes hdf5 with 8 workers and pin_memory: {:,.0f} samples/s",
    ),
    Figure(
        (README,),
        "7,038 samples/s with no input at all on an H200 (3 runs, 7,037–7,064)",
        F1W["datafree"],
        lambda *r: (_median(r, W), min(x["figures"][W] for x in r), max(x["figures"][W] for x in r)),
        "{:,.0f} samples/s with no input at all on an H200 (3 runs, {:,.0f}–{:,.0f})",
    ),
    Figure(
        (README,),
        "DALI (100.4%, 2 runs), the resident `gpu` loader (100.0%, 2 runs), FFCV (99.5%, 3 runs) and the plain "
        "DataLoader over files (99.0%, 3 runs: 94.0%–100.2%) keep up; HDF5 does not (94.6%, 3 runs: 91.5%–94.9%)",
        tuple(p for b in ("dali", "gpu", "ffcv", "torch", "hdf5") for p in F1W[b]),
        _f1w,
        "DALI ({:.1%}, 2 runs), the resident `gpu` loader ({:.1%}, 2 runs), FFCV ({:.1%}, 3 runs) and the plain "
        "DataLoader over files ({:.1%}, 3 runs: {:.1%}–{:.1%}) keep up; HDF5 does not ({:.1%}, 3 runs: {:.1%}–{:.1%})",
    ),
    Figure(
        (README,),
        "the tutorial DataLoader without workers reached 22.2% of today's model and 99.7% with 8 workers; HDF5 "
        "reached 93.4% (one run 64.3%) and 99.2% at 0 and 8 workers. With pin_memory off at 4 workers, the "
        "DataLoader over files reached 90.2% and HDF5 82.6%",
        F1M,
        lambda t: (
            *(_f1m_row(t, b, w)[3] for b, w in (("torch", "0"), ("torch", "8"), ("hdf5", "0"))),
            min(float(r["vs_data_free"]) for r in t if r["backend"] == "hdf5" and r["workers"] == "0"),
            *(_f1m_row(t, b, w)[3] for b, w in (("hdf5", "8"), ("torch", "4"), ("hdf5", "4"))),
        ),
        "the tutorial DataLoader without workers reached {:.1%} of today's model and {:.1%} with 8 workers; HDF5 "
        "reached {:.1%} (one run {:.1%}) and {:.1%} at 0 and 8 workers. With pin_memory off at 4 workers, the "
        "DataLoader over files reached {:.1%} and HDF5 {:.1%}",
    ),
    *(
        Figure(
            (BENCHMARKS,),
            f"| {name} | {shown} | {pin} | " + "{:,.0f} ({:,.0f}–{:,.0f}) | {:.1%} | {:.1%} |".format(*row),
            F1M,
            lambda t, b=b, w=w: _f1m_row(t, b, w),
            f"| {name} | {shown} | {pin} | " + "{:,.0f} ({:,.0f}–{:,.0f}) | {:.1%} | {:.1%} |",
        )
        for name, b, w, shown, pin, row in F1M_ROWS
    ),
    Figure(
        (BENCHMARKS,),
        "6,842 samples/s (6,825–6,858, 2 runs) on the first, 7,014 (7,011–7,017, 2 runs) on the second",
        F1M_FREE,
        lambda *r: _per_gpu_free(r),
        "{:,.0f} samples/s ({:,.0f}–{:,.0f}, {} runs) on the first, {:,.0f} ({:,.0f}–{:,.0f}, {} runs) on the second",
    ),
    Figure(
        (README,),
        "rate 998 samples/s (runs 942-1,054), 56.6% of its data-free rate (1,780)",
        F5,
        lambda w: (w[W], *w["samples_per_s_range"], w["vs_data_free"], w["data_free"][W]),
        "rate {:,.0f} samples/s (runs {:,.0f}-{:,.0f}), {:.1%} of its data-free rate ({:,.0f})",
    ),
    Figure(
        (README,),
        "starvation 39.3%, wait median 52.2 ms (p95 65.9)",
        F5,
        lambda w: (w["starvation"], w["wait_median_ms"], w["wait_p95_ms"]),
        "starvation {:.1%}, wait median {:.1f} ms (p95 {:.1f})",
    ),
    Figure(
        (BENCHMARKS,),
        "| 998 (942–1,054) | 56.6% (49.3–63.9%) | 39.3% |",
        F5,
        lambda w: (
            w[W],
            *w["samples_per_s_range"],
            w["vs_data_free"],
            *(100 * v for v in w["vs_data_free_range"]),
            w["starvation"],
        ),
        "| {:,.0f} ({:,.0f}–{:,.0f}) | {:.1%} ({:.1f}–{:.1f}%) | {:.1%} |",
    ),
    Figure(
        (README, BENCHMARKS),
        "1.97× its one-GPU rate on 2 GPUs and 3.78× on 4",
        F7_E,
        _e,
        "{:.2f}× its one-GPU rate on 2 GPUs and {:.2f}× on 4",
    ),
    Figure((README, BENCHMARKS), "3.78× on 4 (DDP: 3.66×)", F7_E, _dit, "{:.2f}× on 4 (DDP: {:.2f}×)"),
    Figure(
        (README, BENCHMARKS),
        "1.5% slower than the",
        F7_E,
        lambda s: (1 - rate(s, G.format("", GRAPH, 0)) / rate(s, G.format("", DDP, 0)),),
        "{:.1%} slower than the",
    ),
    Figure(
        (README, BENCHMARKS),
        "1.92× and 3.79–3.81×",
        F7_C,
        lambda s: _host_c(s, GRAPH)[1:],
        "{:.2f}× and {:.2f}–{:.2f}×",
    ),
    Figure(
        (README, BENCHMARKS),
        "1.36–1.45× and 2.03–3.01×",
        F7_C,
        lambda s: _host_c(s, DDP),
        "{:.2f}–{:.2f}× and {:.2f}–{:.2f}×",
    ),
    Figure((README, BENCHMARKS), "1.90× and 3.79×", F7_D, _d, "{:.2f}× and {:.2f}×"),
    Figure(
        (README,),
        "99.4% or more of the data-free rate at the same 4 cores a rank (98.6% or more of the unpinned",
        F7_C,
        lambda s: _fed(s)[:2],
        "{:.1%} or more of the data-free rate at the same 4 cores a rank ({:.1%} or more of the unpinned",
    ),
    Figure(
        (README,),
        "ran 0.98× as fast as on one GPU on 2 GPUs and 1.15× on 4 (37.8 and 32.1 s against 36.9 s",
        (VAE.format(2), VAE.format(4)),
        _vae,
        "ran {:.2f}× as fast as on one GPU on 2 GPUs and {:.2f}× on 4 ({:.1f} and {:.1f} s against {:.1f} s",
    ),
    Figure(
        (BENCHMARKS,),
        "37.8 and 32.1 s against one GPU's 36.9 s, 0.98× and 1.15× as fast",
        (VAE.format(2), VAE.format(4)),
        lambda a, b: (a["wall_s"], b["wall_s"], a["one_gpu_wall_s"], a["wall_ratio"], b["wall_ratio"]),
        "{:.1f} and {:.1f} s against one GPU's {:.1f} s, {:.2f}× and {:.2f}× as fast",
    ),
    Figure(
        (README, BENCHMARKS, "docs/LATENTS.md"),
        "3.07×",
        (F6.format("cached_cpus2"), F6.format("online_cpus2")),
        lambda c, o: (med(c, W, **DF) / med(o, W, **DF),),
        "{:.2f}×",
    ),
    Figure(
        (BENCHMARKS,),
        "runs 3.07× faster (2,637 against 859 images/s data-free, one run each)",
        (F6.format("cached_cpus2"), F6.format("online_cpus2")),
        lambda c, o: (med(c, W, **DF) / med(o, W, **DF), med(c, W, **DF), med(o, W, **DF)),
        "runs {:.2f}× faster ({:,.0f} against {:,.0f} images/s data-free, one run each)",
    ),
    Figure(
        (TRAINING,),
        "ends 101.6 s after launch on a fresh machine and 17.6 s with the compile cache, its first timed "
        "step at 20.1 s (medians of 2 and 4 runs; with `--compile-traced-program` 15.1 and 17.3 s",
        (COLD.format("after"), COLD.format("before")),
        _cold_all,
        "ends {:.1f} s after launch on a fresh machine and {:.1f} s with the compile cache, its first timed step at "
        "{:.1f} s (medians of 2 and 4 runs; with `--compile-traced-program` {:.1f} and {:.1f} s",
    ),
    Figure(
        (BENCHMARKS,),
        "| without the traced program, cold | 2 | 101.6 |",
        (COLD.format("after"), COLD.format("before")),
        lambda *r: _cold_all(*r)[:1],
        "| without the traced program, cold | 2 | {:.1f} |",
    ),
    Figure(
        (BENCHMARKS,),
        "| without the traced program, from the compile cache | 4 | 17.6 | 20.1 |",
        (COLD.format("after"), COLD.format("before")),
        lambda *r: _cold_all(*r)[1:3],
        "| without the traced program, from the compile cache | 4 | {:.1f} | {:.1f} |",
    ),
    Figure(
        (BENCHMARKS,),
        "| **with it, from the compile cache** | 4 | **15.1** | **17.3** |",
        (COLD.format("after"), COLD.format("before")),
        lambda *r: _cold_all(*r)[3:],
        "| **with it, from the compile cache** | 4 | **{:.1f}** | **{:.1f}** |",
    ),
    Figure(
        (README,),
        "at 99.7% of the resident `gpu` loader's rate on four ranks of a 4×H200 host (64 cores; two runs) and on "
        "one of its GPUs (one run), and `dit_b2` on cached latents at 99.8% on one H200 (one run)",
        F8_4[:3] + F8_1 + F8_D,
        lambda g, a, b, g1, s1, gd, sd: (min(_shares(g, a, b) + _shares(g1, s1)), *_shares(gd, sd)),
        "at {:.1%} of the resident `gpu` loader's rate on four ranks of a 4×H200 host (64 cores; two runs) and on one "
        "of its GPUs (one run), and `dit_b2` on cached latents at {:.1%} on one H200 (one run)",
    ),
    Figure(
        (BENCHMARKS,),
        "| 4 ranks | **26,616** | **99.7%** | 1 of 23 | 0.45 s |",
        F8_4[:2],
        lambda g, a: (a["samples_per_s"], *_shares(g, a), a["first_batch_s"]),
        "| 4 ranks | **{:,.0f}** | **{:.1%}** | 1 of 23 | {:.2f} s |",
    ),
    Figure(
        (BENCHMARKS,),
        "| | 4 ranks, link capped at 100 MB/s | 23,592 | 88.4% | 6 of 23 | 1.30 s |",
        (F8_4[0], F8_4[3]),
        lambda g, a: (a["samples_per_s"], *_shares(g, a), a["first_batch_s"]),
        "| | 4 ranks, link capped at 100 MB/s | {:,.0f} | {:.1%} | 6 of 23 | {:.2f} s |",
    ),
    Figure(
        (README,),
        "four ranks through a 100 MB/s link got 88.4% of the rate, through 1 GB/s 99.8%",
        (F8_4[0], F8_4[3], F8_4[4]),
        _shares,
        "four ranks through a 100 MB/s link got {:.1%} of the rate, through 1 GB/s {:.1%}",
    ),
    Figure(
        (README,),
        "1.39× faster with CLIP-L-sized captions cached than encoding them in the step, and 2.03× faster",
        F9_STUDY,
        lambda c, t: (_row(c)["speedup"], _row(t)["speedup"]),
        "{:.2f}× faster with CLIP-L-sized captions cached than encoding them in the step, and {:.2f}× faster",
    ),
    Figure(
        ("docs/TEXT.md",),
        "(1,599 against 1,152 and 1,597 against 785 samples/s, one run each)",
        F9_STUDY,
        lambda c, t: tuple(_row(r)[k] for r in (c, t) for k in ("cached_samples_per_s", "online_samples_per_s")),
        "({:,.0f} against {:,.0f} and {:,.0f} against {:,.0f} samples/s, one run each)",
    ),
    Figure(
        (README,),
        "A cached caption costs 47.9 KB or 129.2 KB",
        F9_STUDY,
        lambda c, t: tuple(_row(r)["bytes_per_sample"]["bf16_valid_only"] / 1000 for r in (c, t)),
        "A cached caption costs {:.1f} KB or {:.1f} KB",
    ),
    Figure(
        (BENCHMARKS,),
        "| T5-XL-sized | 1,597 | 785 | **2.03×** | 991,352 | 495,736 | 129,168 |",
        F9_STUDY[1],
        lambda t: (
            _row(t)["cached_samples_per_s"],
            _row(t)["online_samples_per_s"],
            _row(t)["speedup"],
            *_row(t)["bytes_per_sample"].values(),
        ),
        "| T5-XL-sized | {:,.0f} | {:,.0f} | **{:.2f}×** | {:,} | {:,} | {:,.0f} |",
    ),
    Figure(
        (README,),
        "fed it at 99.8% (hdf5), 99.7% (stream, local and from s3://) and 99.5% (ffcv, one run) of the data-free rate; "
        "DALI reached 98.7% and the plain DataLoader over files 92.2% (2 runs each unless said). The resident loader "
        "reached 99.0% there",
        F9_GRID + F9_S3,
        lambda *r: tuple(_f9_grid(*r)[k] for k in (0, 1, 2, 4, 5, 3)),
        "fed it at {:.1%} (hdf5), {:.1%} (stream, local and from s3://) and {:.1%} (ffcv, one run) of the data-free "
        "rate; DALI reached {:.1%} and the plain DataLoader over files {:.1%} (2 runs each unless said). The resident "
        "loader reached {:.1%} there",
    ),
    Figure(
        (README,),
        "DALI reached 99.8% (2 runs, both 99.8%; 99.7% with one thread) and the DataLoader over files 96.5% (3 "
        "runs: 93.7%–96.7%), hdf5 99.5%",
        F9_AGAIN["dali-w2"] + F9_AGAIN["dali-w1"] + F9_AGAIN["torch-w2"] + F9_AGAIN["hdf5-w2"],
        lambda *r: (
            *_both([x["vs_data_free"] for x in r[:2]]),
            statistics.median(x["vs_data_free"] for x in r[2:4]),
            *_spread([x["vs_data_free"] for x in r[4:7]]),
            statistics.median(x["vs_data_free"] for x in r[7:]),
        ),
        "DALI reached {:.1%} (2 runs, both {:.1%}; {:.1%} with one thread) and the DataLoader over files {:.1%} "
        "(3 runs: {:.1%}–{:.1%}), hdf5 {:.1%}",
    ),
    *(  # the third text grid (H200) and the other loaders on today's code (H100)
        Figure((BENCHMARKS,), f"| {name} | " + GRID_ROW.format(*row), runs, _grid_row, f"| {name} | " + GRID_ROW)
        for name, runs, row in (
            ("dali, 2 threads", F9_AGAIN["dali-w2"], (2241, 2240, 2242, 0.998, 0.004, 47.0, 1.7, 2)),
            ("dali, 1 thread", F9_AGAIN["dali-w1"], (2238, 2235, 2241, 0.997, 0.004, 40.2, 1.8, 2)),
            ("hdf5, 2 workers", F9_AGAIN["hdf5-w2"], (2233, 2233, 2234, 0.995, 0.005, 54.4, 1.0, 3)),
            ("torch (files), 2 workers", F9_AGAIN["torch-w2"], (2166, 2103, 2170, 0.965, 0.039, 228.5, 1.2, 3)),
            ("ffcv, 2 workers", F9_MORE["ffcv-w2"], (2036, 2035, 2038, 0.998, 0.004, 27.8, 0.9, 2)),
            ("gpu (resident)", F9_MORE["gpu-wna"], (2034, 2031, 2036, 0.996, 0.003, 17.3, 0.9, 2)),
            ("stream (local), 2 workers", F9_MORE["stream-w2"], (2033, 2032, 2034, 0.996, 0.005, 36.5, 1.0, 2)),
        )
    ),
    Figure(
        (BENCHMARKS,),
        "In a later grid on another H200 DALI reached 99.8%; the DataLoader, which starts its workers again at every "
        "epoch of 15 steps, 96.5%",
        F9_AGAIN["dali-w2"] + F9_AGAIN["torch-w2"],
        lambda *r: (
            statistics.median(x["vs_data_free"] for x in r[:2]),
            statistics.median(x["vs_data_free"] for x in r[2:]),
        ),
        "In a later grid on another H200 DALI reached {:.1%}; the DataLoader, which starts its workers again at every "
        "epoch of 15 steps, {:.1%}",
    ),
    Figure(
        (README,),
        "and 99.8% (3 runs: 99.7%–100.1%) in a later grid",
        F9_RESIDENT,
        lambda *r: _spread([x["vs_data_free"] for x in r]),
        "and {:.1%} (3 runs: {:.1%}–{:.1%}) in a later grid",
    ),
    Figure(
        (README,),
        "its first batch of an epoch took 189–225 ms against 18 ms for the others",
        F9_STARTS,
        lambda r: _torch_starts(r),
        "its first batch of an epoch took {:.0f}–{:.0f} ms against {:.0f} ms for the others",
    ),
    Figure(
        (BENCHMARKS,),
        "waited 189–225 ms for the DataLoader's first batch of each of 4 epochs, against 18 ms for the others; hdf5's "
        "persistent workers 44–88 ms after the first epoch; DALI's first batches 12–23 ms",
        F9_STARTS,
        lambda r: (
            *_torch_starts(r),
            min(_starts(r, "hdf5")["first_ms"][1:]),
            max(_starts(r, "hdf5")["first_ms"][1:]),
            min(_starts(r, "dali")["first_ms"]),
            max(_starts(r, "dali")["first_ms"]),
        ),
        "waited {:.0f}–{:.0f} ms for the DataLoader's first batch of each of 4 epochs, against {:.0f} ms for "
        "the others; "
        "hdf5's persistent workers {:.0f}–{:.0f} ms after the first epoch; DALI's first batches {:.0f}–{:.0f} ms",
    ),
    Figure(
        (BENCHMARKS,),
        "p95 242–289 ms (torch) and 61–176 ms (DALI) against medians of 38–63 and 27–33 ms",
        tuple(p for p in F9_GRID if "/torch-" in p) + tuple(p for p in F9_GRID if "/dali-" in p),
        lambda t0, t1, d0, d1: tuple(
            f(x["figures"]["starvation"][key] for x in runs)
            for key in ("wait_p95_ms", "wait_median_ms")
            for runs in ((t0, t1), (d0, d1))
            for f in (min, max)
        ),
        "p95 {:.0f}–{:.0f} ms (torch) and {:.0f}–{:.0f} ms (DALI) against medians of {:.0f}–{:.0f} and "
        "{:.0f}–{:.0f} ms",
    ),
    Figure(
        (BENCHMARKS,),
        "2,256 samples/s (2,254–2,262), **99.8%**",
        F9_RESIDENT,
        lambda *r: (*_spread([x["figures"][W] for x in r]), statistics.median(x["vs_data_free"] for x in r)),
        "{:,.0f} samples/s ({:,.0f}–{:,.0f}), **{:.1%}**",
    ),
    Figure(
        (BENCHMARKS,),
        "CLIP-L 5,085 alone, 4,041 with files on disk (79%); T5-XL 2,083 alone, 1,118 with files on disk (54%), 1,163 "
        "in memory (56%)",
        "f9_text_h200/rate_hash_found/encoder_rates.json",
        lambda r: (
            *(_rate_row(r["rows"][0])[k] for k in (0, 3, 4)),
            *(_rate_row(r["rows"][1])[k] for k in (0, 3, 4, 5, 6)),
        ),
        "CLIP-L {:,.0f} alone, {:,.0f} with files on disk ({:.0%}); T5-XL {:,.0f} alone, {:,.0f} with files on disk "
        "({:.0%}), {:,.0f} in memory ({:.0%})",
    ),
    Figure(
        (BENCHMARKS,),
        "| T5-XL-sized | 2,122 | 2,224 (105%) | 1,115 (53%) | 1,180 (56%) |",
        F9_RATE,
        lambda r: _rate_row(r["rows"][1]),
        "| T5-XL-sized | {:,.0f} | {:,.0f} ({:.0%}) | {:,.0f} ({:.0%}) | {:,.0f} ({:.0%}) |",
    ),
    *(
        Figure((BENCHMARKS,), text, F9_RATE2, lambda r, k=k: _rate_row(r["rows"][k]), fmt)
        for k, text, fmt in (
            (0, "| CLIP-L-sized | 4,315 | 4,262 (99%) | 4,037 (94%) | 4,246 (98%) |", "| CLIP-L-sized " + ROW),
            (1, "| T5-XL-sized | 1,714 | 1,796 (105%) | 1,795 (105%) | 1,796 (105%) |", "| T5-XL-sized " + ROW),
        )
    ),
    Figure(
        (BENCHMARKS,),
        "| CLIP-L-sized | 5,343 | 5,513 (103%) | 4,391 (82%) | 4,202 (79%) |",
        F9_RATE,
        lambda r: _rate_row(r["rows"][0]),
        "| CLIP-L-sized | {:,.0f} | {:,.0f} ({:.0%}) | {:,.0f} ({:.0%}) | {:,.0f} ({:.0%}) |",
    ),
    Figure(
        ("docs/TEXT.md",),
        "captions in 4.59 s against 10.46 s at the default 64",
        (F9_BS256[0], F9_CONVERT["raw_send"][0]),
        lambda big, small: (_stage(big, ENCODE_STAGE), _stage(small, ENCODE_STAGE)),
        "captions in {:.2f} s against {:.2f} s at the default 64",
    ),
    Figure(
        (BENCHMARKS,),
        "| 95f8ffd | 62.5 s | 38.5 s | **1.62×** | 254.5 → 969.1 images/s: **3.81×** |",
        F9_CONVERT["vae"],
        _convert_row,
        "| 95f8ffd | {:.1f} s | {:.1f} s | **{:.2f}×** | {:.1f} → {:.1f} images/s: **{:.2f}×** |",
    ),
    Figure(
        (BENCHMARKS,),
        "| e58b2cb | 74.9 s | 41.4 s | **1.81×** | 255.4 → 965.2 images/s: **3.78×** |",
        F9_CONVERT["vae_stages"],
        _convert_row,
        "| e58b2cb | {:.1f} s | {:.1f} s | **{:.2f}×** | {:.1f} → {:.1f} images/s: **{:.2f}×** |",
    ),
    Figure(
        (BENCHMARKS,),
        "| 95f8ffd | 35.7 s | 31.1 s | 1.15× | 8.80 → 4.87 s: 1.81× |",
        F9_CONVERT["t5"],
        _convert_row,
        "| 95f8ffd | {:.1f} s | {:.1f} s | {:.2f}× | {:.2f} → {:.2f} s: {:.2f}× |",
    ),
    Figure(
        (BENCHMARKS,),
        "| e58b2cb | 33.1 s | 33.6 s | 0.98× | 10.33 → 7.30 s: 1.41× |",
        F9_CONVERT["t5_stages"],
        _convert_row,
        "| e58b2cb | {:.1f} s | {:.1f} s | {:.2f}× | {:.2f} → {:.2f} s: {:.2f}× |",
    ),
    Figure(
        (BENCHMARKS,),
        "| d2aa63b | 34.7 s | 32.6 s | 1.07× | 10.57 → 6.76 s: 1.56× |",
        F9_CONVERT["listed"],
        _convert_row,
        "| d2aa63b | {:.1f} s | {:.1f} s | {:.2f}× | {:.2f} → {:.2f} s: {:.2f}× |",
    ),
    Figure(
        (BENCHMARKS,),
        "| c5e5ddd | 31.9 s | 32.2 s | 0.99× | 9.44 → 5.44 s: 1.73× |",
        F9_CONVERT["host_group"],
        _convert_row,
        "| c5e5ddd | {:.1f} s | {:.1f} s | {:.2f}× | {:.2f} → {:.2f} s: {:.2f}× |",
    ),
    Figure(
        (BENCHMARKS,),
        "| 76159db | 35.8 s | 34.2 s | 1.05× | 10.46 → 3.55 s: **2.95×** |",
        F9_CONVERT["raw_send"],
        _convert_row,
        "| 76159db | {:.1f} s | {:.1f} s | {:.2f}× | {:.2f} → {:.2f} s: **{:.2f}×** |",
    ),
    Figure(
        (BENCHMARKS,),
        "| 76159db | 26.3 s | 29.6 s | 0.89× | 4.59 → 2.12 s: 2.17× |",
        F9_BS256,
        _convert_row,
        "| 76159db | {:.1f} s | {:.1f} s | {:.2f}× | {:.2f} → {:.2f} s: {:.2f}× |",
    ),
    Figure(
        (BENCHMARKS,),
        "importing transformers (6.5–10.1 s) or diffusers (12.2–14.2 s, on hosts started minutes before), loading the "
        "encoder (1.5–2.8 s), and 6.9–8.5 s (1 GPU) or 13.2–14.8 s (4 GPUs) outside",
        tuple(f for k in ("vae_stages", "t5_stages", "listed", "host_group", "raw_send") for f in F9_CONVERT[k]),
        _fixed,
        "importing transformers ({:.1f}–{:.1f} s) or diffusers ({:.1f}–{:.1f} s, on hosts started minutes before), "
        "loading the encoder ({:.1f}–{:.1f} s), and {:.1f}–{:.1f} s (1 GPU) or {:.1f}–{:.1f} s (4 GPUs) outside",
    ),
    *(
        Figure(
            (BENCHMARKS,),
            f"| {name} | 4 | {'on' if pin else 'off'} | "
            + "{:,.0f} ({:,.0f}–{:,.0f}) | {:.1%} | {:.1%} | {:.0%} | {:.1f} | {} |".format(*row),
            F1P,
            lambda t, b=b, pin=pin: _pin_row(t, b, pin),
            f"| {name} | 4 | {'on' if pin else 'off'} | "
            + "{:,.0f} ({:,.0f}–{:,.0f}) | {:.1%} | {:.1%} | {:.0%} | {:.1f} | {} |",
        )
        for name, b, pin, row in (
            ("torch (baseline)", "torch", True, (5827, 5337, 6184, 0.920, 0.070, 0.15, 4.3, 3)),
            ("torch (baseline)", "torch", False, (5543, 5359, 5660, 0.875, 0.059, 1.0, 4.4, 3)),
            ("hdf5", "hdf5", True, (6366, 6299, 6388, 1.005, 0.002, 0.0, 1.2, 3)),
            ("hdf5", "hdf5", False, (5671, 5635, 5729, 0.895, 0.037, 1.0, 1.3, 3)),
        )
    ),
    Figure(
        (README,),
        "pin_memory off at 4 workers cost HDF5 11 points (89.5% against 100.5% pinned) and the DataLoader over files "
        "4.5 (87.5% against 92.0%",
        F1P,
        lambda t: (
            100 * (_pin_row(t, "hdf5", True)[3] - _pin_row(t, "hdf5", False)[3]),
            _pin_row(t, "hdf5", False)[3],
            _pin_row(t, "hdf5", True)[3],
            100 * (_pin_row(t, "torch", True)[3] - _pin_row(t, "torch", False)[3]),
            _pin_row(t, "torch", False)[3],
            _pin_row(t, "torch", True)[3],
        ),
        "pin_memory off at 4 workers cost HDF5 {:.0f} points ({:.1%} against {:.1%} pinned) and the DataLoader over "
        "files {:.1f} ({:.1%} against {:.1%}",
    ),
    Figure(
        (README,),
        "ffcv (99.8%), the resident loader (99.6%) and stream (99.6%)",
        F9_MORE["ffcv-w2"] + F9_MORE["gpu-wna"] + F9_MORE["stream-w2"],
        lambda *r: tuple(statistics.median(x["vs_data_free"] for x in r[k : k + 2]) for k in (0, 2, 4)),
        "ffcv ({:.1%}), the resident loader ({:.1%}) and stream ({:.1%})",
    ),
    *(
        Figure((BENCHMARKS,), f"| {name}, " + text, F9_GRAPHS[k], _graphs_row, f"| {name}, " + fmt)
        for k, name, text in (
            (0, "eager", "commit 8c1a005 | 154001c7 | 7 | 5,435 | 5,267 (97%) | 4,922 (91%) | 5,047 (93%) |"),
            (1, "CUDA graphs", "7ad519f | 265ff900 | 5 | 13,786 | 12,815 (93%) | 11,276 (82%) | 11,639 (84%) |"),
            (
                2,
                "graphs, copies on a stream of their own, 4 writes in flight",
                "74c5028 | d2d590c4 | 5 | 15,779 | 14,092 (89%) | 12,310 (78%) | 12,386 (78%) |",
            ),
        )
        for fmt in ((("commit " if k == 0 else "") + "{} | {} | {} " + ROW),)
    ),
    Figure(
        (BENCHMARKS,),
        "2.3× as many captions/s",
        F9_GRAPHS[:2],
        lambda e, g: (_rate_row(g["rows"][0])[3] / _rate_row(e["rows"][0])[3],),
        "{:.1f}× as many captions/s",
    ),
    Figure(
        (README,),
        "trained tiny for 24 steps on cpu in 14 s: 154 samples/s over 22 timed steps",
        NEWCOMER,
        lambda log: _logged(log, r"trained tiny for (\d+) steps on cpu in (\d+) s: (\d+) samples/s over (\d+) timed"),
        "trained tiny for {:.0f} steps on cpu in {:.0f} s: {:.0f} samples/s over {:.0f} timed steps",
    ),
    Figure(
        (README,),
        "the demo's 154 samples/s",
        NEWCOMER,
        lambda log: _logged(log, r"^trained: \d+ steps at (\d+) samples/s"),
        "the demo's {:.0f} samples/s",
    ),
    Figure(
        (README,),
        "data/mine/.gpufeed-bench (...): 167 samples/s",
        NEWCOMER,
        lambda log: _logged(log, r"^loader: gpu .*?: (\d+) samples/s"),
        "data/mine/.gpufeed-bench (...): {:.0f} samples/s",
    ),
    Figure(
        (README,),
        "(90 s without FFCV's and DALI's formats, measured on a 2-core pin of an idle host, "
        "`bench/results/cpu_newcomer_2cores/`; the bench's six runs in fresh processes are 70 s of it)",
        NEWCOMER,
        lambda log: (
            _logged(log, r"demo after set-up: (\d+) ms")[0] / 1000,
            _logged(log, r"rc=0 (\d+) ms: 0,1 python3 -m bench loaders")[0] / 1000,
        ),
        "({:.0f} s without FFCV's and DALI's formats, measured on a 2-core pin of an idle host, "
        "`bench/results/cpu_newcomer_2cores/`; the bench's six runs in fresh processes are {:.0f} s of it)",
    ),
    Figure(
        (README,),
        "train --loader fastest takes: dali, 4 workers: 7,066 samples/s (100% of the data-free rate: above it, so "
        "noise) at 0.04% starvation, 2.0 CPU cores busy",
        F1W_SUMMARY,
        lambda s: (
            _config(s, "dali")[W],
            _config(s, "dali")["vs_data_free"],
            _config(s, "dali")["starvation"],
            _config(s, "dali")["cpu_cores"],
        ),
        "train --loader fastest takes: dali, 4 workers: {:,.0f} samples/s ({:.0%} of the data-free rate: above it, so "
        "noise) at {:.2%} starvation, {:.1f} CPU cores busy",
    ),
    Figure(
        (README,),
        "slowest: hdf5, 4 workers, pin_memory on: not input-bound: GPU idle 0.2% of the time waiting for input, 95% of "
        "the data-free rate; in this grid backend -> dali, 4 workers helped most (+6% samples/s)",
        F1W_SUMMARY,
        lambda s: (
            _config(s, "hdf5")["starvation"],
            _config(s, "hdf5")["vs_data_free"],
            _config(s, "dali")[W] / _config(s, "hdf5")[W] - 1,
        ),
        "slowest: hdf5, 4 workers, pin_memory on: not input-bound: GPU idle {:.1%} of the time waiting for input, "
        "{:.0%} of the data-free rate; in this grid backend -> dali, 4 workers helped most (+{:.0%} samples/s)",
    ),
    Figure(
        (README, BENCHMARKS),
        "first batch comes 0.39–0.64 s after an empty cache opens",
        (F8_4[1], F8_4[2], F8_4[4], F8_1[1], F8_D[1]),
        lambda *runs: (min(r["first_batch_s"] for r in runs), max(r["first_batch_s"] for r in runs)),
        "first batch comes {:.2f}–{:.2f} s after an empty cache opens",
    ),
    Figure(
        ("docs/TEXT.md",),
        "trained 1.39× faster with CLIP-L-sized captions cached than with the encoder in the step, and 2.03× faster",
        F9_STUDY,
        lambda c, t: (_row(c)["speedup"], _row(t)["speedup"]),
        "trained {:.2f}× faster with CLIP-L-sized captions cached than with the encoder in the step, and {:.2f}× "
        "faster",
    ),
    Figure(
        ("docs/TEXT.md",),
        "costs 47.9 KB (CLIP-L) or 129.2 KB (T5-XL), against 240 KB and 991 KB padded in fp32",
        F9_STUDY,
        lambda c, t: (
            *(_row(r)["bytes_per_sample"]["bf16_valid_only"] / 1000 for r in (c, t)),
            *(_row(r)["bytes_per_sample"]["fp32_padded"] / 1000 for r in (c, t)),
        ),
        "costs {:.1f} KB (CLIP-L) or {:.1f} KB (T5-XL), against {:.0f} KB and {:.0f} KB padded in fp32",
    ),
)
UNCHECKED = {  # figures in the docs that no raw result holds, and why (tests/integration/test_doc_figures.py)
    README: {
        "25 GB": "the cache LitData asks for, not a measurement",
        "20.4 MB": "arithmetic: a rank's rate times a stored sample's 3,060 bytes, which no kept result records",
        "6,670 images/s": "that rate rounded to 3 digits for the same arithmetic",
    },
    "docs/TEXT.md": {"4.9 GB": "the size of a T5-XL-sized encoder's weights on disk, which no kept result records"},
}
