"""When bench results cannot rank loaders: the machine was busy, or the rates vary more than they differ.

A pick from such a grid would be noise dressed as an answer, so `fastest` says "cannot tell on this machine now" in
one short reason, shows no ranking, and keeps the previous choice (the winner of the latest earlier grid that could
tell) or else the default configuration (DEFAULT_BACKENDS)."""

from __future__ import annotations

import os

from ..records.thresholds import BUSY, NOISE

# rates that vary by more than this cannot place a loader against the bar of 99% of the data-free rate at all
MAX_SPREAD = 0.10
# the default when nothing can be told: the first the data has; hdf5 fed every measured model on 1.4-2.7 cores
DEFAULT_BACKENDS = ("hdf5", "torch", "stream", "ffcv", "dali")
CANNOT_TELL = "cannot tell on this machine now"


def busy_share(rows: list[dict]) -> float:
    """The largest share of the runs' cores that other programs took during any of these runs (flat rows, or
    configurations grouped over repeats)."""
    return max((r.get("other_share_max", r.get("other_share")) or 0.0 for r in rows), default=0.0)


def cannot_tell(groups: list[dict], spread: float, busy: float | None = None) -> str | None:
    """Why these configurations cannot be ranked, in a short phrase, or None when they can. `spread` is the relative
    range the rates vary by (bench.fastest.choice.measured_spread's); `busy` the share of the cores other programs
    took during the grid's runs, data-free ones included (default: during these configurations'). Busy is what the
    runs' monitor saw, not the load average, which counts the run's own loader workers too."""
    from ..records.verdicts import impossible_gap

    spread = max(spread, impossible_gap(groups))  # no loader beats the data-free rate: the rates vary that much
    busy = busy_share(groups) if busy is None else busy
    if busy > BUSY:
        return f"other programs took {busy:.0%} of the cores during the runs"
    rates = [g["samples_per_s"] for g in groups]
    differ = (max(rates) - min(rates)) / max(rates) if rates else 0.0
    if spread > NOISE and spread >= differ:
        return f"the rates vary by {spread:.0%}, more than they differ ({differ:.0%})"
    if spread > MAX_SPREAD:
        return f"the rates vary by {spread:.0%}, too much to set any against the data-free rate"
    return None


def default_config(formats: list[str] | dict, device: str) -> tuple[str, int, bool]:
    """(backend, workers, pin_memory) taken when nothing can be told: the first of DEFAULT_BACKENDS whose format the
    data has, with half the cores as workers (at most 4, training's default), pinned on a GPU."""
    from loaders import NEEDS_FORMAT

    backend = next((b for b in DEFAULT_BACKENDS if NEEDS_FORMAT[b] in formats), "gpu")
    if backend == "gpu":  # no workers, no host copies
        return backend, 0, False
    return backend, max(1, min(4, len(os.sched_getaffinity(0)) // 2)), device.startswith("cuda")
