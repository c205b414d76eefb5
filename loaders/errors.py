"""The one error the loaders raise for a loader that cannot be built or run as asked. Its own module, so that the
package's `build_loader` and the modules it imports (base.py, integrity.py) all import it from here, and none of them
imports the package back; `from loaders import LoaderError` is the same class."""


class LoaderError(ValueError):
    """A loader cannot be built as asked; the message says what to do."""


def too_small(count: int, batch_size: int, world_size: int = 1) -> str | None:
    """What to say when `count` samples dealt over `world_size` ranks give no full batch (every loader drops the last,
    partial one), with a --batch-size that fits; None when they give one."""
    per_rank = count // world_size
    if per_rank >= batch_size:
        return None
    ranks = f", {per_rank:,} per rank over {world_size} ranks" if world_size > 1 else ""
    if per_rank == 0:
        return f"the data has {count:,} samples{ranks}: fewer than one per rank; use fewer ranks"
    fit = 1 << (per_rank.bit_length() - 1)  # the largest power of two that fits
    other = f" (e.g. --batch-size {fit})" if fit != per_rank else ""
    return (
        f"the data has {count:,} samples{ranks}, fewer than one batch of {batch_size}: pass --batch-size "
        f"{per_rank} or less{other}, or convert more data"
    )
