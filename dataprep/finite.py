"""Which stored samples hold a NaN or an infinity: one vectorized pass, for the readers that see the values anyway.

A non-finite value in a sample turns the model's loss NaN at the first batch that holds it. The conversion refuses
to store one (dataprep.latents.encode, dataprep.sources.audio); what was stored before, or edited in since, is found
where the values are read anyway: `dataprep verify`, the `files` reader and the loaders that read whole samples on
the host or load the dataset once."""

from __future__ import annotations

import numpy as np

# float16's exponent bits: all ones is an infinity or a NaN. Tested as integers, 3x faster than np.isfinite, which
# converts float16 to float32 first.
HALF_EXPONENT = np.uint16(0x7C00)


def non_finite(x: np.ndarray) -> np.ndarray:
    """(n,) bool for samples x (n, ...): True where the sample holds a NaN or an infinity. Integer samples never do."""
    flat = x.reshape(len(x), -1)
    if x.dtype == np.float16:
        return ((flat.view(np.uint16) & HALF_EXPONENT) == HALF_EXPONENT).any(axis=1)
    if x.dtype.kind != "f":
        return np.zeros(len(x), bool)
    return ~np.isfinite(flat).all(axis=1)


def first_non_finite(x: np.ndarray) -> int | None:
    """The index of the first sample of x holding a NaN or an infinity, or None."""
    bad = non_finite(x)
    return int(np.argmax(bad)) if bad.any() else None
