"""The README's account of `pytest -m gpu` on a host of 2 H200s, against its two logs under
bench/results/pytest_gpu_2xh200 (pytest -rA: each test's outcome, one a line)."""

from __future__ import annotations

import re

from doc_figures import README, Figure

LOGS = tuple(f"pytest_gpu_2xh200/call{k}.txt.xz" for k in (1, 2))


def _outcomes(*logs: str) -> tuple:
    """(tests passed, skipped, cut by the per-test limit, that limit in seconds) over the calls."""
    text = "\n".join(logs)
    skipped = sum(int(n) for n in re.findall(r"(\d+) skipped", text))
    cut = re.findall(r"^E +Failed: Timeout \(>(\d+)\.0s\)", text, re.M)
    return len(re.findall(r"^PASSED tests/", text, re.M)), skipped, len(cut), int(cut[0])


FIGURES = (
    Figure(
        (README,),
        "139 of the tests marked `gpu` passed and 1 was skipped (it needs 4 GPUs); 2 ran past the 150 s each was given",
        LOGS,
        _outcomes,
        "{} of the tests marked `gpu` passed and {} was skipped (it needs 4 GPUs); {} ran past the {} s each was given",
    ),
)
UNCHECKED: dict[str, dict[str, str]] = {}
