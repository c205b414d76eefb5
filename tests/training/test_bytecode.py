"""Python's bytecode kept in the compile cache where the environment writes none (PYTHONDONTWRITEBYTECODE=1 and no
.pyc shipped): written there by the first process, read by the next instead of compiling the sources again."""

from __future__ import annotations

import importlib.util
import json
import os
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest

from training.bytecode import has_bytecode

# a fresh interpreter that keeps the bytecode of `probe_pkg` (a package without .pyc files) in a cache, then imports it
PROBE = """
import json, os, sys
from pathlib import Path
from training.bytecode import keep_bytecode
note = keep_bytecode(Path(sys.argv[1]), package="probe_pkg")
import probe_pkg
print(json.dumps({"note": note, "value": probe_pkg.VALUE, "env": os.environ.get("PYTHONPYCACHEPREFIX")}))
"""


@pytest.fixture
def package(tmp_path: Path) -> Path:
    root = tmp_path / "site"
    (root / "probe_pkg").mkdir(parents=True)
    (root / "probe_pkg" / "__init__.py").write_text("VALUE = 41 + 1\n")
    return root


def probe(site: Path, cache: Path) -> dict:
    repo = Path(__file__).resolve().parents[2]
    env = os.environ | {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": f"{site}{os.pathsep}{repo}"}
    env.pop("PYTHONPYCACHEPREFIX", None)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(cache)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_bytecode_goes_to_the_cache_and_is_read_from_it(package, tmp_path):
    cache = tmp_path / "compile-cache"
    first = probe(package, cache)
    assert first["value"] == 42 and "PYTHONDONTWRITEBYTECODE" in first["note"]
    (folder,) = cache.glob("bytecode-*")
    (pyc,) = folder.glob("**/probe_pkg/__init__.*.pyc")  # under the folder, by the source's own path
    assert first["env"] == str(folder)  # the interpreter's children write there too
    assert not list(package.rglob("*.pyc"))  # nothing beside the sources
    written = pyc.stat().st_mtime_ns
    second = probe(package, cache)
    assert second["value"] == 42 and pyc.stat().st_mtime_ns == written  # read, not compiled and written again


def test_a_changed_source_is_compiled_again(package, tmp_path):
    cache = tmp_path / "compile-cache"
    probe(package, cache)
    (package / "probe_pkg" / "__init__.py").write_text("VALUE = 7  # a longer source than before\n")
    assert probe(package, cache)["value"] == 7


def test_nothing_is_done_where_bytecode_is_kept(package, tmp_path):
    source = package / "probe_pkg" / "__init__.py"
    py_compile.compile(str(source), cfile=importlib.util.cache_from_source(str(source)))
    report = probe(package, tmp_path / "compile-cache")
    assert report["note"] is None and not (tmp_path / "compile-cache").exists()
    assert has_bytecode("no_such_package_here")  # nothing installed: nothing to keep


@pytest.mark.parametrize("damage", ["a file of another user", "a FIFO", "a group-writable folder"])
def test_bytecode_another_user_could_have_written_is_not_read(package, tmp_path, damage):
    """Bytecode is code: where the tree holds a file of another uid, a FIFO (which an import would wait on for ever)
    or a folder its group can write, the interpreter keeps no bytecode there, says why, and imports from the
    sources. The folder it makes is private."""
    cache = tmp_path / "compile-cache"
    probe(package, cache)
    (folder,) = cache.glob("bytecode-*")
    assert folder.stat().st_mode & 0o777 == 0o700
    (pyc,) = folder.glob("**/probe_pkg/__init__.*.pyc")
    if damage == "a file of another user":
        os.chown(pyc, 4321, 4321)
    elif damage == "a FIFO":
        pyc.unlink()
        os.mkfifo(pyc)
    else:
        pyc.parent.chmod(0o775)
    report = probe(package, cache)
    assert report["value"] == 42 and report["env"] is None
    note = report["note"]
    assert note.startswith(f"Python bytecode not kept in {folder}: ") and "imports stay slow" in note
