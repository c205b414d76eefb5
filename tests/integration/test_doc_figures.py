"""Every headline figure in README.md and docs/ matches the raw result it comes from (doc_figures.py beside this file
names the file, the expression and the rounding), and docs that repeat a figure say it alike."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
from doc_figures import FIGURES as MAIN
from doc_figures import UNCHECKED as MAIN_UNCHECKED
from doc_figures import Figure, values

ROOT = Path(__file__).resolve().parents[2]
# doc_figures_*.py beside this file: more figures, each module's FIGURES and UNCHECKED ({doc: {figure: why}})
PARTS = [importlib.import_module(p.stem) for p in sorted(Path(__file__).parent.glob("doc_figures_*.py"))]
FIGURES = MAIN + tuple(f for part in PARTS for f in part.FIGURES)
UNCHECKED: dict[str, dict[str, str]] = {}
for unchecked in (MAIN_UNCHECKED, *(part.UNCHECKED for part in PARTS)):
    for doc, figures in unchecked.items():
        UNCHECKED.setdefault(doc, {}).update(figures)
GUARDED = ("README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def stale(figure: Figure) -> list[str]:
    """What is wrong with one figure: its raw result rounds to other text, or a doc no longer says it."""
    wrong = []
    if (computed := figure.fmt.format(*values(figure))) != figure.text:
        wrong.append(f"{figure.source} gives {computed!r}, the docs say {figure.text!r}")
    wrong += [
        f"{doc} no longer says {figure.text!r}"
        for doc in figure.docs
        if _flat(figure.text) not in _flat((ROOT / doc).read_text())
    ]
    return wrong


@pytest.mark.parametrize("figure", FIGURES, ids=lambda f: f.text[:40])
def test_a_figure_matches_its_raw_result_in_every_doc(figure):
    """The figure as written equals its raw result, rounded as printed, in each doc that repeats it."""
    assert stale(figure) == []


def test_a_stale_figure_fails():
    """A figure whose raw result rounds otherwise, or that a doc stopped saying, is reported, naming the source."""
    good = next(f for f in FIGURES if f.text.startswith("**`train --loader fastest` takes hdf5"))
    bad = Figure(good.docs, good.text.replace("4,983", "4,985"), good.source, good.value, good.fmt)
    said = stale(bad)
    assert len(said) == 2 and f"gives '{good.text}'" in said[0]


MEASURED = re.compile(  # a number with a unit of what is measured here: shares, speed-ups, times, rates, sizes
    r"\d[\d,]*(?:\.\d+)?(?:–\d[\d,]*(?:\.\d+)?)?\s?(?:%|×| ms\b| s\b| samples/s| images/s| KB| MB| GB)"
)


@pytest.mark.parametrize("doc", GUARDED)
def test_every_measured_figure_in_a_doc_is_checked(doc):
    """Each number with a unit in the doc lies inside a figure registered for it, so a stale one fails above, or is
    listed in UNCHECKED with why no raw result holds it (a threshold, a setting, arithmetic, a result not kept)."""
    text = _flat((ROOT / doc).read_text())
    checked = " ".join(_flat(f.text) for f in FIGURES if doc in f.docs)
    unchecked = {n for n in MEASURED.findall(text) if n not in checked} - set(UNCHECKED.get(doc, {}))
    assert not unchecked, f"{doc}: figures no test checks, and not listed in UNCHECKED: {sorted(unchecked)}"
