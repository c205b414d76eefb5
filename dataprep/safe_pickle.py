"""Reading CIFAR-10's pickled batches without running what a doctored copy might carry.

`pickle.load` calls any function a pickle names, so a `cifar-10-batches-py` from a mirror or a shared drive could
run code on the machine that converts it. This unpickler admits only what the format holds: dicts, lists, tuples,
bytes, str, ints, floats and numpy arrays. A numpy array pickles as a call of one of the functions below with an
`ndarray` class and a `dtype`, and protocol 2 pickles written by Python 3 rebuild bytes with a latin-1
`_codecs.encode` (checked with `pickletools` on numpy 1.x and 2.x pickles, protocols 2 to 5, and on the
original batches, which name `numpy.core.multiarray._reconstruct`). Anything else is refused before it is called."""

from __future__ import annotations

import importlib
import pickle
from typing import IO

ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"),  # the original batches (numpy 1.x), protocol 2-4 from numpy 1.x
    ("numpy._core.multiarray", "_reconstruct"),  # the same written by numpy 2.x
    ("numpy.core.numeric", "_frombuffer"),  # protocol 5 (numpy 1.x)
    ("numpy._core.numeric", "_frombuffer"),  # protocol 5 (numpy 2.x)
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
}


def _latin1(text: str, encoding: str = "utf-8") -> bytes:
    """What protocol 2 pickles written by Python 3 call to rebuild bytes (`_codecs.encode(text, "latin1")`), and
    nothing else: other codecs (zlib, ...) are refused."""
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str):
        raise UnsafePickle(f"_codecs.encode with the {encoding!r} codec")
    return text.encode("latin1")


class UnsafePickle(pickle.UnpicklingError):
    """The pickle names something that a CIFAR-10 batch never holds."""


class _Restricted(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) == ("_codecs", "encode"):
            return _latin1
        if (module, name) not in ALLOWED:
            raise UnsafePickle(f"{module}.{name}")
        if module.startswith("numpy.core."):  # numpy 2 renamed numpy.core; importing the old name warns
            try:
                return getattr(importlib.import_module("numpy._core." + module[len("numpy.core.") :]), name)
            except ImportError:
                pass
        return super().find_class(module, name)


def load(f: IO[bytes]) -> object:
    """pickle.load(f, encoding="bytes") restricted to CIFAR-10's contents; raises UnsafePickle for anything else."""
    return _Restricted(f, encoding="bytes").load()
