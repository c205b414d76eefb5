"""Finding 9 of docs/BENCHMARKS.md (caching caption embeddings), from its answer through the loader grids on 2 cores,
each against the raw result under bench/results it names; doc_figures_f9b.py checks the rest of it and the method."""

from __future__ import annotations

import math
import statistics

from doc_figures import (
    BENCHMARKS,
    F9_AGAIN,
    F9_CONVERT,
    F9_GRAPHS,
    F9_GRID,
    F9_MORE,
    F9_RATE,
    F9_RATE2,
    F9_RESIDENT,
    F9_S3,
    F9_STARTS,
    F9_STUDY,
    Figure,
    W,
    _convert_row,
    _f9_grid,
    _rate_row,
    _row,
    _spread,
    _starts,
)

RECOMPILING = tuple(f"f9_text_h100/study_1_recompiling/text_cache_{e}.json" for e in ("clip", "t5"))
RUN = "{}-bs256-dit_b2_text-cpus2-bf16-compiled-r{}.json"
FREE_GRID = tuple(f"f9_text_h200/grid_cpus2/{RUN.format('datafree', r)}" for r in (0, 1))
FREE_S3 = tuple(f"f9_text_h200/grids3_cpus2/{RUN.format('datafree', r)}" for r in range(3))
FREE_AGAIN = tuple(f"f9_text_h200/grid_again_cpus2/{RUN.format('datafree', r)}" for r in range(3))
FREE_MORE = tuple(f"f9_text_h100/grid_more_cpus2/{RUN.format('datafree', r)}" for r in (0, 1))
RESIDENT = "f9_text_h200/grid_resident_cpus2/"
RESIDENT_HDF5 = tuple(RESIDENT + RUN.format("hdf5-w2-pinon", r) for r in range(3))
RESIDENT_FREE = tuple(RESIDENT + RUN.format("datafree", r) for r in range(3))
# before the captions were padded into pinned memory (H100, commit 775c375): gpufeed's loaders, one run each
UNPINNED = tuple(
    f"f9_text_h100/grid_cpus2/{RUN.format(b, 0)}"
    for b in ("hdf5-w2-pinon", "stream-w2-pinon", "ffcv-w2-pinna", "gpu-wna-pinna")
)
ROW = "{:,.0f} ({:,.0f}–{:,.0f}) | {:.1%} | {:.1%} | {:.1f} | {} |"  # the 2-core grid's row after its name
STUDY_ROW = (
    "| {:,.0f} | {:,.0f} | **{:.2f}×** | {:,} | {:,} | {:,.0f} |"  # the cached-against-online row after its name
)
CACHED_BYTES = "{:,.0f} × {:.1f} KB = {:.1f} MB/s (CLIP-L) and {:,.0f} × {:.1f} KB = {:.0f} MB/s (T5-XL)"


def _grid(backend: str) -> tuple:
    return tuple(p for p in F9_GRID if f"/{backend}-" in p)


def _cell(*runs: dict) -> tuple:
    """A cell's rate (median, range), median share of the data-free rate, starvation and CPU cores, and its runs."""
    medians = (
        statistics.median(f(r) for r in runs)
        for f in (
            lambda r: r["vs_data_free"],
            lambda r: r["figures"]["starvation"]["starvation"],
            lambda r: r["figures"]["cpu_cores"],
        )
    )
    return (*_spread([r["figures"][W] for r in runs]), *medians, len(runs))


def _rates(*runs: dict) -> tuple:
    return _spread([r["figures"][W] for r in runs])


def _p95(*runs: dict) -> float:
    return statistics.median(r["figures"]["starvation"]["wait_p95_ms"] for r in runs)


def _shares(*runs: dict) -> list[float]:
    return [r["vs_data_free"] for r in runs]


def _study_row(study: dict) -> tuple:
    row = _row(study)
    sizes = row["bytes_per_sample"]
    padded = (sizes["fp32_padded"], sizes["16bit_padded"], sizes["bf16_valid_only"])
    return (row["cached_samples_per_s"], row["online_samples_per_s"], row["speedup"], *padded)


def _caption_bytes(*studies: dict, rate: str) -> tuple:
    """A rate from each study, the bytes of one cached caption (KB) and what that rate needs of a link (MB/s)."""
    rows = [_row(s) for s in studies]
    sizes = [r["bytes_per_sample"]["bf16_valid_only"] for r in rows]
    return tuple(x for r, b in zip(rows, sizes, strict=True) for x in (r[rate], b / 1e3, r[rate] * b / 1e6))


def _bandwidth(manifest: dict, *free: dict) -> tuple:
    """The local grid's data-free rate and the bytes a second it needs: latents as stored, plus a caption's share of
    the text files (tokens and pooled vectors) over the samples, from the conversion's manifest."""
    latents = math.prod(manifest["sample_shape"]) * 2  # float16
    text = sum(f["bytes"] for f in manifest["text"]["files"] if f["path"] in ("text/tokens.bin", "text/pooled.bin"))
    per_s = statistics.median(r["figures"][W] for r in free)
    return per_s, per_s * (latents + text / manifest["count"]) / 1e6


FIGURES = (
    Figure(
        (BENCHMARKS,),
        "trains 1.39× faster with CLIP-L-sized caption embeddings cached than with the encoder run in every step, and "
        "2.03× faster with a T5-XL-sized encoder (one run each)",
        F9_STUDY,
        lambda c, t: (_row(c)["speedup"], _row(t)["speedup"]),
        "trains {:.2f}× faster with CLIP-L-sized caption embeddings cached than with the encoder run in every step, "
        "and {:.2f}× faster with a T5-XL-sized encoder (one run each)",
    ),
    Figure(
        (BENCHMARKS,),
        "47.9 KB (CLIP-L) or 129.2 KB (T5-XL) stored as its valid tokens in bf16",
        F9_STUDY,
        lambda c, t: tuple(_row(r)["bytes_per_sample"]["bf16_valid_only"] / 1e3 for r in (c, t)),
        "{:.1f} KB (CLIP-L) or {:.1f} KB (T5-XL) stored as its valid tokens in bf16",
    ),
    Figure(
        (BENCHMARKS,),
        "hdf5 (99.8%), stream (99.7%, local and from a store on s3://), ffcv (99.5%, one run) and the resident loader "
        "(99.0%; 99.8% in a later grid, once it drew each epoch's order on the host) fed the cached model at 99% of "
        "its data-free rate or more; DALI (98.7%) and the plain DataLoader over files (92.2%) did not",
        F9_GRID + F9_S3 + F9_RESIDENT,
        lambda *r: (
            *_f9_grid(*r[: -len(F9_RESIDENT)])[:4],
            statistics.median(_shares(*r[-len(F9_RESIDENT) :])),
            *_f9_grid(*r[: -len(F9_RESIDENT)])[4:],
        ),
        "hdf5 ({:.1%}), stream ({:.1%}, local and from a store on s3://), ffcv ({:.1%}, one run) and the resident "
        "loader ({:.1%}; {:.1%} in a later grid, once it drew each epoch's order on the host) fed the cached model at "
        "99% of its data-free rate or more; DALI ({:.1%}) and the plain DataLoader over files ({:.1%}) did not",
    ),
    Figure(
        (BENCHMARKS,),
        "(CLIP-L 82%, T5-XL 53% of the encoder's rate in all)",
        F9_RATE,
        lambda r: tuple(_rate_row(row)[4] for row in r["rows"]),
        "(CLIP-L {:.0%}, T5-XL {:.0%} of the encoder's rate in all)",
    ),
    Figure(
        (BENCHMARKS,),
        "reached 105% (T5-XL) and 94% (CLIP-L; 98% with its files in memory) in a later run",
        F9_RATE2,
        lambda r: (_rate_row(r["rows"][1])[4], _rate_row(r["rows"][0])[4], _rate_row(r["rows"][0])[6]),
        "reached {:.0%} (T5-XL) and {:.0%} (CLIP-L; {:.0%} with its files in memory) in a later run",
    ),
    Figure(
        (BENCHMARKS,),
        "the writer wrote 2.3× as many captions/s to disk, but that is 82% of the encoder alone, which became 2.5× as "
        "fast",
        F9_GRAPHS[:2],
        lambda e, g: (
            _rate_row(g["rows"][0])[3] / _rate_row(e["rows"][0])[3],
            _rate_row(g["rows"][0])[4],
            _rate_row(g["rows"][0])[0] / _rate_row(e["rows"][0])[0],
        ),
        "the writer wrote {:.1f}× as many captions/s to disk, but that is {:.0%} of the encoder alone, which became "
        "{:.1f}× as fast",
    ),
    Figure(
        (BENCHMARKS,),
        "it encodes T5-XL's captions 2.95× as fast as on one (1.41× before)",
        (*F9_CONVERT["raw_send"], *F9_CONVERT["t5_stages"]),
        lambda *r: (_convert_row(*r[:4])[-1], _convert_row(*r[4:])[-1]),
        "it encodes T5-XL's captions {:.2f}× as fast as on one ({:.2f}× before)",
    ),
    # cached against online
    Figure(
        (BENCHMARKS,),
        "(30.1 valid CLIP tokens on average, 30.5 T5 tokens)",
        F9_STUDY,
        lambda c, t: (_row(c)["mean_valid_tokens"], _row(t)["mean_valid_tokens"]),
        "({:.1f} valid CLIP tokens on average, {:.1f} T5 tokens)",
    ),
    Figure(
        (BENCHMARKS,),
        "CLIP ViT-L/14's text tower (123.7 M parameters, 77 tokens) and T5 v1.1 XL's encoder (1.26 B, 120 tokens)",
        F9_STUDY,
        lambda c, t: (
            _row(c)["encoder_params"] / 1e6,
            _row(c)["max_tokens"],
            _row(t)["encoder_params"] / 1e9,
            _row(t)["max_tokens"],
        ),
        "CLIP ViT-L/14's text tower ({:.1f} M parameters, {} tokens) and T5 v1.1 XL's encoder ({:.2f} B, {} tokens)",
    ),
    Figure(
        (BENCHMARKS,),
        "| CLIP-L-sized | 1,599 | 1,152 | **1.39×** | 239,693 | 119,885 | 47,858 |",
        F9_STUDY[0],
        _study_row,
        "| CLIP-L-sized " + STUDY_ROW,
    ),
    Figure(
        (BENCHMARKS,),
        "1,599 × 47.9 KB = 76.5 MB/s (CLIP-L) and 1,597 × 129.2 KB = 206 MB/s (T5-XL)",
        F9_STUDY,
        lambda c, t: _caption_bytes(c, t, rate="cached_samples_per_s"),
        CACHED_BYTES,
    ),
    Figure(
        (BENCHMARKS,),
        "1,152 × 47.9 KB = 55 MB/s for CLIP-L, 785 × 129.2 KB = 101 MB/s for T5-XL",
        F9_STUDY,
        lambda c, t: _caption_bytes(c, t, rate="online_samples_per_s"),
        "{:,.0f} × {:.1f} KB = {:.0f} MB/s for CLIP-L, {:,.0f} × {:.1f} KB = {:.0f} MB/s for T5-XL",
    ),
    Figure(
        (BENCHMARKS,),
        "cached 0.22× and 0.31× as fast as online",
        RECOMPILING,
        lambda c, t: (_row(c)["speedup"], _row(t)["speedup"]),
        "cached {:.2f}× and {:.2f}× as fast as online",
    ),
    # every loader on cached latents and captions, 2 cores
    *(
        Figure((BENCHMARKS,), f"| {name} | " + ROW.format(*row), runs, _cell, f"| {name} | " + ROW)
        for name, runs, row in (
            ("hdf5, 2 workers", _grid("hdf5"), (2241, 2237, 2244, 0.998, 0.005, 1.0, 2)),
            ("stream from s3://, 2 workers", F9_S3, (2237, 2234, 2240, 0.997, 0.005, 1.0, 3)),
            ("stream (local), 2 workers", _grid("stream"), (2238, 2233, 2243, 0.997, 0.005, 1.0, 2)),
            ("gpu (resident)", _grid("gpu"), (2221, 2220, 2221, 0.990, 0.011, 0.9, 2)),
            ("dali, 2 threads", _grid("dali"), (2216, 2204, 2227, 0.987, 0.016, 1.7, 2)),
            ("torch (files), 2 workers", _grid("torch"), (2069, 2017, 2122, 0.922, 0.084, 1.4, 2)),
        )
    ),
    Figure(  # ffcv's second run failed to start (its JSON keeps the error), so one run and no range
        (BENCHMARKS,),
        "| ffcv, 2 workers | 2,234 | 99.5% | 0.5% | 0.9 | 1 |",
        _grid("ffcv"),
        lambda *r: (_cell(*r)[0], *_cell(*r)[3:]),
        "| ffcv, 2 workers | {:,.0f} | {:.1%} | {:.1%} | {:.1f} | {} |",
    ),
    Figure(
        (BENCHMARKS,),
        "Data-free: 2,244 samples/s (2,243–2,245, 2 runs) for the local grid, 2,243 (2,237–2,244, 3 runs) for the "
        "s3:// one",
        FREE_GRID + FREE_S3,
        lambda *r: (*_rates(*r[:2]), len(r[:2]), *_rates(*r[2:]), len(r[2:])),
        "Data-free: {:,.0f} samples/s ({:,.0f}–{:,.0f}, {} runs) for the local grid, {:,.0f} ({:,.0f}–{:,.0f}, {} "
        "runs) for the s3:// one",
    ),
    Figure(
        (BENCHMARKS,),
        "so 2,244 samples/s need 181 MB/s a GPU",
        ("f9_text_h200/grid_cpus2/manifest.json", *FREE_GRID),
        _bandwidth,
        "so {:,.0f} samples/s need {:.0f} MB/s a GPU",
    ),
    Figure(  # "every loader" here is gpufeed's four; the plain DataLoader of that grid reached 86–88%
        (BENCHMARKS,),
        "reached 96.7–97.2% with the training process waiting a whole step (117–118 ms) for each batch",
        UNPINNED,
        lambda *r: (
            100 * min(_shares(*r)),
            max(_shares(*r)),
            *(f(x["figures"]["starvation"]["wait_median_ms"] for x in r) for f in (min, max)),
        ),
        "reached {:.1f}–{:.1%} with the training process waiting a whole step ({:.0f}–{:.0f} ms) for each batch",
    ),
    Figure(  # the DataLoader's first batch of an epoch against its other batches, on the CPU machine
        (BENCHMARKS,),
        "**Each epoch start costs it about 0.2 s:**",
        F9_STARTS,
        lambda r: ((statistics.median(_starts(r, "torch")["first_ms"]) - _starts(r, "torch")["rest_median_ms"]) / 1e3,),
        "**Each epoch start costs it about {:.1f} s:**",
    ),
    Figure(
        (BENCHMARKS,),
        "data-free 2,260): 2,256 samples/s (2,254–2,262), **99.8%**, wait p95 11.6 ms; hdf5 in the same grid 99.7%",
        F9_RESIDENT + RESIDENT_HDF5 + RESIDENT_FREE,
        lambda *r: (
            _rates(*r[6:])[0],
            *_rates(*r[:3]),
            statistics.median(_shares(*r[:3])),
            _p95(*r[:3]),
            statistics.median(_shares(*r[3:6])),
        ),
        "data-free {:,.0f}): {:,.0f} samples/s ({:,.0f}–{:,.0f}), **{:.1%}**, wait p95 {:.1f} ms; hdf5 in the same "
        "grid {:.1%}",
    ),
    Figure(
        (BENCHMARKS,),
        "Its 99.0% above had a p95 wait of 202 ms",
        _grid("gpu"),
        lambda *r: (statistics.median(_shares(*r)), _p95(*r)),
        "Its {:.1%} above had a p95 wait of {:.0f} ms",
    ),
    Figure(
        (BENCHMARKS,),
        "data-free 2,245 samples/s, 2,243–2,245 over 3 runs",
        FREE_AGAIN,
        lambda *r: (*_rates(*r), len(r)),
        "data-free {:,.0f} samples/s, {:,.0f}–{:,.0f} over {} runs",
    ),
    Figure(
        (BENCHMARKS,),
        "does not (93.7–96.7%), its p95 wait the length of an epoch start",
        F9_AGAIN["torch-w2"],
        lambda *r: (100 * min(_shares(*r)), max(_shares(*r))),
        "does not ({:.1f}–{:.1%}), its p95 wait the length of an epoch start",
    ),
    Figure(
        (BENCHMARKS,),
        "data-free 2,041 samples/s, 2,039–2,044 over 2 runs",
        FREE_MORE,
        lambda *r: (*_rates(*r), len(r)),
        "data-free {:,.0f} samples/s, {:,.0f}–{:,.0f} over {} runs",
    ),
    Figure(  # the lowest of the gpufeed cells' medians in the third grid and on the H100, then the DataLoader's
        (BENCHMARKS,),
        "every gpufeed format kept this model at 99.5% of its data-free rate or more on today's code; the plain "
        "DataLoader over files, which starts its workers each epoch, at 96.5%",
        tuple(p for c in ("dali-w2", "dali-w1", "hdf5-w2") for p in F9_AGAIN[c])
        + tuple(p for c in ("ffcv-w2", "gpu-wna", "stream-w2") for p in F9_MORE[c])
        + F9_AGAIN["torch-w2"],
        lambda *r: (
            min(statistics.median(_shares(*r[a:b])) for a, b in ((0, 2), (2, 4), (4, 7), (7, 9), (9, 11), (11, 13))),
            statistics.median(_shares(*r[13:])),
        ),
        "every gpufeed format kept this model at {:.1%} of its data-free rate or more on today's code; the plain "
        "DataLoader over files, which starts its workers each epoch, at {:.1%}",
    ),
)
UNCHECKED = {
    BENCHMARKS: {
        "768 ×": "CLIP-L's embedding width in the bytes arithmetic, not a measurement",
        "114 ms": "the epoch-start study's stand-in for the GPU's step, a setting (`step_ms` in epoch_starts.json)",
        "95 ms": "part of the column heading 'wait p95 ms', not a figure",
    }
}
