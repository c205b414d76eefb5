"""What `train --loader fastest` measures when no bench results match: one process, one model, about a minute.

A bench grid starts a fresh process per configuration, so a compiled model pays its graph load and CUDA-graph capture
every time (docs/BENCHMARKS.md, "Cold start"). The probe pays them once: it runs the real training loop
(`training.loop.main`) in this process on a throwaway copy of the model, and feeds that loop itself, step by step:

1. the data-free rate: one batch already on the device, again and again, after the compile and capture are done;
2. candidate loaders' ceilings, each between two steps of the loop (the device idle, no model): samples per second
   delivered to the device, `ceiling_s` seconds after two warm-up batches. Backends go least host work per sample
   first (resident `gpu`, DALI, FFCV, HDF5, files); a backend's worker count goes up only while its ceiling stays
   under the data-free rate plus `headroom`; the ceilings stop at a candidate that keeps up while keeping fewer than
   `enough_cores` busy at the model's rate (none could save more), and resume if every one measured fails in step 3;
3. the candidates whose ceiling clears that bar, cheapest first (the CPU cores each keeps busy at the model's rate,
   from its ceiling run), confirmed in the loop: `loader_warmup` steps, then `segment_s` seconds of steps, until one
   trains at 99% of the data-free rate or more with under 1% starvation (none past `budget_s` but the first);
4. the data-free rate again, so the data-free runs have two repeats: their range is the spread `fastest` ties by.

A ceiling is trusted only to rule a loader out (a loader slower alone than the model's appetite cannot feed it) and to
order the rest; only a measurement in the training loop, against the data-free rate of the same process, picks. The
loop's steps are timed by its own StepTimer (CUDA events on a GPU), exactly as a bench run's are; the probe ends the
loop by raising ProbeDone from the feed. The compile (minutes for `ddpm_cifar10` with an empty torch.compile cache,
seconds from a warm one: docs/BENCHMARKS.md, "Cold start") is the model's own: the training that follows reuses the
cache.

This module is the feed: what each step of the loop trains on, and what the probe decides from the steps' times
(its settings, candidates and bar: probe_plan.py).
probe_run.py starts the loop on it, then writes the data-free and confirming windows as bench result records (one grid),
so `fastest` reads them like a grid's, `bench report` tables them, and a second call is instant;
`fastest-probe-GRID.json` beside them holds every ceiling, the order tried and where the time went. Ctrl-C stops the
probe after the current step; nothing is written."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from .probe_plan import MAX_STARVATION, MIN_VS_DATA_FREE, ProbeConfig, candidates

DONE = ("done",)  # what the last step tells the other ranks: no more steps


class ProbeDone(Exception):
    """Raised by the probe's feed when it has measured everything: it ends the training loop it feeds."""


class Feed:
    """The loader the probe's training loop sees: each batch is the probe's next step."""

    def __init__(self, steps: Iterator) -> None:
        self.steps = steps

    def __iter__(self) -> Iterator:
        return self.steps

    def __len__(self) -> int:
        return 2**62  # one endless epoch: the probe ends it

    def set_epoch(self, epoch: int) -> None:
        pass

    def close(self) -> None:
        pass


class Probe:
    """The probe's state while the loop runs: the windows measured, the ceilings, the candidates tried."""

    def __init__(self, data: Path, manifest: dict, key: dict, cfg: ProbeConfig, monitor, echo) -> None:
        self.data, self.manifest, self.key, self.cfg, self.monitor, self.echo = data, manifest, key, cfg, monitor, echo
        self.i, self.timer, self.t0 = 0, None, time.perf_counter()
        self.windows: list[dict] = []  # {"kind", "config", "steps": (a, b), "first_batch_s"}
        self.ceilings: list[dict] = []
        self.failed: list[dict] = []  # candidates whose confirmation raised
        self.times: dict[str, float] = {}
        # under several ranks (together.py): this rank's shard, and what each step eats told to the other ranks
        self.shard: dict[str, int] = {}
        self.tell: Callable[[tuple | None], None] = lambda cand: None

    def step(self, batch, cand: tuple | None = None):
        """The batch of the next step; `cand` is the loader configuration it came from (None: the resident batch)."""
        self.tell(cand)  # before counting: under several ranks it may refuse the step (together.py)
        self.i += 1
        return batch

    def window(self, source: Iterator, cand: tuple | None = None) -> Iterator:
        """Steps from `source` for at least segment_s seconds and min_steps steps; returns (first, end) step."""
        a, t0 = self.i, time.perf_counter()
        while self.i - a < self.cfg.min_steps or time.perf_counter() - t0 < self.cfg.segment_s:
            yield self.step(next(source), cand)
        return a, self.i

    def rate(self, a: int, b: int) -> tuple[float, float]:
        """(samples/s, starvation) of steps [a, b), from the loop's own timer."""
        s = self.timer.summary(skip=a, stop=b)
        return self.key["batch_size"] * s.steps / s.wall_s, s.starvation

    def run(self, resident) -> Iterator:
        """The steps, in order: data-free, ceilings between steps, confirmations, data-free again."""
        from training.starvation import latest_timer

        self.timer = latest_timer()  # the loop's own, created just before its first fetch
        forever = iter(lambda: resident, None)
        for _ in range(self.cfg.warmup):
            yield self.step(resident)
        self.times["model_warmup_s"] = time.perf_counter() - self.t0
        free = yield from self.window(forever)
        self.windows.append({"kind": "data_free", "steps": free})
        appetite = self.rate(*free)[0]
        self.echo(f"data-free: {appetite:,.0f} samples/s ({self.times['model_warmup_s']:.0f} s to compile and warm up)")
        backends = iter(candidates(self.manifest["formats"], self.key["device"], _cores(), self.cfg))
        while True:  # more ceilings only when every candidate measured so far failed in the loop
            more = yield from self.ceilings_until_cheap(backends, appetite, resident)
            if (yield from self.confirm_all(appetite, resident)) or not more or self.over_budget():
                break
        free = yield from self.window(forever)
        self.windows.append({"kind": "data_free", "steps": free})
        self.tell(DONE)
        raise ProbeDone

    def fits(self, c: dict, appetite: float) -> bool:
        return c.get("samples_per_s", 0) >= (1 + self.cfg.headroom) * appetite

    def over_budget(self) -> bool:
        return time.perf_counter() - self.t0 > self.cfg.budget_s

    def ceilings_until_cheap(self, backends: Iterator, appetite: float, resident) -> Iterator:
        """Ceilings backend by backend (more workers only while too slow) until one keeps up at under enough_cores;
        returns whether backends are left."""
        t = time.perf_counter()
        for options in backends:
            for cand in options:
                c = self.ceiling(cand, appetite)
                yield self.step(resident)  # a step between ceilings, so the loop sees Ctrl-C
                if self.fits(c, appetite):
                    break
            if self.fits(c, appetite) and (c["cores_at_appetite"] or 0.0) < self.cfg.enough_cores:
                self.times["ceilings_s"] = self.times.get("ceilings_s", 0.0) + time.perf_counter() - t
                return True  # no other candidate could keep fewer cores busy by more than enough_cores
        self.times["ceilings_s"] = self.times.get("ceilings_s", 0.0) + time.perf_counter() - t
        return False

    def ceiling(self, cand: tuple, appetite: float) -> dict:
        """Samples/s of one configuration alone, and the CPU cores it keeps busy at the model's rate."""
        import torch

        from loaders import build_loader
        from training.data import EpochStream

        rec = {"config": cand}
        dev = self.key["device"]
        try:
            t0 = time.perf_counter()
            with build_loader(cand[0], self.data, **self.loader_options(cand)) as loader:
                stream, sink = EpochStream(loader), torch.zeros((), device=dev)
                for _ in range(2):
                    sink += next(stream).x.float().mean()
                rec["first_batch_s"] = time.perf_counter() - t0
                _sync(dev)
                n, t1 = 0, time.perf_counter()
                while time.perf_counter() - t1 < self.cfg.ceiling_s or n < 3 * self.key["batch_size"]:
                    x = next(stream).x
                    sink += x.float().mean()
                    n += x.shape[0]
                _sync(dev)
                t2 = time.perf_counter()
        except Exception as e:  # a backend that cannot run here (no extra, no room on the device) is left out
            rec["error"] = f"{type(e).__name__}: {e}"
            self.echo(f"ceiling {_label(cand)}: failed, left out ({rec['error'][:200]})")
        else:
            rec["samples_per_s"] = n / (t2 - t1)
            cores = self.monitor.figures(t1, t2)["cpu_cores"]
            rec["cpu_cores"] = cores  # the whole process, the consumer's thread included
            rec["cores_at_appetite"] = None if cores is None else cores * appetite / rec["samples_per_s"]
            self.echo(f"ceiling {_label(cand)}: {rec['samples_per_s']:,.0f} samples/s")
        self.ceilings.append(rec)
        return rec

    def confirm_all(self, appetite: float, resident) -> Iterator:
        """Confirm the candidates not yet confirmed whose ceiling clears the bar, cheapest first, until one trains
        at the bar (returns True then); when none can keep up alone, the fastest, so that the pick is measured."""
        done = [w["config"] for w in self.windows if w["kind"] == "loader"] + [c["config"] for c in self.failed]
        measured = [c for c in self.ceilings if "samples_per_s" in c and c["config"] not in done]
        fits = [c for c in measured if self.fits(c, appetite)]
        if not fits and not done:
            fits = sorted(measured, key=lambda c: -c["samples_per_s"])[:1]
        order = sorted(fits, key=lambda c: (c["cores_at_appetite"] or 0.0, c["config"][1] or 0))
        t = time.perf_counter()
        try:
            for n, c in enumerate(order):
                if (n or done) and self.over_budget():
                    self.echo(f"time budget ({self.cfg.budget_s:.0f} s) spent: {len(order) - n} left unconfirmed")
                    return False
                got = yield from self.confirm(c["config"], resident)
                if got and got[0] >= MIN_VS_DATA_FREE * appetite and got[1] < MAX_STARVATION:
                    return True
            return False
        finally:
            self.times["confirm_s"] = self.times.get("confirm_s", 0.0) + time.perf_counter() - t

    def confirm(self, cand: tuple, resident) -> Iterator:
        """One candidate in the loop; returns (samples/s, starvation), or None when it failed."""
        from loaders import build_loader
        from training.data import EpochStream

        t0, loader = time.perf_counter(), None
        try:
            loader = build_loader(cand[0], self.data, **self.loader_options(cand))
            stream = EpochStream(loader)
            yield self.step(next(stream), cand)
            first = time.perf_counter() - t0
            for _ in range(self.cfg.loader_warmup - 1):
                yield self.step(next(stream), cand)
            a, b = yield from self.window(stream, cand)
        except Exception as e:  # recorded in the probe's summary; the next candidate is tried
            self.failed.append({"config": cand, "error": f"{type(e).__name__}: {e}"})
            self.echo(f"confirm {_label(cand)}: failed ({type(e).__name__}: {str(e)[:200]})")
            return None
        finally:
            if loader is not None:
                loader.close()
        self.windows.append({"kind": "loader", "config": cand, "steps": (a, b), "first_batch_s": first})
        got = self.rate(a, b)
        self.echo(f"confirm {_label(cand)}: {got[0]:,.0f} samples/s in the training loop, {got[1]:.2%} starvation")
        return got

    def figures(self, timer, monitor, windows: list[dict]) -> list[dict]:
        """This process's figures of each window, from its own step timer and resource monitor (as a bench record's)."""
        out = []
        for w in windows:
            a, b = w["steps"]
            s = timer.summary(skip=a, stop=b)
            figures = {
                "samples_per_s": self.key["batch_size"] * s.steps / s.wall_s,
                "starvation": s.to_dict(),
                "first_batch_s": w.get("first_batch_s", 0.0),
            }
            figures |= monitor.figures(*timer.window(a, b))
            if figures.get("cpu_cores") is not None:
                figures["cpu_s_per_1k_samples"] = 1000 * figures["cpu_cores"] / figures["samples_per_s"]
            out.append(figures)
        return out

    def loader_options(self, cand: tuple) -> dict:
        workers, pin = cand[1] or 0, bool(cand[2])
        return dict(
            batch_size=self.key["batch_size"], workers=workers, pin_memory=pin, device=self.key["device"], **self.shard
        )


def _label(cand: tuple) -> str:
    b, w, p = cand
    return (
        b
        + ("" if w is None else f", {w} worker{'s' * (w != 1)}")
        + ("" if p is None else f", pin_memory {'on' if p else 'off'}")
    )


def _cores() -> int:
    return len(os.sched_getaffinity(0))


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
