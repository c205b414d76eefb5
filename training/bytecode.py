"""Python's bytecode kept in the compile cache where the environment keeps none. Torch's start imports thousands of
modules; with no cached bytecode, every process compiles them from source first. That is the case in images that set
PYTHONDONTWRITEBYTECODE=1 (a common line in Dockerfiles) and ship no .pyc files, and where site-packages is
read-only: on a GPU machine of that kind, `import torch` and the compiler took three times as long a process
(docs/BENCHMARKS.md, "Cold start").
`train --compile` then has Python write the bytecode under the compile cache (a folder of its own, never beside the
sources), so the next process and, when the folder is copied, the next machine of the same image find it. Python
checks each file against its source's size and modification time, so a changed install is compiled again, never run
stale. Torch-free: it has to act before torch is imported.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from .trusted import Untrusted, check_folder, check_tree, make_private_dirs


def has_bytecode(package: str = "torch") -> bool:
    """Whether this interpreter can find or write the bytecode of `package`'s modules beside their sources."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        return True  # not installed: nothing to keep
    if sys.pycache_prefix is not None:
        return True  # someone already chose where bytecode goes
    if Path(importlib.util.cache_from_source(spec.origin)).is_file():
        return True
    return not sys.dont_write_bytecode and os.access(Path(spec.origin).parent, os.W_OK)


def keep_bytecode(compile_cache: Path, package: str = "torch") -> str | None:
    """Where `package`'s bytecode is neither found nor written, write all bytecode (this process's and its
    children's) under `compile_cache`/bytecode-<python>; returns a line saying so, None where nothing was needed.
    Bytecode is code Python runs: the folder is used only where everything in it is this user's alone
    (training.trusted), else the line says why and Python compiles the sources as it would without it."""
    if has_bytecode(package):
        return None
    folder = compile_cache / f"bytecode-{sys.implementation.cache_tag}"
    try:
        if compile_cache.is_dir():  # an unsafe cache folder gets nothing new inside it
            check_folder(compile_cache)
        make_private_dirs(folder)
        check_tree(compile_cache, folder.name)
    except Untrusted as e:
        why = "it is code that runs when imported, so only yours, in folders no one else can write, is read"
        return f"Python bytecode not kept in {folder}: {e}; {why}: imports stay slow"
    except OSError as e:
        return f"Python writes no bytecode here and {folder} cannot hold it ({e.strerror or e}): imports stay slow"
    sys.pycache_prefix, sys.dont_write_bytecode = str(folder), False
    # the compiler's workers and the loader's processes are new interpreters: they read the bytecode there too, and
    # leave the writing to this process (where PYTHONDONTWRITEBYTECODE says so), which imports what they import
    os.environ["PYTHONPYCACHEPREFIX"] = str(folder)
    return (
        f"Python bytecode kept in {folder}: none is kept beside {package}'s sources here (PYTHONDONTWRITEBYTECODE "
        f"or read-only site-packages), and compiling them again costs every start seconds"
    )
