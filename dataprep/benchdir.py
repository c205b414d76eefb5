"""`.gpufeed-bench/`, the folder inside a dataset where `bench loaders` and `bench fastest` keep their results by
default, and what dataprep takes for one that bench wrote.

Bench's folder is recognised by what bench writes there: run records, probe summaries and the grid's summary (JSON
objects of bench's shape), results.csv and results.md, plot-*.png, grid.log, profiler traces in traces/, the ranks'
records in .ranks/, the compiled kernels of its runs in .inductor-cache/ (whatever torch writes), and the temporary
names of bench's atomic writes; no symbolic link anywhere. Anything else in it is someone else's."""

from __future__ import annotations

import json
import os
from fnmatch import fnmatch

from common.paths import NotRegularError, open_regular

BENCH_DIR = ".gpufeed-bench"
_TMP = (".*.tmp-*", "*.tmp")
_NAMES = {
    ".": ("*.json", "results.csv", "results.md", "plot-*.png", "grid.log", *_TMP),
    "traces": ("*.trace.json.gz", *_TMP),
    ".ranks": ("*.json", *_TMP),
}
_ANYTHING = ".inductor-cache"  # torch's own files, in a cache only the bench runs use
# the keys that mark each kind of JSON bench writes at the top: a run's record, a probe's summary, the grid's summary
_SHAPES = ({"name", "job", "run"}, {"grid_id", "ceilings"}, {"results_dir", "scenarios"})
_JSON_BYTES = 64 << 20  # a run record is a few kB; far more is not one of bench's


def not_bench(folder: str) -> str | None:
    """Why `folder` (a dataset's .gpufeed-bench) is not one that bench wrote, or None when it is. Reasons name the
    entry relative to the dataset."""
    if os.path.islink(folder):
        return f"it holds a symbolic link, {BENCH_DIR}, which bench never writes"
    if not os.path.isdir(folder):
        return f"its {BENCH_DIR} is not a folder, which bench makes"
    unreadable: list[OSError] = []
    for here, dirs, files in os.walk(folder, onerror=unreadable.append):
        rel = os.path.relpath(here, folder)
        for name in [*dirs, *files]:
            if os.path.islink(os.path.join(here, name)):
                return f"it holds a symbolic link, {_shown(rel, name)}, which bench never writes"
        if rel == _ANYTHING or rel.startswith(_ANYTHING + os.sep):
            continue
        for name in files:
            if not any(fnmatch(name, p) for p in _NAMES.get(rel, ())):
                return f"it holds {_shown(rel, name)}, which bench does not write"
            if rel == "." and name.endswith(".json") and not _bench_json(os.path.join(here, name)):
                return f"its {_shown(rel, name)} is not a record that bench wrote"
    if unreadable:
        return f"{unreadable[0].filename} cannot be listed ({unreadable[0].strerror})"
    return None


def _bench_json(path: str) -> bool:
    try:
        with open_regular(path, "rb", what="bench record") as f:  # a FIFO in its place is not waited on
            data = json.loads(f.read(_JSON_BYTES + 1)[:_JSON_BYTES])
    except (OSError, NotRegularError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and any(shape <= data.keys() for shape in _SHAPES)


def _shown(rel: str, name: str) -> str:
    return f"{BENCH_DIR}/{name}" if rel == "." else f"{BENCH_DIR}/{rel}/{name}"
