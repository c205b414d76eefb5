"""Loaded at start-up by every Python process that `bench watch` starts (its directory leads PYTHONPATH): installs
gpufeed's loader hooks, then runs the sitecustomize this one shadows, if there is one."""

import importlib.machinery
import importlib.util
import os
import sys


def _install() -> None:
    try:
        from bench.watcher.hooks import install
    except Exception as e:  # another interpreter without gpufeed: run the program unwatched, and say so
        print(f"bench watch: cannot watch this process ({sys.executable}): {e}", file=sys.stderr)
        return
    install()


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
