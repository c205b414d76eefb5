"""bench/studies/readme_plot.py draws README's pictures from the committed raw results, without unpacking them."""

from __future__ import annotations

from pathlib import Path

from bench.studies.readme_plot import draw_repeats, read_records

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


def test_the_repeats_picture_comes_from_every_fresh_process(tmp_path):
    """Finding 1 on today's code: 13 loader runs and 3 data-free runs in the folder; the picture is a PNG."""
    records = read_records(RESULTS / "f1_w4_h200")
    kinds = sorted(r["job"]["kind"] for r in records)
    assert kinds.count("loader") == 13 and kinds.count("data_free") == 3, kinds
    out = draw_repeats(RESULTS / "f1_w4_h200", tmp_path / "p.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
