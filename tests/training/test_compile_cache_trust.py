"""The compile cache is read as an SSH key is: only regular files of this user, in folders no one else can write, opened
without following a link or waiting on a FIFO; anything else is skipped with the reason and the run compiles anew.
New folders are 0700. A path that can never be a folder is refused before the run starts, in one line; killed
writers' temporary files are removed. `train --help` says the folder holds code.

The tests run as root, which the kernel lets past permission bits: they check what the checks decide from owners and
modes (files really chown'ed to another uid, really chmod'ed), not what the kernel would allow."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from training.cli import train
from training.compile_cache import CompileCache
from training.trusted import Untrusted, check_tree, make_private_dirs, open_trusted

REPO = Path(__file__).resolve().parents[2]
OTHER_UID = 4321  # no such user here: a file "of someone else"
SHAPE = {"model": "probe", "batch_size": 2}


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """A private cache folder holding one file of this user's, mode 0600."""
    root = tmp_path / "cache"
    make_private_dirs(root)
    (root / "kernels.bin").write_bytes(b"compiled code")
    (root / "kernels.bin").chmod(0o600)
    return root


def within(seconds: float, call):
    """call(), which must return (or raise) within `seconds`: a blocked open() fails the test instead of hanging it."""
    result: list = []

    def run() -> None:
        try:
            result.append(("ok", call()))
        except BaseException as e:  # handed to the test thread
            result.append(("raised", e))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert result, f"still blocked after {seconds} s"
    kind, value = result[0]
    if kind == "raised":
        raise value
    return value


def test_a_file_of_yours_in_a_private_folder_is_read(cache):
    with open_trusted(cache, "kernels.bin") as f:
        assert f.read() == b"compiled code"


def _linked(root: Path) -> None:
    (root / "kernels.bin").rename(root.parent / "elsewhere")
    (root / "kernels.bin").symlink_to(root.parent / "elsewhere")


def _replaced(root: Path, make) -> None:
    (root / "kernels.bin").unlink()
    make(root / "kernels.bin")


DAMAGES = {
    "file of another user": (lambda r: os.chown(r / "kernels.bin", OTHER_UID, OTHER_UID), "belongs to uid 4321"),
    "group-writable file": (lambda r: (r / "kernels.bin").chmod(0o620), "can be written by its group (mode 0620)"),
    "world-writable file": (lambda r: (r / "kernels.bin").chmod(0o602), "can be written by everyone (mode 0602)"),
    "folder of another user": (lambda r: os.chown(r, OTHER_UID, OTHER_UID), "belongs to uid 4321, not to you"),
    "group-writable folder": (lambda r: r.chmod(0o770), "can be written by its group (mode 0770)"),
    "world-writable folder": (lambda r: r.chmod(0o1777), "can be written by its group and everyone (mode 1777)"),
    "symbolic link at the name": (_linked, "is a symbolic link"),
    "FIFO at the name": (lambda r: _replaced(r, os.mkfifo), "is a FIFO, not a regular file"),
    "folder at the name": (lambda r: _replaced(r, os.mkdir), "is a folder, not a regular file"),
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_anything_another_user_could_have_written_is_refused_without_blocking(cache, damage):
    """Each damage alone makes the file unreadable through the check, with the reason naming the path; none blocks."""
    make, reason = DAMAGES[damage]
    make(cache)
    with pytest.raises(Untrusted, match=re.escape(reason)):
        within(5, lambda: open_trusted(cache, "kernels.bin"))


def test_the_root_may_be_a_link_but_nothing_below_it(cache, tmp_path):
    """The root is the user's own choice (checked where it leads); a link inside it is refused."""
    (tmp_path / "link").symlink_to(cache)
    with open_trusted(tmp_path / "link", "kernels.bin") as f:
        assert f.read() == b"compiled code"
    (cache / "sub").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(Untrusted, match=f"{cache / 'sub'} is a symbolic link"):
        open_trusted(cache, "sub/kernels.bin")


def test_a_tree_is_checked_all_the_way_down(cache):
    """Bytecode is a tree: a file of another user, or a FIFO, deep inside refuses the whole tree."""
    deep = cache / "bytecode" / "usr" / "lib" / "__pycache__"
    make_private_dirs(deep)
    (deep / "mod.pyc").write_bytes(b"code")
    assert check_tree(cache, "bytecode") == 1
    os.chown(deep / "mod.pyc", OTHER_UID, OTHER_UID)
    with pytest.raises(Untrusted, match=f"{deep / 'mod.pyc'} belongs to uid 4321"):
        check_tree(cache, "bytecode")
    (deep / "mod.pyc").unlink()
    os.mkfifo(deep / "other.pyc")
    with pytest.raises(Untrusted, match="is a FIFO"):
        within(5, lambda: check_tree(cache, "bytecode"))


def test_new_folders_are_private_and_existing_ones_kept(tmp_path):
    (tmp_path / "kept").mkdir(mode=0o755)
    make_private_dirs(tmp_path / "kept" / "a" / "b")
    assert [(tmp_path / p).stat().st_mode & 0o777 for p in ("kept", "kept/a", "kept/a/b")] == [0o755, 0o700, 0o700]


def test_an_unsafe_cache_folder_is_neither_read_nor_written(cache):
    """A group-writable cache folder: load() says why, once; save() writes nothing into it."""
    cache.chmod(0o775)
    compiled = CompileCache(cache, SHAPE, "cpu")
    assert not compiled.load() and compiled.refused
    assert compiled.note.startswith(f"not used: {cache} can be written by its group (mode 0775): chmod go-w {cache}")
    assert compiled.save() is None and sorted(p.name for p in cache.iterdir()) == ["kernels.bin"]


def test_a_fifo_at_the_cache_files_name_is_skipped_at_once(cache):
    """The file this run shape would load is a FIFO: load() returns at once, saying so, and the run compiles anew."""
    compiled = CompileCache(cache, SHAPE, "cpu")
    os.mkfifo(compiled.path)
    assert within(5, compiled.load) is False
    assert f"{compiled.path} is a FIFO, not a regular file" in compiled.note and "compiling anew" in compiled.note


WRITER = """
import sys, time
from pathlib import Path
from common.atomic import written
with written(Path(sys.argv[1]), mode=0o600) as tmp:
    tmp.write_bytes(b"half the kernels")
    print("writing", flush=True)
    time.sleep(600)
"""


def test_temporary_files_of_killed_writers_are_removed(cache):
    """A cache write SIGKILLed midway left `.NAME.bin.tmp-PID`: the next load removes it and says so; a live writer's
    stays."""
    compiled = CompileCache(cache, SHAPE, "cpu")
    env = os.environ | {"PYTHONPATH": str(REPO)}
    cmd, pipe = [sys.executable, "-c", WRITER, str(compiled.path)], subprocess.PIPE
    killed, alive = (subprocess.Popen(cmd, env=env, stdout=pipe, text=True) for _ in range(2))
    try:
        for writer in (killed, alive):
            assert writer.stdout.readline().strip() == "writing"
        killed.kill()
        killed.wait()
        assert not compiled.load()
        left = cache / f".{compiled.path.name}.tmp-{killed.pid}"
        assert f"removed {left}: a compile cache file that process {killed.pid} did not finish writing" in compiled.note
        assert not left.exists() and (cache / f".{compiled.path.name}.tmp-{alive.pid}").exists()
    finally:
        alive.kill()
        alive.wait()


def run_train(*args: str, env: dict | None = None):
    return CliRunner().invoke(train, list(args), env=env)


@pytest.mark.parametrize("where", ["under a file", "a file", "from the environment"])
def test_a_cache_path_that_cannot_be_a_folder_is_refused_before_the_run(synthetic_images, tmp_path, where):
    """`--compile-cache afile/sub` (or afile, or $GPUFEED_COMPILE_CACHE so): one clear error before anything starts,
    not "not saved: Not a directory" and then "kernels kept in afile/sub" after minutes of compiling."""
    afile = tmp_path / "afile"
    afile.write_text("a file")
    path = afile if where == "a file" else afile / "sub"
    given = [] if where == "from the environment" else ["--compile-cache", str(path)]
    done = run_train(
        "--data",
        str(synthetic_images(64)),
        "--out",
        str(tmp_path / "run"),
        "--device",
        "cpu",
        "--compile",
        *given,
        env={"GPUFEED_COMPILE_CACHE": str(path)},
    )
    assert done.exit_code == 2 and "Traceback" not in done.output
    said = " ".join(done.output.split())
    if where == "a file":  # click's own check of the option
        assert f"Invalid value for '--compile-cache': Directory '{path}' is a file" in said, said
    else:
        assert f"{path} cannot be a folder: {afile} is a file; give a folder" in said and "--no-compile-cache" in said
    assert ("$GPUFEED_COMPILE_CACHE" in said) == (where == "from the environment")
    assert not (tmp_path / "run").exists()


def test_help_says_the_cache_is_code():
    said = " ".join(run_train("--help").output.split())
    assert "holds code that runs when it is loaded: copy it only from machines you trust" in said


@pytest.mark.slow
def test_train_compiled_with_a_fifo_then_an_unsafe_folder(synthetic_images, tmp_path):
    """`train --compile` on the CPU three times: the first saves the kernels (a private file); the second finds a FIFO
    at that file's name, is not blocked by it, compiles anew and puts a real file there; the third finds the folder
    group-writable, says once that it does not use it, compiles, writes nothing there, and its closing lines say the
    cache was not used (not "kernels kept")."""
    cache = tmp_path / "cache"

    def run(name: str):
        opts = "--loader gpu --model tiny --batch-size 4 --steps 2 --precision bf16 --device cpu --workers 0"
        opts += " --no-pin-memory --sample-every 0 --ckpt-every 0 --no-progress --log-every 2 --compile"
        where = ["--data", str(synthetic_images(64)), "--out", str(tmp_path / name), "--compile-cache", str(cache)]
        args = ["-m", "training", *where, *opts.split()]
        # one local Inductor cache for the three: only the first run builds the kernels (minutes on a busy CPU)
        env = os.environ | {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "local"), "PYTHONPATH": str(REPO)}
        done = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=1200)
        assert done.returncode == 0, done.stderr[-3000:]
        return done, json.loads((tmp_path / name / "summary.json").read_text())["compile"]["cache"]

    first, record = run("first")
    path = Path(record["saved"])
    assert path.stat().st_mode & 0o777 == 0o600 and cache.stat().st_mode & 0o777 == 0o700
    path.unlink()
    os.mkfifo(path)
    second, record = run("second")
    assert f"{path} is a FIFO, not a regular file" in second.stderr and "compiling anew" in second.stderr
    assert path.is_file() and record["saved"] == str(path)  # a blocked open() would have run into the timeout
    before = sorted(p.name for p in cache.iterdir())
    cache.chmod(0o770)
    third, record = run("third")
    assert third.stderr.count(f"compile cache: not used: {cache} can be written by its group") == 1, third.stderr
    assert f"the compile cache was not used: {cache} can be written by its group" in third.stdout
    assert "kernels kept" not in third.stdout and record["saved"] is None
    assert sorted(p.name for p in cache.iterdir()) == before
