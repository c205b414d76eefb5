"""Finding 7's ffcv and stream on 4 ranks (docs/BENCHMARKS.md), against the runs `scaling.sh extras` kept."""

from __future__ import annotations

from doc_figures import BENCHMARKS, Figure

SUMMARY = "f7_extras_4xh200/raw.tar.xz:./summary.json"
ROW = "| {:,.0f} | {:.1%} | {:.1%} (rank {} made the others wait {:.0%} of it) |"


def _run(summary: dict, grid: str, backend: str | None) -> dict:
    return next(r for r in summary["runs"] if r["grid"] == grid and r["backend"] == backend)


def _row(backend: str):
    def row(summary: dict) -> tuple:
        r = _run(summary, "extras-cpus2", backend)
        return r["samples_per_s"], r["vs_data_free"], r["starvation_any"], r["waited_on_rank"], r["waited_on_share"]

    return row


FIGURES = (
    Figure(
        (BENCHMARKS,),
        "| data-free | 18,375 |",
        SUMMARY,
        lambda s: (_run(s, "extras-cpus2", None)["samples_per_s"],),
        "| data-free | {:,.0f} |",
    ),
    Figure(
        (BENCHMARKS,), "| 16,285 | 88.6% | 5.3% (rank 2 made the others wait 68% of it) |", SUMMARY, _row("ffcv"), ROW
    ),
    Figure(
        (BENCHMARKS,), "| 16,601 | 90.3% | 3.9% (rank 3 made the others wait 74% of it) |", SUMMARY, _row("stream"), ROW
    ),
    Figure(
        (BENCHMARKS,),
        "finished only its data-free run (16,746 samples/s, against 18,375 at 2 cores",
        SUMMARY,
        lambda s: (_run(s, "extras-cpus4", None)["samples_per_s"], _run(s, "extras-cpus2", None)["samples_per_s"]),
        "finished only its data-free run ({:,.0f} samples/s, against {:,.0f} at 2 cores",
    ),
)

UNCHECKED: dict[str, dict[str, str]] = {}
