"""The Python side of `bench watch`, for those who prefer two lines of code to a wrapper command:

    from bench import watch
    for batch in watch(loader): ...
    print(watch.summary()["verdict"])

It is the same path as the command: the same meter per loader, the same figures and words, and under
`bench watch -- python prog.py` the program's own `watch(...)` calls join the command's measurement (and its
data-free replay) instead of measuring twice."""

from __future__ import annotations

from .hooks import WatchedIterator, _event, loader_key, meter_for
from .meter import now
from .state import STATE, selected
from .verdict import verdict


class Watch:
    def __call__(self, loader, name: str | None = None):
        """An iterator over `loader` (anything iterable) that measures each batch request."""
        start = (now(), _event())  # before iter(): a DataLoader starts its worker processes there
        it = iter(loader)
        if isinstance(it, WatchedIterator):  # a loader class the hooks know: measured (or replayed) already
            return it
        label, key = (name, ("watch", name)) if name else loader_key(loader)
        if STATE.settings.data_free and selected(label):
            from .replay import replay_iterator

            fresh = [it]
            it = replay_iterator(loader, key, lambda: fresh.pop() if fresh else iter(loader))
        return WatchedIterator(it, meter_for(label, key), start)

    def summary(self) -> dict | None:
        """Figures of the training loader (the one consumed most, or the one named with --loader-name) and the
        verdict; None before two steps past warm-up (STATE.settings.warmup, 20 by default)."""
        meter = STATE.chosen()
        fig = meter.figures(final=True) if meter else None
        return None if fig is None else fig | {"verdict": verdict(fig)}


watch = Watch()
