"""Compiled kernels kept between runs and machines: torch's portable compile cache, one file per run shape.

A fresh machine compiles the model from nothing: Dynamo traces it, AOTAutograd derives the backward graph, Inductor
generates the kernels and a compiler builds them (Triton on a GPU, a C++ compiler on the CPU), then autotuning picks
among variants. `torch.compiler.save_cache_artifacts()` gathers what AOTAutograd, Inductor and the autotuner produced
in this process, found in the local caches or made anew, into one blob; `load_cache_artifacts()` in a new process,
on any machine, puts them back into its local caches, so its compile finds them there instead of generating and
building them again. The artifacts hold for one torch build and one kind of device, so a file records both, is named by
them, and a file made elsewhere is left alone with a message: the run compiles anew and saves its own beside it. On
request (`train --compile-traced-program`), a single-process run also keeps Dynamo's traced program (torch's caching
precompile, switched on from this run's torch.compile on), so a process with the file neither traces the model nor looks
its graphs up; a run whose model source changed traces anew (torch checks the sources the program was traced from). It
is off by default: torch weakens the program's guards (it warns of each) and keeps the program in the local Inductor
cache under the forward's name and line alone, where another project's function could share the key. A GPU's Triton
kernels also look for their autotuning results in the local Inductor cache folder they were compiled in: the file
records it, and a run under another folder is told how to keep it.

The directory (`train --compile-cache`) defaults to $GPUFEED_COMPILE_CACHE, else ~/.cache/gpufeed/compile. What it
holds is code that runs when it is loaded (torch's artifacts are pickles): copy it to a new machine of the same GPU
and torch only from a machine you trust, as you would the program itself, never inside a data directory that travels.
It is read as an SSH key is (training.trusted): only this user's files, in folders no one else can write; anything
else is skipped with the reason, never handed to torch (whose loading copies the artifacts into its own local cache,
where later runs would find them), and the run compiles anew. Folders it creates are private (0700), files 0600.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import platform
import re
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import torch

from .atomic import remove_stale, written
from .trusted import Untrusted, check_folder, make_private_dirs, open_trusted

FORMAT = "gpufeed-compile-cache-1"  # the first line of every file; bump when the layout changes
TRUST = "its files are code that runs when loaded, so only yours, in folders no one else can write, are read"


def environment(device: str) -> dict:
    """What the artifacts are valid for: the torch build and the device kind (their cache keys contain both)."""
    env = {"torch": torch.__version__, "python": platform.python_version()}
    if device.startswith("cuda"):
        index = torch.device(device).index or 0
        major, minor = torch.cuda.get_device_capability(index)
        env |= {
            "device": torch.cuda.get_device_name(index),
            "capability": f"{major}.{minor}",
            "cuda": torch.version.cuda,
        }
    else:
        env |= {"device": f"cpu ({platform.machine()})"}
    return env


def _digest(obj: dict) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _describe(env: dict) -> str:
    return f"torch {env.get('torch')} on {env.get('device')}"


@dataclass
class CompileCache:
    """One run shape's artifacts in `directory`: `load()` before the first compiled step, `save()` after it (and at
    the end, where more was compiled). `note` says what was found, for the run's log and summary."""

    directory: Path
    shape: dict  # what the compiled graphs depend on: model config, batch size, precision, compile mode, ranks
    device: str
    note: str = ""
    loaded: dict = field(default_factory=dict)  # artifact kind -> how many were loaded
    load_s: float = 0.0
    held: set = field(default_factory=set)  # (kind, key) of every artifact the file holds, as loaded or saved
    refused: str | None = None  # why the folder cannot be trusted: then nothing is read from it or written to it

    def __post_init__(self) -> None:
        self.env = environment(self.device)
        self.stem = f"{self.shape.get('model', 'model')}-{_digest(self.shape)}"
        self.path = self.directory / f"{self.stem}-{_digest(self.env)}.bin"

    def load(self) -> bool:
        """Put this shape's artifacts into the local caches; False (and `note` says why) where there are none here,
        or none this user can trust (training.trusted): a refused file never reaches torch."""
        t0 = time.perf_counter()
        try:
            check_folder(self.directory)
        except FileNotFoundError:
            self.note = f"none yet for this run shape in {self.directory}: compiling, then saving them there"
            return False
        except (Untrusted, OSError) as e:
            self.refused = str(e) if isinstance(e, Untrusted) else f"{self.directory}: {e.strerror or e}"
            self.note = f"not used: {self.refused}; {TRUST}; compiling anew, and saving nothing there"
            return False
        removed = remove_stale(self.directory, ".*.bin.tmp-*", "compile cache file")
        self.note = "".join(f"{line}; " for line in removed)
        try:
            header, payload = _read(self.directory, self.path.name)
        except FileNotFoundError:
            self.note += self._nothing_here()
            return False
        except Untrusted as e:
            self.note += f"{self.path} not loaded: {e}; {TRUST}; compiling anew, and replacing it"
            return False
        except (OSError, ValueError) as e:
            self.note += f"{self.path}: unreadable ({e}); compiling anew, and replacing it"
            return False
        if header["environment"] != self.env:
            self.note += (
                f"{self.path} was made with {_describe(header['environment'])}; this is "
                f"{_describe(self.env)}: compiling anew, and replacing it"
            )
            return False
        try:
            info = torch.compiler.load_cache_artifacts(payload)
        except Exception as e:  # a cache must never stop a run: the compile it would have saved is still possible
            info, why = None, f" ({type(e).__name__}: {e})"
        else:
            why = ""
        if info is None:
            self.note += f"{self.path}: torch could not load its artifacts{why}; compiling anew, and replacing it"
            return False
        self.loaded = {kind: len(keys) for kind, keys in info.artifacts.items() if keys}
        self.load_s = time.perf_counter() - t0
        self.held = _keys(info)
        kinds = ", ".join(f"{n} {kind}" for kind, n in self.loaded.items())
        self.note += f"loaded {kinds} artifacts from {self.path} in {self.load_s:.1f} s" + _moved(header)
        return True

    def _nothing_here(self) -> str:
        others = []
        for path in sorted(self.directory.glob(f"{self.stem}-*.bin")):
            try:
                others.append(_describe(_read(self.directory, path.name, header_only=True)[0]["environment"]))
            except (Untrusted, OSError, ValueError):
                continue
        if others:
            return (
                f"{self.directory} holds this model's kernels for {'; '.join(others)} only; this is "
                f"{_describe(self.env)}: compiling anew, saved beside them"
            )
        return f"none yet for this run shape in {self.directory}: compiling, then saving them there"

    def save(self) -> Path | None:
        """Write everything compiled or found in this process so far; None where it holds nothing new."""
        if self.refused:
            return None
        artifacts = torch.compiler.save_cache_artifacts()
        if artifacts is None or _keys(artifacts[1]) <= self.held:
            return None
        payload = artifacts[0]
        sha = hashlib.sha256(payload).hexdigest()
        header = {
            "format": FORMAT,
            "environment": self.env,
            "shape": self.shape,
            "sha256": sha,
            "bytes": len(payload),
            "saved": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "inductor_cache_dir": _inductor_dir(),
        }
        make_private_dirs(self.directory)
        with written(self.path, mode=0o600) as tmp, open(tmp, "wb") as f:  # 0600: code only this user may write
            f.write(json.dumps(header).encode() + b"\n" + payload)
        self.held = _keys(artifacts[1])
        return self.path

    def to_dict(self) -> dict:
        return {
            "file": str(self.path),
            "note": self.note,
            "loaded": self.loaded,
            "load_s": round(self.load_s, 3),
            "refused": self.refused,
        }


def _inductor_dir() -> str | None:
    """The local Inductor cache folder, from torch's private helper where this torch has it (read only: a folder
    name for the note of `_moved`), else from the variable that sets it; None where neither says."""
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir
    except ImportError:
        where = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        return os.path.abspath(where) if where else None
    return os.path.abspath(cache_dir())


def _moved(header: dict) -> str:
    """A warning where the artifacts were saved under another local Inductor cache than this process's, on a GPU. A
    Triton kernel restored from them looks for its autotuning results in the folder it was compiled in, so under
    another path it benchmarks every configuration again, a large part of a warm start (docs/BENCHMARKS.md, "Cold
    start")."""
    saved, here = header.get("inductor_cache_dir"), _inductor_dir()
    if not saved or not here or saved == here or "capability" not in header["environment"]:
        return ""
    return (
        f"; they were compiled under {saved}, this run's Inductor cache is {here}, so Triton will benchmark its "
        f"kernels again: set TORCHINDUCTOR_CACHE_DIR={saved} to spare it"
    )


def _keys(info) -> set[tuple[str, str]]:
    return {(kind, key) for kind, keys in info.artifacts.items() for key in keys}


def _read(directory: Path, name: str, header_only: bool = False) -> tuple[dict, bytes]:
    """(header, payload) of a cache file; Untrusted where another user could have written it (nothing is read),
    ValueError naming what is wrong with it."""
    with open_trusted(directory, name) as f:
        first = f.readline(1 << 16)
        payload = b"" if header_only else f.read()
    try:
        header = json.loads(first)
    except ValueError:
        raise ValueError("not a gpufeed compile cache (no JSON header)") from None
    ours = isinstance(header, dict) and header.get("format") == FORMAT
    if not ours or not isinstance(header.get("environment"), dict):
        raise ValueError(f"not a {FORMAT} file")
    if not header_only and hashlib.sha256(payload).hexdigest() != header.get("sha256"):
        raise ValueError("its artifacts do not match their checksum (truncated or damaged)")
    return header, payload


def compile_counters() -> dict:
    """Where this process's compile time went and what the caches gave, from Dynamo's own counters: seconds per phase
    (Dynamo's tracing of each frame, the backend: AOTAutograd and Inductor, Inductor's code generation, ...) and the
    FX-graph and AOTAutograd cache hits and misses. Read only; where this torch has them not as expected, both are
    empty and "unavailable" says why (the run is the same, its record says less)."""
    try:
        from torch._dynamo import utils

        phases = {k: round(v, 3) for k, v in utils.calculate_time_spent().items()}
        groups = {group: dict(utils.counters[group]) for group in ("inductor", "aot_autograd", "dynamo_cache")}
    except Exception as e:  # private: another torch may name or shape them otherwise
        return {"phases_s": {}, "caches": {}, "unavailable": f"this torch's compile counters: {type(e).__name__}: {e}"}
    # a bypass (neither hit nor miss) means AOTAutograd's cache was not used at all: the joint graph is traced anew
    wanted = (
        "fxgraph_cache_hit",
        "fxgraph_cache_miss",
        "autograd_cache_hit",
        "autograd_cache_miss",
        "autograd_cache_bypass",
        "dynamo_cache_hit",
        "dynamo_cache_miss",
    )
    counts = {k: v for group in groups.values() for k, v in group.items() if k in wanted}
    return {"phases_s": phases, "caches": counts}


def since_launch() -> float:
    """Seconds since this process started: the interpreter, the imports and everything after them."""
    return time.time() - psutil.Process().create_time()


class Compiled:
    """A compiled run's first step: how long it took, where the time went, and the cache around it."""

    def __init__(
        self, cache: CompileCache | None, set_up: dict[str, float] | None = None, traced: bool = False
    ) -> None:
        self.cache, self.seconds, self.since_launch, self.counters, self.saved = cache, None, None, {}, None
        # keep and install Dynamo's traced program: torch's caching precompile, asked for (off by default)
        self.traced = traced and cache is not None
        self.timed_since_launch: float | None = None
        self.save_error: str | None = None
        # the set-up before the first step, in seconds since launch (most of a warm start): the caller's dict,
        # which goes on filling after this point, torch.compile and the compile cache's loading
        self.set_up = set_up if set_up is not None else {}
        self.set_up["compile cache loaded"] = round(since_launch(), 3)

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
        options = _mode_options(mode) if self.traced else {}
        if self.traced:  # on from here: every later compile of this model (a new shape) needs it, or torch stops
            torch._dynamo.config.caching_precompile = True
        with step_context, torch._inductor.config.patch(options):
            net = torch.compile(net, mode=mode)
        if self.traced and compile_counters()["caches"].get("dynamo_cache_hit"):  # a program was installed
            _names_past_installed()
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
            "set_up_s": self.set_up,
            **self.counters,
            "cache": cache,
        }


def cache_custom_autograd_functions() -> str | None:
    """Let AOTAutograd's cache keep graphs that hold a custom autograd.Function, as the UNet's skip concatenation
    (model._CatDenseGrad) is. torch bypasses that cache for them by default, as a Function's Python could change
    unseen; Dynamo traces this one's forward and backward into the graph, so a changed backward is a new key (a CPU
    check: a cache miss and other gradients). Bypassed, every process traced the joint graph again, most of a start
    from the compile cache (docs/BENCHMARKS.md, "Cold start"). A torch without that switch keeps bypassing: the line
    returned says so."""
    import torch._functorch.config as config

    if not hasattr(config, "autograd_cache_allow_custom_autograd_functions"):
        name = "torch._functorch.config.autograd_cache_allow_custom_autograd_functions"
        return f"this torch has no {name}: graphs holding a custom autograd.Function (the UNet's) are traced anew"
    config.autograd_cache_allow_custom_autograd_functions = True
    return None


def traced_programs_unsupported() -> str | None:
    """Why this torch cannot keep Dynamo's traced program with the artifacts, None where it can: it needs the
    caching-precompile switch, the name counter `_names_past_installed` moves and the mode's options that
    `Compiled.compile` sets (all private: a torch without them, or with them otherwise, compiles anew)."""
    from torch._dynamo import bytecode_transformation as bt

    present = {
        "torch._dynamo.config.caching_precompile": hasattr(torch._dynamo.config, "caching_precompile"),
        "torch._dynamo.bytecode_transformation._unique_id_counter": hasattr(bt, "_unique_id_counter"),
        "torch._inductor.list_mode_options": callable(getattr(torch._inductor, "list_mode_options", None)),
    }
    missing = [name for name, there in present.items() if not there]
    if missing:
        return f"the traced program is not kept: this torch has no {', '.join(missing)}; Dynamo traces the model anew"
    return None


def _mode_options(mode: str | None) -> dict:
    from torch._inductor import list_mode_options

    return list_mode_options(mode) if mode else {}


def _names_past_installed() -> None:
    """Dynamo names the globals a trace puts into a module from one counter per process, and stops on an assertion
    where a name is taken. An installed program brings the names of the process that traced it, so a later trace here
    (a new input shape, a failed guard) would take the same names: move the counter past every such name (torch 2.11
    and 2.14 stop otherwise; tests/test_compile_cache.py traces anew after an install). The program's module is
    torch's, not the model's, so every module is looked at (a few milliseconds)."""
    from torch._dynamo import bytecode_transformation as bt

    taken = [
        int(m.group(1))
        for module in list(sys.modules.values())
        for name in list(getattr(module, "__dict__", ()))
        if name[-1:].isdigit() and (m := re.fullmatch(r"__\w*?_(\d+)", name))
    ]
    if taken:
        bt._unique_id_counter = itertools.count(max(next(bt._unique_id_counter), max(taken) + 1))


def for_run(
    cfg, model: str, model_config: dict, device: str, world_size: int, set_up: dict[str, float] | None = None
) -> Compiled:
    """The compiled run's record, its cache's artifacts loaded first (every rank loads, rank 0 saves); `set_up`: the
    points of the set-up passed so far, in seconds since launch."""
    missing = cache_custom_autograd_functions()
    if cfg.compile_cache is None:
        return Compiled(None, set_up)
    shape = {
        "model": model,
        "model_config": model_config,
        "batch_size": cfg.batch_size,
        "precision": cfg.precision,
        "compile_mode": cfg.compile_mode,
        "channels_last": cfg.channels_last,
        "world_size": world_size,
        "vae": cfg.vae,
        "device": device.split(":")[0],
    }
    if world_size > 1 and cfg.grad_sync != "ddp":  # another graph (DDP's is split at its buckets); ddp keeps old names
        shape["grad_sync"] = cfg.grad_sync
    # ranks would write each other's programs; not tried with them or --vae
    traced = cfg.compile_traced_program and world_size == 1 and cfg.vae is None
    why_not = traced_programs_unsupported() if traced else None
    cache = CompileCache(cfg.compile_cache, shape, device)
    cache.load()
    cache.note += "".join(f"; {line}" for line in (missing, why_not) if line)
    return Compiled(cache, set_up, traced=traced and why_not is None)
