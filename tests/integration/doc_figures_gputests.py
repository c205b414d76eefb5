"""The README's account of `pytest -m gpu` on hosts of 2 H200s, against its logs under bench/results/pytest_gpu_2xh200
(pytest -rA: each test's outcome, one a line): two calls, then two later ones with the tests those cut or left."""

from __future__ import annotations

import re

from doc_figures import README, Figure

LOGS = tuple(f"pytest_gpu_2xh200/call{k}.txt.xz" for k in (1, 2))
LATER = tuple(f"pytest_gpu_2xh200/call{k}.txt.xz" for k in (3, 4))  # the tests cut or not reached, run again


def _outcomes(*logs: str) -> tuple:
    """(tests passed, skipped, cut by the per-test limit, that limit in seconds) over the calls."""
    text = "\n".join(logs)
    skipped = sum(int(n) for n in re.findall(r"(\d+) skipped", text))
    cut = re.findall(r"^E +Failed: Timeout \(>(\d+)\.0s\)", text, re.M)
    return len(re.findall(r"^PASSED tests/", text, re.M)), skipped, len(cut), int(cut[0])


def _later(*logs: str) -> tuple:
    """(tests passed, the longest test's seconds) over the later calls (--durations=0); None where one failed."""
    text = "\n".join(logs)
    if re.search(r"^(FAILED|ERROR) ", text, re.M):
        return (None, None)
    slowest = max(float(s) for s in re.findall(r"^([\d.]+)s call ", text, re.M))
    return len(re.findall(r"^PASSED tests/", text, re.M)), slowest


FIGURES = (
    Figure(
        (README,),
        "139 of the tests marked `gpu` passed and 1 was skipped (it needs 4 GPUs); 2 ran past the 150 s each was given",
        LOGS,
        _outcomes,
        "{} of the tests marked `gpu` passed and {} was skipped (it needs 4 GPUs); {} ran past the {} s each was given",
    ),
    Figure(
        (README,),
        "those 6 passed with no limit, the longest in 189 s",
        LATER,
        _later,
        "those {} passed with no limit, the longest in {:.0f} s",
    ),
)
UNCHECKED: dict[str, dict[str, str]] = {}
