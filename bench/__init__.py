"""bench: does the GPU starve, and what fixes it? The grid of loader configurations in the training loop
(`bench loaders`), its report, the choice behind `train --loader fastest`, and `bench watch` for any training program,
unchanged (`from bench import watch` gives its Python form, imported on first use); the project's own studies in
studies/."""


def __getattr__(name: str):
    if name == "watch":
        from .watcher.api import watch

        return watch
    raise AttributeError(f"module 'bench' has no attribute {name!r}")
