"""A compiled run's compile: its kernels loaded from the compile cache first (training.cache_file), then the record of
its first step: how long it took, where the time went (Dynamo's phases and cache counters, common.torch_private)
and what the cache did. `for_run(...)` is what the training loop calls.

On request (`train --compile-traced-program`), a single-process run also keeps Dynamo's traced program (torch's caching
precompile, switched on from this run's torch.compile on), so a process with the file neither traces the model nor looks
its graphs up; a run whose model source changed traces anew (torch checks the sources the program was traced from). It
is off by default: torch weakens the program's guards (it warns of each) and keeps the program in the local Inductor
cache under the forward's name and line alone, where another project's function could share the key. What it needs of
torch is private: a torch without it compiles anew, and the cache's note says why.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import psutil
import torch

from common.torch_private import (
    cache_custom_autograd_functions,
    compile_counters,
    inductor_options,
    keep_traced_programs,
    mode_options,
    names_past_installed,
    traced_programs_unsupported,
)

from .cache_file import CompileCache


def since_launch() -> float:
    """Seconds since this process started: the interpreter, the imports and everything after them."""
    return time.time() - psutil.Process().create_time()


class Compiled:
    """A compiled run's first step: how long it took, where the time went, and the cache around it."""

    def __init__(self, cache: CompileCache | None, marks: dict[str, float] | None = None, traced: bool = False) -> None:
        self.cache, self.seconds, self.since_launch, self.counters, self.saved = cache, None, None, {}, None
        # keep and install Dynamo's traced program: torch's caching precompile, asked for (off by default)
        self.traced = traced and cache is not None
        self.timed_since_launch: float | None = None
        self.save_error: str | None = None
        # the set-up before the first step, in seconds since launch (most of a warm start): the caller's dict,
        # which goes on filling after this point, torch.compile and the compile cache's loading
        self.marks = marks if marks is not None else {}
        self.marks["compile cache loaded"] = round(since_launch(), 3)

    def compile(self, net: torch.nn.Module, mode: str | None, step_context: AbstractContextManager) -> torch.nn.Module:
        """torch.compile(net) inside the context the training step runs its forward in (its autocast). Where the
        compile cache held a traced program for this model, torch installs it here, loading its kernels, and builds
        its guards from the thread's state at this point: outside the step's autocast, every input's dispatch keys
        would differ from those it was traced with, its guards would fail, and Dynamo would trace the model anew.
        The mode's Inductor options are set around it too: torch rebuilds an installed program's graphs without
        calling Inductor, reading CUDA graphs on or off from the global options, so under "reduce-overhead" the
        program ran without them, at half the rate. Without a traced program to install,
        torch.compile alone: torch applies the mode's options when it calls Inductor."""
        t0 = time.perf_counter()
        options = mode_options(mode) if self.traced else {}
        if self.traced:  # on from here: every later compile of this model (a new shape) needs it, or torch stops
            keep_traced_programs()
        with step_context, inductor_options(options):
            net = torch.compile(net, mode=mode)
        if self.traced and compile_counters()["caches"].get("dynamo_cache_hit"):  # a program was installed
            names_past_installed()
            self.cache.note += f"; the traced program installed in {time.perf_counter() - t0:.1f} s"
        return net

    @property
    def done(self) -> bool:
        return self.seconds is not None

    @contextmanager
    def first_step(self) -> Iterator[None]:
        t0 = time.perf_counter()
        yield
        self.seconds = time.perf_counter() - t0
        self.since_launch = since_launch()

    def timed_steps_begin(self) -> None:
        """The first timed step starts: since launch, with what the warm-up steps held (CUDA-graph capture)."""
        self.timed_since_launch = since_launch()

    def finish(self, main: bool) -> str:
        """After the first step: read the counters, save the artifacts (rank 0), and say so in a line."""
        self.counters = compile_counters()
        caches = self.counters["caches"]
        hit, built = caches.get("fxgraph_cache_hit", 0), caches.get("fxgraph_cache_miss", 0)
        found = "the traced program" if caches.get("dynamo_cache_hit") else f"{hit} graphs"
        line = f"compiled in {self.seconds:.1f} s ({found} found in caches, {built} built)"
        if "unavailable" in self.counters:
            line = f"compiled in {self.seconds:.1f} s (what the caches gave is unknown: {self.counters['unavailable']})"
        if main:
            self.save()
        if self.saved is not None:
            line += f"; kernels saved to {self.saved} for the next run"
        if self.save_error is not None:
            line += f"; the compile cache was not saved: {self.save_error}"
        return line

    def save(self) -> None:
        """Save what is new; a full disk or an unwritable folder costs the next run its cache, never this run."""
        if self.cache is None:
            return
        try:
            self.saved = self.cache.save() or self.saved
        except OSError as e:
            self.save_error = f"{e.filename or self.cache.directory}: {e.strerror or e}"
        except Exception as e:  # torch's serialization too: the run that compiled goes on, the next one compiles
            self.save_error = f"{type(e).__name__}: {e}"

    def to_dict(self) -> dict:
        cache = None
        if self.cache is not None:
            cache = self.cache.to_dict() | {"saved": str(self.saved) if self.saved else None, "error": self.save_error}
        return {
            "first_step_s": self.seconds,
            "since_launch_s": self.since_launch,
            "timed_since_launch_s": self.timed_since_launch,
            "set_up_s": self.marks,
            **self.counters,
            "cache": cache,
        }


def for_run(
    cfg,
    model: str,
    model_config: dict,
    device: str,
    world_size: int,
    marks: dict[str, float] | None = None,
    *,
    grad_sync: str = "ddp",
) -> Compiled:
    """The compiled run's record, its cache's artifacts loaded first (every rank loads, rank 0 saves); `marks`: the
    points of the set-up passed so far, in seconds since launch; `grad_sync`: the way the run takes."""
    missing = cache_custom_autograd_functions()
    if cfg.compile_cache is None:
        return Compiled(None, marks)
    shape = {
        "model": model,
        "model_config": model_config,
        "batch_size": cfg.batch_size,
        "precision": cfg.precision,
        "compile_mode": "reduce-overhead",  # the one mode offered, kept in the key so earlier caches still match
        "channels_last": cfg.channels_last,
        "world_size": world_size,
        "vae": cfg.vae,
        "device": device.split(":")[0],
    }
    if (world_size > 1 or grad_sync == "step-graph") and grad_sync != "ddp":  # other graphs (DDP's split at its
        shape["grad_sync"] = grad_sync  # buckets; step-graph's without Inductor's CUDA graphs); ddp keeps names
    # ranks would write each other's programs; not tried with them or --vae
    traced = cfg.compile_traced_program and world_size == 1 and cfg.vae is None
    why_not = traced_programs_unsupported() if traced else None
    cache = CompileCache(cfg.compile_cache, shape, device)
    cache.load()
    cache.note += "".join(f"; {line}" for line in (missing, why_not) if line)
    return Compiled(cache, marks, traced=traced and why_not is None)
