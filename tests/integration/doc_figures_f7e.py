"""Finding 7's ffcv, DALI and stream on 4 ranks (docs/BENCHMARKS.md, README.md), against the runs `scaling.sh extras`
kept on two hosts (F and G, two fresh processes a cell on each)."""

from __future__ import annotations

import statistics

from doc_figures import BENCHMARKS, README, Figure

SUMMARIES = tuple(f"f7_extras_step_graph_4xh200/host_{h}/raw.tar.xz:./summary.json" for h in ("f", "g"))
GRIDS = ("extras-cpus2", "extras-cpus4")
LOADERS = ("ffcv", "dali", "stream")


def _runs(summary: dict, grid: str, backend: str | None) -> list[dict]:
    """The grid's runs of one backend (None: data-free), in the order the summary lists them."""
    return [r for r in summary["runs"] if r["grid"] == grid and r["backend"] == backend]


def _rates(summaries: tuple, grid: str, backend: str | None) -> tuple:
    """Each host's runs' samples/s, host F's first."""
    return tuple(r["samples_per_s"] for s in summaries for r in _runs(s, grid, backend))


def _shares(summaries: tuple, grid: str, backend: str) -> list[float]:
    """Each run's share of its own host's data-free rate, in percent."""
    return [100 * r["vs_data_free"] for s in summaries for r in _runs(s, grid, backend)]


def _cell(summaries: tuple, grid: str, backend: str) -> tuple:
    """(each run's samples/s, the median, lowest and highest share of the data-free rate)."""
    shares = _shares(summaries, grid, backend)
    return (*_rates(summaries, grid, backend), statistics.median(shares), min(shares), max(shares))


def _loaders(summaries: tuple) -> list[dict]:
    return [r for s in summaries for g in GRIDS for b in LOADERS for r in _runs(s, g, b)]


def _row(backend: str):
    def row(*summaries: dict) -> tuple:
        starved = [max(r["starvation_any"] for s in summaries for r in _runs(s, g, backend)) for g in GRIDS]
        return (*_cell(summaries, GRIDS[0], backend), *_cell(summaries, GRIDS[1], backend), *starved)

    return row


def _medians(*summaries: dict) -> list[float]:
    """Each cell's median share over both hosts, in percent."""
    return [statistics.median(_shares(summaries, g, b)) for g in GRIDS for b in LOADERS]


def _host_gap(f: dict, g: dict) -> tuple:
    """How far host G's data-free rate (the median of its runs) is above host F's, per grid, in percent."""
    free = [[statistics.median(_rates((h,), x, None)) for x in GRIDS] for h in (f, g)]
    gaps = [100 * (b / a - 1) for a, b in zip(*free, strict=True)]
    return min(gaps), max(gaps)


RATES = "{:,.0f}, {:,.0f} / {:,.0f}, {:,.0f}"  # host F's two runs / host G's two
CELL = RATES + " | {:.1f}% ({:.1f}–{:.1f}%)"
FIGURES = (
    Figure(
        (BENCHMARKS,),
        "| data-free | 26,351, 26,373 / 26,871, 26,976 | – | 26,331, 26,359 / 26,971, 26,892 | – | – |",
        SUMMARIES,
        lambda *s: (*_rates(s, GRIDS[0], None), *_rates(s, GRIDS[1], None)),
        f"| data-free | {RATES} | – | {RATES} | – | – |",
    ),
    *(
        Figure((BENCHMARKS,), text, SUMMARIES, _row(b), f"| `{b}` | {CELL} | {CELL} | {{:.2%}} / {{:.2%}} |")
        for b, text in (
            (
                "ffcv",
                "| `ffcv` | 26,324, 26,234 / 26,847, 26,752 | 99.6% (99.4–99.9%) | 26,331, 26,251 / 26,920, 26,700 | "
                "99.8% (99.1–100.0%) | 0.19% / 0.17% |",
            ),
            (
                "dali",
                "| `dali` | 26,378, 26,449 / 26,925, 26,972 | 100.1% (100.0–100.3%) | 26,262, 26,420 / 26,982, "
                "26,795 | 99.9% (99.5–100.3%) | 0.04% / 0.04% |",
            ),
            (
                "stream",
                "| `stream` | 26,398, 26,487 / 26,813, 26,846 | 99.9% (99.6–100.5%) | 26,312, 26,381 / 26,843, "
                "26,807 | 99.8% (99.5–100.1%) | 0.21% / 0.21% |",
            ),
        )
    ),
    Figure(
        (BENCHMARKS,),
        "each fed the 4 ranks at 99.1% of the data-free rate or more, at 2 cores a rank as at 4; the median of a "
        "cell's 4 runs was 99.6–100.1%**, and no rank waited for its input more than 0.21% of the time.",
        SUMMARIES,
        lambda *s: (
            min(r["vs_data_free"] for r in _loaders(s)),
            min(_medians(*s)),
            max(_medians(*s)),
            max(r["starvation_any"] for r in _loaders(s)),
        ),
        "each fed the 4 ranks at {:.1%} of the data-free rate or more, at 2 cores a rank as at 4; the median of a "
        "cell's 4 runs was {:.1f}–{:.1f}%**, and no rank waited for its input more than {:.2%} of the time.",
    ),
    Figure(
        (BENCHMARKS,),
        "which on host G was 2.1–2.2% above host F's",
        SUMMARIES,
        _host_gap,
        "which on host G was {:.1f}–{:.1f}% above host F's",
    ),
    Figure(
        (README, BENCHMARKS),
        "ffcv, DALI and stream at 99.1% or more at 2 and at 4 cores a rank (4 runs each, 2 on each host)",
        SUMMARIES,
        lambda *s: (
            min(r["vs_data_free"] for r in _loaders(s)),
            min(len(_runs(x, g, b)) for g in GRIDS for b in LOADERS for x in s) * len(s),
            min(len(_runs(x, g, b)) for g in GRIDS for b in LOADERS for x in s),
        ),
        "ffcv, DALI and stream at {:.1%} or more at 2 and at 4 cores a rank ({} runs each, {} on each host)",
    ),
)

UNCHECKED: dict[str, dict[str, str]] = {}
