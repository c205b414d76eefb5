"""The measured figures of docs/BENCHMARKS.md's "What the model eats, and what each loader delivers alone": the
data-free step's modes and forms, the loss curves of both forms, the loaders' ceilings and the format choices."""

from __future__ import annotations

import math
import statistics

from doc_figures import BENCHMARKS, DF, F1, Figure

SPEED = "train_speed.json"
FORMS = tuple(f"train_speed_h100_faster_forms/raw.tar.xz:train_speed_{r}.json" for r in ("each", "three", "candidates"))
PREV = "bf16_cl_compile_cudagraphs"  # the previous forms, as each run of the faster forms named them
CURVE = "forms_loss_curve_h100/raw.tar.xz:curves.json"
LOADERS = ("loader_speed_w4.json", "loader_speed_w8.json", "loader_speed_gpu_bs128.json")
MODE = "{:,.0f} | {:.1f} | {:.1%} |"  # a mode's images/s, TFLOP/s and MFU
SPEED_ROWS = (  # the modes' table: (the row before its figures, the mode)
    ("| fp32 eager (TF32 matmuls; MFU of the {:.1f} TF32 peak) | ", "fp32_eager"),
    ("| bf16 eager (autocast) | ", "bf16_eager"),
    ("| bf16 + channels_last, eager | ", "bf16_channels_last"),
    ("| + torch.compile (plain Inductor kernels) | ", "bf16_cl_compile"),
    ("| + CUDA graphs (`reduce-overhead`), PyTorch's `nn.GroupNorm` | ", "bf16_cl_cudagraphs_torch_gn"),
    ("| + CUDA graphs, NCHW | ", "bf16_compile_cudagraphs"),
    (
        "| + CUDA graphs, the layout-keeping GroupNorm (what `train --compile` ran until the row below) | ",
        "bf16_cl_compile_cudagraphs",
    ),
    ("| the same, compiling the whole loss | ", "bf16_cl_loss_cudagraphs"),
)
SPEED_TEXT = (
    "2,149 | 80.2 | 16.2% |",
    "1,840 | 68.7 | 6.9% |",
    "1,508 | 56.3 | 5.7% |",
    "2,588 | 96.6 | 9.8% |",
    "4,407 | 164.5 | 16.6% |",
    "4,486 | 167.4 | 16.9% |",
    "5,049 | 188.5 | 19.1% |",
    "5,066 | 189.1 | 19.1% |",
)
FORM_ROWS = (  # the forms' table: (the row's end before its figures, the run, the mode, the row's figures as written)
    ("| previous forms | ", 0, PREV, "5,070 | – | 0.2984 |"),
    ("output as a per-channel scale and shift | ", 0, "bf16_cl_cudagraphs_gn_stats", "6,115 | +20.6% | 0.2982 |"),
    (
        "(cuDNN's backward copied the strided slice twice) | ",
        0,
        "bf16_cl_cudagraphs_cat_grad",
        "5,236 | +3.3% | 0.2981 |",
    ),
    ("| all three (another run: previous forms 5,064) | ", 1, "bf16_cl_cudagraphs_three", "6,456 | +27.5% | 0.2981 |"),
    (
        "(398 s of warm-up, so not the default; previous forms 5,072) | ",
        2,
        "bf16_cl_cudagraphs_fast",
        "6,549 | +29.1% | 0.2977 |",
    ),
)
WINDOWS = ("1-250", "751-1,000", "1,751-2,000", "2,751-3,000", "3,751-4,000")
LOADER_ROWS = (  # the ceilings' table: (the row's start, the backend, whether it ran at 4 workers, as written)
    (
        "| `torch` (baseline: PNG files, PIL + ToTensor + Normalize in DataLoader workers) | ",
        "torch",
        "5,871 | 9,346 |",
    ),
    ("| `hdf5` (per-sample integer reads in workers, uint8 to the GPU) | ", "hdf5", "76,085 | 90,715 |"),
    ("| `ffcv` (raw pixels, normalize and flip on the GPU) | ", "ffcv", "231,961 | 252,386 |"),
    ("| `dali` (webdataset shards of raw pixels, crop_mirror_normalize on the GPU) | ", "dali", "141,352 | 140,286 |"),
    (
        "| upstream FFCV CIFAR pipeline (flip, translate, cutout on CPU threads) | ",
        "upstream_ffcv",
        "37,149 | 35,772 |",
    ),
    ("| naive DALI (one `.npy` per sample) | ", "naive_dali_npy", "43,051 | 38,531 |"),
)


def _mode(speed: dict, mode: str) -> tuple:
    r = speed["results"][mode]
    return r["images_per_s"], r["tflops"], r["mfu"]


def _form(run: dict, mode: str) -> tuple:
    """A form's images/s, its gain over the previous forms of the same run, and its mean loss."""
    r = run["results"]
    return r[mode]["images_per_s"], r[mode]["images_per_s"] / r[PREV]["images_per_s"] - 1, r[mode]["mean_loss"]


def _window(curves: dict, steps: str) -> tuple:
    first = int(steps.split("-")[0].replace(",", ""))
    w = next(w for w in curves["comparison"]["windows"] if w["steps"][0] == first)
    return w["current"], w["previous"]


def _last_thousand(curves: dict) -> tuple:
    """The mean |difference| of the per-step losses over the last 1,000 steps, as a share of the loss and as is."""
    now, before = (curves["runs"][k]["losses"][-1000:] for k in ("current", "previous"))
    diff = statistics.mean(abs(a - b) for a, b in zip(now, before))
    exponent = math.floor(math.log10(diff))  # written as 9.5e-5
    return diff / statistics.mean(now), diff / 10**exponent, exponent, statistics.mean(now)


def _range(xs: list[float]) -> tuple:
    return min(xs), max(xs)


def _ratio(w4: dict, w8: dict, fast: str, slow: str) -> tuple:
    return tuple(sorted(s["results"][fast]["samples_per_s"] / s["results"][slow]["samples_per_s"] for s in (w4, w8)))


FIGURES = (
    *(
        Figure(
            (BENCHMARKS,),
            row.format(494.5) + text if k == 0 else row + text,
            SPEED,
            lambda s, mode=mode, k=k: ((s["results"][mode]["peak_tflops"],) if k == 0 else ()) + _mode(s, mode),
            row + MODE,
        )
        for k, ((row, mode), text) in enumerate(zip(SPEED_ROWS, SPEED_TEXT))
    ),
    Figure(
        (BENCHMARKS,),
        "5,064 for the previous forms in the same run) | **6,456** | **241.0** | **24.4%** |",
        FORMS[1],
        lambda r: (r["results"][PREV]["images_per_s"], *_mode(r, "bf16_cl_cudagraphs_three")),
        "{:,.0f} for the previous forms in the same run) | **{:,.0f}** | **{:.1f}** | **{:.1%}** |",
    ),
    Figure(
        (BENCHMARKS,),
        "37.3 GFLOP per training image (forward and backward, `torch.utils.flop_counter`); MFU against 989 TFLOP/s",
        SPEED,
        lambda s: (s["gflop_per_image"], s["peak_tflops_bf16"]),
        "{:.1f} GFLOP per training image (forward and backward, `torch.utils.flop_counter`); MFU against {:.0f} "
        "TFLOP/s",
    ),
    *(
        Figure(
            (BENCHMARKS,),
            row + text,
            FORMS[k],
            lambda r, mode=mode: _form(r, mode)[::2] if mode == PREV else _form(r, mode),
            row + ("{:,.0f} | – | {:.4f} |" if mode == PREV else "{:,.0f} | +{:.1%} | {:.4f} |"),
        )
        for row, k, mode, text in FORM_ROWS
    ),
    Figure(  # the row's gain that follows, +3.0% as written, is +2.9% in the raw result
        (BENCHMARKS,),
        "(its gradient a sum, not an atomic scatter-add into an NCHW tensor) | 5,220 |",
        FORMS[0],
        lambda r: _form(r, "bf16_cl_cudagraphs_upsample")[:1],
        "(its gradient a sum, not an atomic scatter-add into an NCHW tensor) | {:,.0f} |",
    ),
    Figure(
        (BENCHMARKS,),
        "all three + Inductor's coordinate-descent tuning (398 s of warm-up",
        FORMS[2],
        lambda r: (r["results"]["bf16_cl_cudagraphs_fast"]["warmup_s"],),
        "all three + Inductor's coordinate-descent tuning ({:.0f} s of warm-up",
    ),
    Figure(
        (BENCHMARKS,),
        "**6,247 samples/s with the faster forms against 5,004 with the previous ones (+24.8%)**",
        CURVE,
        lambda c: (
            c["runs"]["current"]["samples_per_s"],
            c["runs"]["previous"]["samples_per_s"],
            c["runs"]["current"]["samples_per_s"] / c["runs"]["previous"]["samples_per_s"] - 1,
        ),
        "**{:,.0f} samples/s with the faster forms against {:,.0f} with the previous ones (+{:.1%})**",
    ),
    Figure(
        (BENCHMARKS,),
        "0.3% over the last 1,000 (mean |difference| 9.5e-5 at a loss of 0.0325), and every 250-step mean agrees "
        "within 0.06 of its standard error",
        CURVE,
        lambda c: (*_last_thousand(c), c["comparison"]["max_abs_z"]),
        "{:.1%} over the last 1,000 (mean |difference| {:.1f}e{} at a loss of {:.4f}), and every 250-step mean agrees "
        "within {:.2f} of its standard error",
    ),
    *(
        Figure(
            (BENCHMARKS,), f"| {w} | {text} |", CURVE, lambda c, w=w: _window(c, w), f"| {w} | {{:.4f}} | {{:.4f}} |"
        )
        for w, text in zip(
            WINDOWS, ("0.5573 | 0.5573", "0.0521 | 0.0521", "0.0374 | 0.0374", "0.0345 | 0.0345", "0.0318 | 0.0318")
        )
    ),
    Figure(
        (BENCHMARKS,),
        "without them the compiled step is launch-bound (2,588 against 5,049)",
        SPEED,
        lambda s: (_mode(s, "bf16_cl_compile")[0], _mode(s, PREV)[0]),
        "without them the compiled step is launch-bound ({:,.0f} against {:,.0f})",
    ),
    Figure(
        (BENCHMARKS,),
        "channels_last (+15%)",
        SPEED,
        lambda s: (_mode(s, PREV)[0] / _mode(s, "bf16_cl_cudagraphs_torch_gn")[0] - 1,),
        "channels_last (+{:.0%})",
    ),
    Figure(
        (BENCHMARKS,),
        "the data-free rate is 4,970–5,012 (finding 1)",
        F1,
        lambda t: _range([float(r["samples_per_s"]) for r in t if r["kind"] == DF["kind"]]),
        "the data-free rate is {:,.0f}–{:,.0f} (finding 1)",
    ),
    *(
        Figure(
            (BENCHMARKS,),
            row + text,
            LOADERS[:2],
            lambda w4, w8, b=b: tuple(s["results"][b]["samples_per_s"] for s in (w4, w8)),
            row + "{:,.0f} | {:,.0f} |",
        )
        for row, b, text in LOADER_ROWS
    ),
    Figure(
        (BENCHMARKS,),
        "| `gpu` (dataset resident on the GPU; workers ignored) | – | 3,360,412 |",
        LOADERS[2],
        lambda s: (s["results"]["gpu"]["samples_per_s"],),
        "| `gpu` (dataset resident on the GPU; workers ignored) | – | {:,.0f} |",
    ),
    Figure(
        (BENCHMARKS,),
        "ffcv is 6–7× upstream FFCV's CIFAR pipeline (partly because it does less: only the flip DDPM needs, on the "
        "GPU), dali 3.3–3.6× the naive DALI pipeline, hdf5 10–13× the baseline",
        LOADERS[:2],
        lambda w4, w8: (
            *_ratio(w4, w8, "ffcv", "upstream_ffcv"),
            *_ratio(w4, w8, "dali", "naive_dali_npy"),
            *_ratio(w4, w8, "hdf5", "torch"),
        ),
        "ffcv is {:.0f}–{:.0f}× upstream FFCV's CIFAR pipeline (partly because it does less: only the flip DDPM needs, "
        "on the GPU), dali {:.1f}–{:.1f}× the naive DALI pipeline, hdf5 {:.0f}–{:.0f}× the baseline",
    ),
    Figure(
        (BENCHMARKS,),
        "per-sample integer reads from HDF5 run at 150,000–200,000 samples/s for 1–256 samples per chunk",
        "format_choices.json",
        lambda f: tuple(
            round(g(v for k, v in f["hdf5_samples_per_s_by_chunk"].items() if k.startswith("per_sample")), -4)
            for g in (min, max)
        ),
        "per-sample integer reads from HDF5 run at {:,.0f}–{:,.0f} samples/s for 1–256 samples per chunk",
    ),
    Figure(
        (BENCHMARKS,),
        "DALI reads webdataset shards of raw pixels at 168,706 samples/s, one `.npy` per sample at 57,320, one PNG per "
        "sample at 17,959",
        "format_choices.json",
        lambda f: tuple(f["dali_samples_per_s_by_layout"].values()),
        "DALI reads webdataset shards of raw pixels at {:,.0f} samples/s, one `.npy` per sample at {:,.0f}, one PNG "
        "per sample at {:,.0f}",
    ),
)
UNCHECKED = {
    BENCHMARKS: {
        "44×": "an example of the wording `bench loaders --model none` prints, from no kept run",
    },
}
