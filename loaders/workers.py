"""The worker processes of the DataLoader-based backends (torch, hdf5, stream): how many a host can run, how they are
kept out of the stop signals meant for training, and how their failures become one LoaderError naming the loader and
the data."""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import LoaderOptions

# loading is CPU work or waits on storage: past this many workers a core, more of them only queue for the CPU
PER_CORE = 8
# descriptors a worker costs the process that starts it: 5 measured for its queue and its process, the rest for the
# batches it has in flight (torch shares each of their tensors through a descriptor of its own)
FILES_PER_WORKER = 16
FILES_KEPT = 256  # for the run itself: data files and shards, logs, the libraries it loads


def worker_limit() -> tuple[int, str]:
    """The most loader workers one process can start on this host, and why: the tightest of its cores, its open-files
    limit and its process limit (which every process of the user shares)."""
    cores = len(os.sched_getaffinity(0))
    limits = [(PER_CORE * cores, f"{PER_CORE} a core on {cores} core{'s' * (cores > 1)}")]
    files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if files != resource.RLIM_INFINITY:
        by_files = max(1, (files - FILES_KEPT) // FILES_PER_WORKER)
        limits.append((by_files, f"the open-files limit, ulimit -n {files}, at {FILES_PER_WORKER} a worker"))
    procs = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    if procs != resource.RLIM_INFINITY:
        limits.append((max(1, procs // 2), f"half the process limit, ulimit -u {procs}, shared by all your processes"))
    return min(limits, key=lambda limit: limit[0])


def too_many_workers(workers: int, option: str = "--workers") -> str | None:
    """The one-line refusal of a worker count this host cannot run (worker_limit), or None."""
    limit, why = worker_limit()
    if workers <= limit:
        return None
    return (
        f"{option} {workers}: more workers than this host can run, at most {limit} here ({why}); pass {option} "
        f"{limit} or fewer"
    )


def training_threads(workers: int, ranks: int = 1) -> tuple[int, str]:
    """Threads for one training process, and why: $OMP_NUM_THREADS where the user set it, else its rank's share of
    the cores less one core for each of its loader workers, at least 1. More threads than free cores only contend:
    on a busy 2-core machine a CPU step ran 3x faster on one thread than on torch's default of every core."""
    given = os.environ.get("OMP_NUM_THREADS", "")
    if given.isdigit() and int(given) > 0:
        return int(given), "as OMP_NUM_THREADS says"
    cores = len(os.sched_getaffinity(0))
    n = max(1, cores // max(1, ranks) - workers)
    over = f" over {ranks} ranks" if ranks > 1 else ""
    less = f" less {workers} loader worker{'s' * (workers != 1)}" if workers else ""
    return n, f"{cores} cores{over}{less}; OMP_NUM_THREADS overrides"


def set_training_threads(workers: int, ranks: int = 1, processes: bool = True) -> str:
    """Set this process's torch threads (training_threads); the line that says so. `processes`: the workers are
    DataLoader processes (start_worker gives each one thread), not threads of this process."""
    import torch

    n, why = training_threads(workers, ranks)
    torch.set_num_threads(n)
    each = ", 1 in each loader worker" if processes and workers else ""
    return f"threads: {n} for training ({why}){each}"


def dataloader_workers(workers: int, pin: bool, opts: LoaderOptions, persistent: bool) -> dict:
    """A DataLoader's keyword arguments for its `workers` processes and for pinning: `opts.prefetch` batches ahead a
    worker and `opts.mp_context`'s start method only where there are workers (DataLoader refuses them without), the
    workers kept from one epoch to the next where `persistent`."""
    return dict(
        num_workers=workers,
        pin_memory=pin,
        prefetch_factor=opts.prefetch if workers else None,
        persistent_workers=persistent and workers > 0,
        multiprocessing_context=opts.mp_context if workers else None,
    )


def start_worker(worker_id: int) -> None:
    """DataLoader `worker_init_fn` of every DataLoader-based backend: one thread, as its share of the cores is one
    core at most (and for what the worker starts: OMP_NUM_THREADS), and stop signals left to the parent."""
    import torch

    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"
    leave_stop_signals_to_the_parent(worker_id)


def leave_stop_signals_to_the_parent(_worker_id: int) -> None:
    """DataLoader `worker_init_fn`. A terminal's Ctrl-C and a scheduler's SIGTERM reach the whole process group; the
    training process turns them into a checkpoint and a clean exit between steps, but a worker killed by one makes the
    next fetch fail first. In a process group of its own a worker hears only its parent: the loader's shutdown, and
    PyTorch's check that the parent is alive."""
    os.setpgrp()


def worker_failure(error: BaseException, backend: str, data_dir: Path) -> str | None:
    """The one-line message for a DataLoader worker's failure, or None when `error` is not one. PyTorch reports a
    worker's exception as a new exception carrying the worker's whole traceback as text, and a dead worker (killed, out
    of memory, crashed in a library) as a RuntimeError naming its pid; neither says which loader or data it was."""
    text = str(error)
    if "DataLoader worker" in text and ("exited unexpectedly" in text or "killed by signal" in text):
        return (
            f"the {backend} loader's worker process died ({text.strip()}); its batches are lost, so the run stops: "
            "look for the kernel's out-of-memory killer (dmesg) and continue with --resume"
        )
    if "Original Traceback" in text:  # a library's error on bytes it could not decode: most often damaged files
        from .integrity import fix

        last = text.strip().splitlines()[-1]
        kind, _, message = last.partition(": ")
        what = message if " " not in kind else last
        return f"the {backend} loader failed reading {data_dir}: {what}; {fix(data_dir)}"
    return None


@contextmanager
def worker_errors(backend: str, data_dir: Path) -> Iterator[None]:
    """Turn a DataLoader worker's failure into one LoaderError naming the loader and the data."""
    try:
        yield
    except Exception as e:
        message = worker_failure(e, backend, data_dir)
        if message is None:
            raise
        from .errors import LoaderError

        raise LoaderError(message) from None
