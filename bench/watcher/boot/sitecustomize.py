"""Loaded at start-up by every Python process that `bench watch` starts (its directory leads PYTHONPATH): installs
gpufeed's loader hooks, then runs the sitecustomize this one shadows, if there is one.

The hooks come from the gpufeed around this file, loaded under a private name (PRIVATE.watcher.hooks), never as
`bench`: a program with top-level packages of its own named `bench`, `training`, `loaders` or `dataprep` finds those
names free and imports its own, as it would without `bench watch`. bench/__init__.py looks for PRIVATE, so that a
program's own `from bench import watch` joins these hooks' measurement."""

import importlib
import importlib.machinery
import importlib.util
import os
import sys

PRIVATE = "_gpufeed_bench"  # gpufeed's bench package, as the hooks of this process know it


def _load_private():
    """gpufeed's bench package (two levels above this file's directory) as PRIVATE, and its hooks module."""
    bench = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if PRIVATE not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            PRIVATE, os.path.join(bench, "__init__.py"), submodule_search_locations=[bench]
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[PRIVATE] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[PRIVATE]
            raise
    return importlib.import_module(f"{PRIVATE}.watcher.hooks")


def _install() -> None:
    try:
        hooks = _load_private()
    except Exception as e:  # another interpreter without gpufeed's needs: run the program unwatched, and say so
        print(f"bench watch: cannot watch this process ({sys.executable}): {e}", file=sys.stderr)
        return
    hooks.install()


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if os.path.abspath(entry or ".") == here:
            continue
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [entry])
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return


_install()
_chain()
