"""bench: does the GPU starve, and what fixes it? Its rooms, one concept each, layered from the bottom up:

    records/   a result record: where and how it ran, written atomically; a directory of them read back
    grid/      `bench loaders`: the grid of loader configurations, each in a fresh process, ranks, machine costs
    fastest/   `train --loader fastest` and `bench fastest`: the choice from results, or the in-process probe
    report/    `bench report` and the closing answer of `bench loaders` (`make demo`'s too)
    watcher/   `bench watch`: any training program, unchanged (`from bench import watch` is its Python form)
    soak/      `bench soak`: a long run's memory, fds, threads and children over time

cli.py is the `bench` command over them. studies/ (the project's own experiments) and results/ (their raw results,
behind docs/BENCHMARKS.md) stay in the repository: pip installs neither."""


def __getattr__(name: str):
    if name == "watch":
        import importlib
        import sys

        # under `bench watch` its hooks run from this package loaded under a private name (watcher/boot): a program's
        # own watch(...) calls join their measurement instead of starting a second one
        root = "_gpufeed_bench" if "_gpufeed_bench" in sys.modules else __name__
        return importlib.import_module(f"{root}.watcher.api").watch
    raise AttributeError(f"module 'bench' has no attribute {name!r}")
