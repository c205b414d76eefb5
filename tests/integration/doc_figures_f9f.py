"""`convert --vae` on 1 and 4 GPUs, the whole command, over every host that ran it (docs/BENCHMARKS.md findings 7 and
9, README.md): the runs under bench/results/f9_convert_4xh200*, and f9_vae_4xh200 (today's code, with each command's
.span: its start, its end and its manifest's time of writing)."""

from __future__ import annotations

from doc_figures import BENCHMARKS, F9_CONVERT, README, Figure, _convert_row, _stage

ROOT = "f9_vae_4xh200/"
VAE_ENCODE = "encode: the first result to the last (a thread)"  # the autoencoder's encoding after its first chunk
WHOLE_GOAL = 3.3  # the whole --vae command's goal on 4 GPUs, not a measurement


def _pair(folder: str, suffix: str = "") -> tuple:
    return tuple(f"{ROOT}{folder}/vae_gpus{g}{suffix}.{x}" for g in (1, 4) for x in ("manifest.json", "ms"))


P1, P2, P50 = _pair("images_10k"), _pair("images_10k", "_r2"), _pair("images_50k")
HOST = ROOT + "images_10k/host.json"
EARLIER = (*F9_CONVERT["vae"], *F9_CONVERT["vae_stages"])  # two other hosts, one pair each
AT_10K = (*EARLIER, *P1, *P2)
# the four 10,000-image commands in the table's order (1 GPU's pairs, then 4 GPUs'), each manifest, .ms and .span
SPANS = tuple(
    f"{ROOT}images_10k/vae_gpus{g}{r}.{x}" for g in (1, 4) for r in ("", "_r2") for x in ("manifest.json", "ms", "span")
)


def _rows(*loaded) -> list[tuple]:
    """_convert_row of each pair of loaded sources, 4 at a time."""
    return [_convert_row(*loaded[k : k + 4]) for k in range(0, len(loaded), 4)]


def _parts(manifest: dict, ms: float, span: list[float]) -> tuple:
    """Where one command's time went: torchrun until the rank began, its start and joining, diffusers' import with
    the load, the first samples, the encoding, the rest, after the manifest, the whole command (seconds)."""
    start, end, written = span

    def stage(name: str) -> float:
        return manifest["timings"]["stages"].get(name, {"seconds": 0.0})["seconds"]

    began = stage("start: the interpreter, imports") + stage("join the other ranks")
    parts = (
        written - manifest["timings"]["wall_s"] - began - start,
        began,
        stage("import diffusers") + stage("load the autoencoder") + stage("start CUDA on the GPU"),
        stage("list the input") + stage("first samples (workers start)") + stage("first samples encoded"),
        stage(VAE_ENCODE),
    )
    after = end - written
    return (*parts, ms / 1000 - sum(parts) - after, after, ms / 1000)


def _table_row(k: int):
    def row(*loaded) -> tuple:
        runs = [_parts(*loaded[i : i + 3]) for i in range(0, len(loaded), 3)]
        return tuple(r[k] for r in runs)

    return row


def _fixed(manifest: dict, ms: float) -> float:
    """Everything but the encoding after its first chunk (seconds)."""
    return ms / 1000 - _stage(manifest, VAE_ENCODE)


def _images_for_goal(one: dict, one_ms: float, four: dict, four_ms: float) -> float:
    """The images at which (F1 + N / p1) / (F4 + N / p4) reaches the goal, the fixed costs F held."""
    p1, p4 = one["timings"]["encoded_per_s"], four["timings"]["encoded_per_s"]
    return (WHOLE_GOAL * _fixed(four, four_ms) - _fixed(one, one_ms)) / (1 / p1 - WHOLE_GOAL / p4)


def _readme(today: tuple, earlier: tuple, big: tuple, spans: tuple) -> tuple:
    """README's sentence: today's two pairs at 10,000 images (encoding ×, whole ×, 4 GPUs s, 1 GPU s: min, max each),
    the other hosts' whole ×, torchrun's start and diffusers' import (min, max), then the 50,000-image pair."""
    pairs = _rows(*today)
    spread = [f(x[k] for x in pairs) for k in (-1, 2, 1, 0) for f in (min, max)]
    before = _table_row(0)(*spans)
    return (
        *spread,
        *(x[2] for x in _rows(*earlier)),
        min(before),
        max(before),
        *_diffusers(*spans[0::3]),
        big[0]["count"],
        *_rows(*big)[0][2::-1],
    )


def _diffusers(*manifests: dict) -> tuple:
    seconds = [_stage(m, "import diffusers") for m in manifests]
    return min(seconds), max(seconds)


TABLE = (
    "torchrun, until rank 0's interpreter began",
    "the interpreter's start; joining the other ranks",
    "importing diffusers, loading the autoencoder, starting CUDA",
    "listing the input, the first samples decoded and encoded",
    "encoding, after the first chunk",
    "the rest: importing torch (one GPU; a stage of its own since), the writers' end, the hashes, the manifest",
    "after the manifest: leaving the group, the interpreters' and torchrun's exit",
    "the whole command",
)
TABLE_ROWS = (  # as written, after each row's name
    "4.2 / 3.9 | 6.0 / 6.9",
    "0.9 / 0.9 | 2.5 / 2.9",
    "10.0 / 9.2 | 7.9 / 10.9",
    "4.2 / 4.4 | 3.7 / 2.8",
    "37.9 / 37.9 | 9.9 / 10.0",
    "2.9 / 3.3 | 0.3 / 0.4",
    "2.1 / 2.1 | 2.4 / 2.6",
    "62.2 / 61.7 | 32.7 / 36.5",
)
PAIRS = "{:.1f} / {:.1f} | {:.1f} / {:.1f}"  # a time table's row after its name: 1 GPU's two runs, 4 GPUs'
ROW = "| {:.1f} s | {:.1f} s | **{:.2f}×** | {:.1f} → {:.1f} images/s: **{:.2f}×** |"

FIGURES = (
    *(
        Figure(
            (BENCHMARKS,),
            f"| {name} | 4116f8b " + ROW.format(*row),
            (HOST, *pair),
            lambda host, *r: (host["commit"][:7], *_convert_row(*r)),
            f"| {name} | {{}} " + ROW,
        )
        for name, pair, row in (
            ("the same on host G (finding 7), diffusers' bytecode first", P1, (62.2, 32.7, 1.90, 255.2, 979.8, 3.84)),
            ("the same host, again", P2, (61.7, 36.5, 1.69, 255.3, 975.7, 3.82)),
            ("the same host, all 50,000 CIFAR-10 train JPEGs", P50, (222.4, 77.4, 2.87, 256.2, 978.5, 3.82)),
        )
    ),
    *(
        Figure((BENCHMARKS,), f"| {name} | {text} |", SPANS, _table_row(k), f"| {name} | {PAIRS} |")
        for k, (name, text) in enumerate(zip(TABLE, TABLE_ROWS, strict=True))
    ),
    Figure(
        (BENCHMARKS,),
        "the encoding nearly does for the autoencoder (3.78–3.84×); for T5-XL-sized captions it reached 2.95× eager",
        (*AT_10K, *P50, *F9_CONVERT["raw_send"]),
        lambda *r: (
            min(x[-1] for x in _rows(*r[:-4])),
            max(x[-1] for x in _rows(*r[:-4])),
            _convert_row(*r[-4:])[-1],
        ),
        "the encoding nearly does for the autoencoder ({:.2f}–{:.2f}×); for T5-XL-sized captions it reached {:.2f}× "
        "eager",
    ),
    Figure(
        (BENCHMARKS,),
        "command does not scale (1.62–1.90× for the autoencoder and about 1× for T5-XL at 10,000 images; 2.87× and",
        (*AT_10K, *F9_CONVERT["raw_send"], *P50),
        lambda *r: (
            min(x[2] for x in _rows(*r[:16])),
            max(x[2] for x in _rows(*r[:16])),
            *(x[2] for x in _rows(*r[16:])),
        ),
        "command does not scale ({:.2f}–{:.2f}× for the autoencoder and about {:.0f}× for T5-XL at 10,000 images; "
        "{:.2f}× and",
    ),
    Figure(
        (BENCHMARKS,),
        "encoding 3.78–3.84× as fast on 4 GPUs, the whole command 1.62–1.90× (one run on each of two hosts, two on "
        "the third)",
        AT_10K,
        lambda *r: tuple(f(x[k] for x in _rows(*r)) for k in (-1, 2) for f in (min, max)),
        "encoding {:.2f}–{:.2f}× as fast on 4 GPUs, the whole command {:.2f}–{:.2f}× (one run on each of two hosts, "
        "two on the third)",
    ),
    Figure(
        (BENCHMARKS,),
        "The script now writes diffusers' bytecode first, as `pip install` does; importing it still took 7.2–10.1 s.",
        (*P1[0::2], *P2[0::2], *P50[0::2]),
        _diffusers,
        "The script now writes diffusers' bytecode first, as `pip install` does; importing it still took "
        "{:.1f}–{:.1f} s.",
    ),
    Figure(  # the fixed cost F with (one + F) / (four + F) = the goal
        (BENCHMARKS,),
        "3.3× at 10,000 images needs everything but the encoding under about 2 s on both sides (37.9 s of encoding on "
        "one GPU against 9.9 s on four); torchrun alone spends 3.9–6.9 s before the first rank begins, and importing "
        "diffusers 7.2–10.1 s",
        (*P1[0::2], *SPANS),
        lambda one, four, *spans: (
            WHOLE_GOAL,
            one["count"],
            (_stage(one, VAE_ENCODE) - WHOLE_GOAL * _stage(four, VAE_ENCODE)) / (WHOLE_GOAL - 1),
            _stage(one, VAE_ENCODE),
            _stage(four, VAE_ENCODE),
            *(f(_table_row(0)(*spans)) for f in (min, max)),
            *_diffusers(*spans[0::3]),
        ),
        "{:.1f}× at {:,} images needs everything but the encoding under about {:.0f} s on both sides ({:.1f} s of "
        "encoding on one GPU against {:.1f} s on four); torchrun alone spends {:.1f}–{:.1f} s before the first rank "
        "begins, and importing diffusers {:.1f}–{:.1f} s",
    ),
    Figure(
        (BENCHMARKS,),
        "With 50,000 images the whole command ran 2.87× as fast (one pair), everything but the encoding taking 28.4 s "
        "on one GPU and 26.6 s on four; if that held as the input grew (it grows a little: listing, hashing), 3.3× "
        "would take about 110,000 images (arithmetic, not run).",
        P50,
        lambda one, one_ms, four, four_ms: (
            one["count"],
            one_ms / four_ms,
            _fixed(one, one_ms),
            _fixed(four, four_ms),
            WHOLE_GOAL,
            round(_images_for_goal(one, one_ms, four, four_ms), -4),
        ),
        "With {:,} images the whole command ran {:.2f}× as fast (one pair), everything but the encoding taking {:.1f} "
        "s on one GPU and {:.1f} s on four; if that held as the input grew (it grows a little: listing, hashing), "
        "{:.1f}× would take about {:,.0f} images (arithmetic, not run).",
    ),
    Figure(
        (README,),
        "the encoding ran 3.82–3.84× as fast as on one GPU, but the whole command only 1.69–1.90× (32.7–36.5 s against "
        "61.7–62.2 s, two pairs; 1.62× and 1.81× on two other hosts, one pair each): at that size torchrun's start "
        "(3.9–6.9 s) and importing diffusers (7.2–10.1 s) take most of the time. With 50,000 images the whole command "
        "ran 2.87× as fast (77.4 s against 222.4 s, one pair;",
        (*P1, *P2, *EARLIER, *P50, *SPANS),
        lambda *r: _readme(r[:8], r[8:16], r[16:20], r[20:]),
        "the encoding ran {:.2f}–{:.2f}× as fast as on one GPU, but the whole command only {:.2f}–{:.2f}× "
        "({:.1f}–{:.1f} s against {:.1f}–{:.1f} s, two pairs; {:.2f}× and {:.2f}× on two other hosts, one pair "
        "each): at that size torchrun's start ({:.1f}–{:.1f} s) and importing diffusers ({:.1f}–{:.1f} s) take most "
        "of the time. "
        "With {:,} images the whole command ran {:.2f}× as fast ({:.1f} s against {:.1f} s, one pair;",
    ),
)

UNCHECKED: dict[str, dict[str, str]] = {}
