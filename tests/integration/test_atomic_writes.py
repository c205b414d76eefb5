"""Files written in place go through one writer (common.atomic): no writer of dataprep, train or bench writes
through a link planted at a temporary name, and no module outside the few that publish whole directories renames or
replaces files itself."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("common", "dataprep", "loaders", "training", "bench")
# the writer itself, the no-replace rename, and the publish and restore of a conversion's whole output directory
MAY_RENAME = {"common/atomic.py", "common/noreplace.py", "dataprep/workdir.py", "dataprep/leftovers.py"}


def _json(path: Path) -> None:
    from common.atomic import write_json

    write_json(path, {"written": True})


def _csv(path: Path) -> None:
    from bench.records.rows import write_csv

    write_csv(path, [{"name": "written"}])


def _summary(path: Path) -> None:
    from bench.report.answer import write_summary

    write_summary(path.parent, {"written": True})


def _run_summary(path: Path) -> None:
    from training.summary import write

    write(path.parent, {"written": True})


def _rank_file(path: Path) -> None:
    from bench.watcher.meter import StepMeter
    from bench.watcher.state import ProcessState, Settings

    meter = StepMeter("written", warmup=0)
    meter.add(1.0, 2.0)
    ProcessState(Settings(out=str(path.parent)), meters={"x": meter}, pid=os.getpid()).flush()


SITES = {
    "common.atomic.write_json": ("out.json", _json),
    "bench.records.rows.write_csv": ("results.csv", _csv),
    "bench.report.answer.write_summary": ("summary.json", _summary),
    "training.summary.write": ("summary.json", _run_summary),
    "bench.watcher.state.flush": (None, _rank_file),
}


def _plant(folder: Path, name: str, victim: Path) -> None:
    """Links to `victim` at every temporary name a writer here has used for `name`."""
    pid = os.getpid()
    for tmp in (f".{name}.tmp-{pid}", f"{name}.tmp-{pid}", f"{name}.tmp", f".{name}.tmp"):
        (folder / tmp).symlink_to(victim)


@pytest.mark.parametrize("site", sorted(SITES))
def test_a_writer_never_writes_through_a_link_at_its_temporary_name(tmp_path, site):
    """A link planted at a writer's temporary name leaves its target as it was, and the output is written whole."""
    name, write = SITES[site]
    out_dir, victim = tmp_path / "out", tmp_path / "victim.txt"
    out_dir.mkdir()
    victim.write_text("the user's own file\n")
    name = name or f"rank-{os.uname().nodename}-{os.getpid()}.json"
    _plant(out_dir, name, victim)
    write(out_dir / name)
    assert victim.read_text() == "the user's own file\n"
    assert "written" in (out_dir / name).read_text()
    assert not (out_dir / name).is_symlink()


def renames(source: str, filename: str = "<string>") -> list[int]:
    """The lines of `source` that rename or replace a file themselves: os.replace, os.rename, shutil.move, or a
    Path's .rename/.replace with one argument (str.replace takes two, dataclasses.replace is no file's)."""
    found = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        attr, owner = node.func.attr, node.func.value
        module = owner.id if isinstance(owner, ast.Name) else None
        if (module, attr) in {("os", "replace"), ("os", "rename"), ("shutil", "move")}:
            found.append(node.lineno)
        elif module not in ("os", "shutil", "dataclasses") and attr in ("rename", "replace") and len(node.args) == 1:
            found.append(node.lineno)
    return found


def test_no_module_renames_files_outside_the_writer():
    """Only the writer and the directory publish rename files; every other write goes through common.atomic."""
    found = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if rel not in MAY_RENAME:
                found += [f"{rel}:{line}" for line in renames(path.read_text(), rel)]
    assert not found, f"write through common.atomic.written (or rename_new), not a rename of its own: {found}"


def test_the_rename_check_sees_each_form():
    """The check above finds each way a module could rename a file itself, not str.replace or dataclasses.replace."""
    source = (
        "import os, shutil\nos.replace(a, b)\nos.rename(a, b)\nshutil.move(a, b)\ntmp.rename(p)\ntmp.replace(p)\n"
        "s.replace('a', 'b')\ndataclasses.replace(job)\n"
    )
    assert renames(source) == [2, 3, 4, 5, 6]
