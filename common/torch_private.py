"""Every private part of torch that gpufeed uses, here and nowhere else, each listed in USED and pinned by a test to the
torch versions setup.cfg names (tests/integration/test_private_apis.py): the foreach kernels of the EMA and the weight
check, a DataLoader's worker shutdown, Dynamo's counters of where the compile time went, AOTAutograd's switch for graphs
holding a custom autograd.Function, the local Inductor cache folder, Inductor's options, and what keeping Dynamo's
traced program needs (`train --compile-traced-program`: torch's caching precompile). Where a torch has one of the
compile parts not as expected, the run is the same: it compiles anew, or its record says less, and a line says why.
"""

from __future__ import annotations

import importlib
import itertools
import os
import re
import sys

import torch

# the private names used, for the version pin: a torch without one of them is not one gpufeed was tested with
USED = (
    "torch._foreach_add_",
    "torch._foreach_copy_",
    "torch._foreach_lerp_",
    "torch._foreach_mul_",
    "torch._foreach_norm",
    "torch._foreach_sub",
    "torch.utils.data.dataloader._MultiProcessingDataLoaderIter._shutdown_workers",
    "torch._dynamo.utils.calculate_time_spent",
    "torch._dynamo.utils.counters",
    "torch._dynamo.config.caching_precompile",
    "torch._dynamo.bytecode_transformation._unique_id_counter",
    "torch._functorch.config.autograd_cache_allow_custom_autograd_functions",
    "torch._functorch.config.enable_autograd_cache",
    "torch._inductor.config.fx_graph_cache",
    "torch._inductor.config.patch",
    "torch._inductor.list_mode_options",
    "torch._inductor.runtime.cache_dir_utils.cache_dir",
)

# the foreach kernels: one launch for a whole list of tensors (the EMA, the weight check, gradient copies)
foreach_add_, foreach_copy_, foreach_lerp_ = torch._foreach_add_, torch._foreach_copy_, torch._foreach_lerp_
foreach_mul_, foreach_norm, foreach_sub = torch._foreach_mul_, torch._foreach_norm, torch._foreach_sub


def missing(names: tuple[str, ...] = USED) -> list[str]:
    """The names this torch lacks (each imported down to its module, then looked up attribute by attribute)."""
    return [name for name in names if not _resolves(name)]


def _resolves(name: str) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                found = getattr(found, attr)
        except AttributeError:
            return False
        return True
    return False


def workers_running(loader) -> bool:
    """Whether a DataLoader with persistent workers holds an iterator, and so workers, from an earlier epoch."""
    return getattr(loader, "_iterator", None) is not None


def shutdown_workers(loader) -> None:
    """Stop a DataLoader's worker processes now and drop its iterator: torch has no public call for it, and left to
    the collector the workers outlive the loader's close()."""
    iterator = getattr(loader, "_iterator", None)
    if iterator is not None:
        shutdown = getattr(iterator, "_shutdown_workers", None)  # a single-process iterator has none
        if shutdown is not None:
            shutdown()
        loader._iterator = None


def keep_traced_programs() -> None:
    """Dynamo's caching precompile on, for every later compile of the model too (a new shape), or torch stops."""
    torch._dynamo.config.caching_precompile = True


def inductor_options(options: dict):
    """A context in which Inductor's global options are `options`."""
    import torch._inductor.config

    return torch._inductor.config.patch(options)


def compile_caches_on() -> dict[str, bool]:
    """Whether Inductor's FX-graph cache and AOTAutograd's cache are on, as torch's config says."""
    import torch._functorch.config as functorch
    import torch._inductor.config as inductor

    return {
        "fx_graph_cache": bool(getattr(inductor, "fx_graph_cache", False)),
        "autograd_cache": bool(getattr(functorch, "enable_autograd_cache", False)),
    }


def inductor_dir() -> str | None:
    """The local Inductor cache folder, from torch's private helper where this torch has it (read only: a folder
    name for the compile cache's notes, training.cache_file), else from the variable that sets it; None where neither
    says."""
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir
    except ImportError:
        where = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        return os.path.abspath(where) if where else None
    return os.path.abspath(cache_dir())


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
    caching-precompile switch, the name counter `names_past_installed` moves and the mode's options that
    `Compiled.compile` sets (training.compile_cache; all private: a torch without them, or with them otherwise,
    compiles anew)."""
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


def mode_options(mode: str | None) -> dict:
    from torch._inductor import list_mode_options

    return list_mode_options(mode) if mode else {}


def names_past_installed() -> None:
    """Dynamo names the globals a trace puts into a module from one counter per process, and stops on an assertion
    where a name is taken. An installed program brings the names of the process that traced it, so a later trace here
    (a new input shape, a failed guard) would take the same names: move the counter past every such name (torch 2.11
    and 2.14 stop otherwise; tests/training/test_compile_cache.py traces anew after an install). The program's module is
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
