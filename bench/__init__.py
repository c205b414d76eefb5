"""bench: does the GPU starve, and what fixes it? The grid of loader configurations in the training loop
(`bench loaders`), its report, the choice behind `train --loader fastest`; the project's own studies in studies/."""
