"""Watching a program's loaders without editing it: the classes whose iterators hand out batches get an `__iter__`
that returns a measuring proxy.

Watched: `torch.utils.data.DataLoader` and every subclass (wrapped as they are defined: subclasses may override
`__iter__`), accelerate's prepared loaders (which wrap a DataLoader), FFCV's `Loader`, DALI's iterators
(`_DaliBaseIterator`, under every PyTorch iterator of DALI) and gpufeed's own `loaders.base.Loader` backends.
Generators around them (lucidrains' `cycle(dl)`) need nothing: they call `next()` on the proxy. The classes are
patched when their module is imported (a post-import hook on `sys.meta_path`), so a process that never imports torch
pays nothing.

Only the outermost loader is measured: accelerate's loader iterates a plain DataLoader inside its own `next()`, and
that inner request is passed through. Loaders are told apart by class, dataset class, length and the place in the
program that iterates them, so a DataLoader built anew every epoch is still one loader.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
import threading

from .meter import StepMeter, now
from .state import STATE, selected

_local = threading.local()  # .inside: a measured next() or __iter__ is running on this thread
_OURS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the directory holding bench/
# frames inside these are the loader's machinery, not the place in the program that iterates it
_SKIP = (
    "/torch/utils/data/",
    "/accelerate/",
    "/ffcv/",
    "/nvidia/dali/",
    f"{_OURS}/bench/watcher/",
    f"{_OURS}/loaders/",
)


def _inside() -> bool:
    return getattr(_local, "inside", False)


def _site() -> str:
    """file:line in the program that asked for the iterator (library frames skipped)."""
    f = sys._getframe(2)
    while f is not None and any(s in f.f_code.co_filename.replace("\\", "/") for s in _SKIP):
        f = f.f_back
    if f is None:
        return "?"
    path = f.f_code.co_filename.replace("\\", "/").split("/")
    return f"{'/'.join(path[-2:])}:{f.f_lineno}"


def loader_key(loader, site: str | None = None) -> tuple[str, tuple]:
    """(label, key) of a loader object: what a user names with --loader-name, and what meters are kept under."""
    cls = type(loader).__name__
    dataset = getattr(loader, "dataset", None)
    inner = f"({type(dataset).__name__})" if dataset is not None else ""
    try:
        length = len(loader)
    except Exception:  # an iterable dataset, an iterator without a length
        length = None
    site = site or _site()
    label = f"{cls}{inner}" + (f" x{length}" if length is not None else "") + f" at {site}"
    return label, (cls, inner, length, site)


def meter_for(label: str, key: tuple) -> StepMeter:
    meter = STATE.meters.get(key)
    if meter is None:
        meter = STATE.meters[key] = StepMeter(label, warmup=STATE.settings.warmup)
        STATE.started()
    return meter


def _first_tensor_len(batch) -> int | None:
    import torch

    stack = [batch]
    while stack:
        x = stack.pop(0)
        if isinstance(x, torch.Tensor):
            return int(x.shape[0]) if x.dim() else None
        if isinstance(x, dict):
            stack[:0] = list(x.values())
        elif isinstance(x, (list, tuple)):
            stack[:0] = list(x)
        elif hasattr(x, "__dataclass_fields__"):
            stack[:0] = [getattr(x, k) for k in x.__dataclass_fields__]
    return None


class WatchedIterator:
    """Delegates to the real iterator; records a request and a delivery around each outermost `next()`."""

    def __init__(self, it, meter: StepMeter, start: tuple) -> None:
        self._it, self._meter = it, meter
        # the first request starts when the iterator was asked for (`start`: host time and CUDA event before the
        # loader's own __iter__, where a DataLoader starts its worker processes): worker start-up is loading too
        self._start = start

    def __iter__(self):
        return self

    def __len__(self) -> int:
        return len(self._it)

    def __getattr__(self, name):
        return getattr(self._it, name)

    def __next__(self):
        if _inside():
            return next(self._it)
        _local.inside = True
        try:
            first = self._start is not None
            t0, ev0 = self._start or (now(), _event())
            self._start = None
            drained = ev0 is not None and ev0.query()
            batch = next(self._it)
            t1, ev1 = now(), _event() if ev0 is not None else None
            size = _first_tensor_len(batch) if self._meter.batch_size is None else None
            self._meter.add(t0, t1, ev0, ev1, drained, size, first)
            STATE.after_step(self._meter)
            return batch
        finally:
            _local.inside = False


def _event():
    """A CUDA event on the current stream, once the program has put CUDA to use (never initialise it ourselves)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    ev = torch.cuda.Event(enable_timing=True)
    ev.record()
    return ev


def _wrap_iter(cls) -> None:
    """Replace `cls.__iter__` (if `cls` defines one) by one that returns a WatchedIterator (or a replay)."""
    original = cls.__dict__.get("__iter__")
    if original is None or getattr(original, "_gpufeed_watch", False):
        return

    def __iter__(self):
        if _inside():  # a loader iterated inside another watched loader's __iter__ or next(): not the program's
            return original(self)
        _local.inside = True
        start = (now(), _event())
        try:
            label, key = loader_key(self)
            if STATE.settings.data_free and selected(label):
                from .replay import replay_iterator

                it = replay_iterator(self, key, lambda: original(self))
            else:
                it = original(self)
        finally:
            _local.inside = False
        return WatchedIterator(it, meter_for(label, key), start)

    __iter__._gpufeed_watch = True
    __iter__.__wrapped__ = original
    cls.__iter__ = __iter__


def watch_class_tree(base) -> None:
    """Wrap `base`, its subclasses so far, and every subclass defined from now on."""
    todo = [base]
    while todo:
        cls = todo.pop()
        _wrap_iter(cls)
        todo.extend(cls.__subclasses__())
    if base.__dict__.get("_gpufeed_subclass_hook"):
        return
    previous = base.__dict__.get("__init_subclass__")

    def __init_subclass__(cls, **kwargs):
        if previous is not None:
            previous.__get__(None, cls)(**kwargs)
        else:
            super(base, cls).__init_subclass__(**kwargs)
        _wrap_iter(cls)

    base.__init_subclass__ = classmethod(__init_subclass__)
    base._gpufeed_subclass_hook = True


def _patch_torch(module) -> None:
    watch_class_tree(module.DataLoader)


def _patch_accelerate(module) -> None:
    # accelerate >= 0.31 wraps a DataLoader instead of subclassing it, and moves each batch to the device inside
    # its own next(): the program's request is the adapter's
    if hasattr(module, "DataLoaderAdapter"):
        watch_class_tree(module.DataLoaderAdapter)


def _patch_ffcv(module) -> None:
    _wrap_iter(module.Loader)


def _patch_dali(module) -> None:
    watch_class_tree(module._DaliBaseIterator)


def _patch_gpufeed(module) -> None:
    """gpufeed's own loaders, of this copy or another (a `bench/watcher/` beside them); a program's own top-level
    `loaders` package is left alone."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(module.__file__ or "")))
    if os.path.isfile(os.path.join(root, "bench", "watcher", "hooks.py")):
        watch_class_tree(module.Loader)


TARGETS = {
    "torch.utils.data.dataloader": _patch_torch,
    "accelerate.data_loader": _patch_accelerate,
    "ffcv.loader.loader": _patch_ffcv,
    "nvidia.dali.plugin.base_iterator": _patch_dali,
    "loaders.base": _patch_gpufeed,
}


class _PostImport(importlib.abc.MetaPathFinder):
    """Lets the normal finders load a target module, then patches it before anyone else sees it."""

    def __init__(self) -> None:
        self._busy: set[str] = set()

    def find_spec(self, name, path, target=None):
        if name not in TARGETS or name in self._busy:
            return None
        self._busy.add(name)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._busy.discard(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            TARGETS[name](module)

        spec.loader.exec_module = exec_module
        return spec


def install() -> None:
    """Patch what is imported already and whatever target is imported later. Safe to call twice."""
    if not any(isinstance(f, _PostImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PostImport())
    for name, patch in TARGETS.items():
        if name in sys.modules:
            patch(sys.modules[name])
