"""Finding 7's ffcv, DALI and stream on 4 ranks (docs/BENCHMARKS.md, README.md), against the runs `scaling.sh extras`
kept."""

from __future__ import annotations

from doc_figures import BENCHMARKS, README, Figure

SUMMARY = "f7_extras_step_graph_4xh200/raw.tar.xz:./summary.json"
GRIDS = ("extras-cpus2", "extras-cpus4")
LOADERS = ("ffcv", "dali", "stream")


def _runs(summary: dict, grid: str, backend: str | None) -> list[dict]:
    """The grid's runs of one backend (None: data-free), in the order the summary lists them."""
    return [r for r in summary["runs"] if r["grid"] == grid and r["backend"] == backend]


def _rates(summary: dict, grid: str, backend: str | None) -> tuple:
    return tuple(r["samples_per_s"] for r in _runs(summary, grid, backend))


def _cell(summary: dict, grid: str, backend: str) -> tuple:
    """(each run's samples/s, the lowest and highest percentage of the data-free rate)."""
    shares = [100 * r["vs_data_free"] for r in _runs(summary, grid, backend)]
    return (*_rates(summary, grid, backend), min(shares), max(shares))


def _loaders(summary: dict) -> list[dict]:
    return [r for g in GRIDS for b in LOADERS for r in _runs(summary, g, b)]


def _row(backend: str):
    def row(summary: dict) -> tuple:
        starved = [max(r["starvation_any"] for r in _runs(summary, g, backend)) for g in GRIDS]
        return (*_cell(summary, GRIDS[0], backend), *_cell(summary, GRIDS[1], backend), *starved)

    return row


CELL = "{:,.0f} / {:,.0f} ({:.1f}–{:.1f}%)"
FIGURES = (
    Figure(
        (BENCHMARKS,),
        "| data-free | 26,351 / 26,373 | 26,331 / 26,359 | – |",
        SUMMARY,
        lambda s: (*_rates(s, GRIDS[0], None), *_rates(s, GRIDS[1], None)),
        "| data-free | {:,.0f} / {:,.0f} | {:,.0f} / {:,.0f} | – |",
    ),
    *(
        Figure((BENCHMARKS,), text, SUMMARY, _row(b), f"| `{b}` | {CELL} | {CELL} | {{:.2%}} / {{:.2%}} |")
        for b, text in (
            ("ffcv", "| `ffcv` | 26,324 / 26,234 (99.5–99.9%) | 26,331 / 26,251 (99.6–99.9%) | 0.19% / 0.16% |"),
            ("dali", "| `dali` | 26,378 / 26,449 (100.1–100.3%) | 26,262 / 26,420 (99.7–100.3%) | 0.04% / 0.04% |"),
            ("stream", "| `stream` | 26,398 / 26,487 (100.1–100.5%) | 26,312 / 26,381 (99.9–100.1%) | 0.20% / 0.20% |"),
        )
    ),
    Figure(
        (BENCHMARKS,),
        "each fed the 4 ranks at 99.5% of the data-free rate or more, at 2 cores a rank as at 4**, and no rank waited "
        "for its input more than 0.20% of the time.",
        SUMMARY,
        lambda s: (min(r["vs_data_free"] for r in _loaders(s)), max(r["starvation_any"] for r in _loaders(s))),
        "each fed the 4 ranks at {:.1%} of the data-free rate or more, at 2 cores a rank as at 4**, and no rank "
        "waited for its input more than {:.2%} of the time.",
    ),
    Figure(
        (README, BENCHMARKS),
        "ffcv, DALI and stream at 99.5% or more at 2 and at 4 cores a rank (2 runs each)",
        SUMMARY,
        lambda s: (
            min(r["vs_data_free"] for r in _loaders(s)),
            min(len(_runs(s, g, b)) for g in GRIDS for b in LOADERS),
        ),
        "ffcv, DALI and stream at {:.1%} or more at 2 and at 4 cores a rank ({} runs each)",
    ),
)

UNCHECKED: dict[str, dict[str, str]] = {}
