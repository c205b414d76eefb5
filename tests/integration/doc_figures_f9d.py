"""Finding 9's caption writer with one eager warm-up, begun as the encoder loads (docs/BENCHMARKS.md), against the
one-GPU runs and the py-spy profile under bench/results/f9_text_h200."""

from __future__ import annotations

from doc_figures import BENCHMARKS, PYSPY_HZ, README, Figure, _convert_row, _printed_stage, _stage
from doc_figures import ENCODE_STAGE as ENCODE

PROFILE = "f9_text_h200/t5_profile/"
WARM = "f9_text_h200/t5_warm_soon/t5_gpus1.manifest.json"
TWO = tuple(f"f9_text_2xh200/t5_warm_soon/t5_gpus{g}.{x}" for g in (1, 2) for x in ("manifest.json", "ms"))
WARM_STAGE = "text: eager warm-up (a thread)"


def _seconds_in(profile: str, frame: str, but: str | None = None) -> float:
    """Seconds of samples whose stack holds a frame starting with `frame` (and none starting with `but`)."""
    n = 0
    for line in profile.splitlines():
        stack, count = line.rsplit(" ", 1)
        frames = stack.split(";")
        if any(f.startswith(frame) for f in frames) and not (but and any(f.startswith(but) for f in frames)):
            n += int(count)
    return n / PYSPY_HZ


def _profile(profile: str) -> tuple:
    """(the warm-ups' seconds, the writer's seconds, the captures' own seconds) in the one-GPU profile."""
    warm = "Graphed._capture (dataprep/graphed.py:69)"
    return (
        _seconds_in(profile, warm),
        _seconds_in(profile, "TextCacheWriter._encode"),
        _seconds_in(profile, "Graphed._capture", but=warm),
    )


FIGURES = (
    Figure(
        (BENCHMARKS,),
        "found its encoding in the eager forward that ran before each graph's capture for 1.61 s of 5.61 s, and in the "
        "captures themselves for 0.20 s.",
        PROFILE + "t5_gpus1_pyspy.txt.xz",
        _profile,
        "found its encoding in the eager forward that ran before each graph's capture for {:.2f} s of {:.2f} s, and in "
        "the captures themselves for {:.2f} s.",
    ),
    Figure(
        (README,),
        "one GPU's warm-ups had taken 1.61 of 5.61 s): 2.10× on 2 H200s since",
        (PROFILE + "t5_gpus1_pyspy.txt.xz", *TWO),
        lambda p, *two: (*_profile(p)[:2], _convert_row(*two)[5]),
        "one GPU's warm-ups had taken {:.2f} of {:.2f} s): {:.2f}× on 2 H200s since",
    ),
    Figure(
        (BENCHMARKS,),
        "the caption writer then took 4.54 s, against 5.02 s and 5.60 s for f4f9d96",
        (WARM, PROFILE + "t5_gpus1.manifest.json", PROFILE + "t5_gpus1_pyspy_run.txt"),
        lambda new, old, spy: (
            _stage(new, ENCODE),
            _stage(old, ENCODE),
            _printed_stage(spy),
        ),
        "the caption writer then took {:.2f} s, against {:.2f} s and {:.2f} s for f4f9d96",
    ),
    Figure(
        (BENCHMARKS,),
        "the warm-up took 1.19 s on its thread",
        WARM,
        lambda m: (_stage(m, "text: the encoder's eager warm-up (a thread)"),),
        "the warm-up took {:.2f} s on its thread",
    ),
    Figure(
        (BENCHMARKS,),
        "| 22.5 s | 21.3 s (2 GPUs) | 1.05× | 5.04 → 2.41 s: **2.10× on 2** |",
        TWO,
        _convert_row,
        "| {:.1f} s | {:.1f} s (2 GPUs) | {:.2f}× | {:.2f} → {:.2f} s: **{:.2f}× on 2** |",
    ),
    Figure(
        (BENCHMARKS,),
        "one GPU took 5.04 s and two 2.41 s (2.10×, the same table again)",
        TWO,
        lambda *runs: _convert_row(*runs)[3:],
        "one GPU took {:.2f} s and two {:.2f} s ({:.2f}×, the same table again)",
    ),
    Figure(
        (BENCHMARKS,),
        "one-GPU warm-up took 2.17 s, longer than the listing and the first samples",
        TWO[0],
        lambda m: (_stage(m, WARM_STAGE),),
        "one-GPU warm-up took {:.2f} s, longer than the listing and the first samples",
    ),
    Figure(
        (BENCHMARKS,),
        "the two ranks' took 0.85 s",
        TWO[2],
        lambda m: (_stage(m, WARM_STAGE),),
        "the two ranks' took {:.2f} s",
    ),
    Figure(
        (BENCHMARKS,),
        "importing transformers took 5.2–5.3 s there",
        (TWO[0], TWO[2]),
        lambda a, b: tuple(sorted(_stage(m, "import transformers") for m in (a, b))),
        "importing transformers took {:.1f}–{:.1f} s there",
    ),
)

BEFORE = (  # one GPU's caption writer with graphs, before the one warm-up: every host's run
    "f9_text_4xh200/t5_graphs/t5_gpus1.manifest.json",
    "f9_text_2xh200/t5_shared_writes/t5_gpus1.manifest.json",
    "f9_text_4xh200/t5_shared_writes/t5_gpus1.manifest.json",
    PROFILE + "t5_gpus1.manifest.json",
)


def _one_gpu_before_after(new: dict, new2: dict, spy: str, *before: dict) -> tuple:
    after = [_stage(m, ENCODE) for m in (new, new2)]
    old = [_stage(m, ENCODE) for m in before] + [_printed_stage(spy)]
    return min(after), max(after), min(old), max(old)


FIGURES += (
    Figure(
        (BENCHMARKS,),
        "one GPU encodes faster (4.54–5.04 s against 5.02–6.20 s)",
        (WARM, TWO[0], PROFILE + "t5_gpus1_pyspy_run.txt", *BEFORE),
        _one_gpu_before_after,
        "one GPU encodes faster ({:.2f}–{:.2f} s against {:.2f}–{:.2f} s)",
    ),
)

UNCHECKED: dict[str, dict[str, str]] = {}
