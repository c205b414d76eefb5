"""Measuring GPU starvation: `bench loaders` (a grid of loader configurations in gpufeed's loop) and `bench watch`
(any training program, unchanged). `from bench import watch` gives the latter's Python form, imported on first use."""


def __getattr__(name: str):
    if name == "watch":
        from .watcher.api import watch

        return watch
    raise AttributeError(f"module 'bench' has no attribute {name!r}")
