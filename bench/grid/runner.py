"""`bench loaders`: expand the grid, then run each configuration in a fresh process, one after the other.

A fresh process per configuration means no configuration inherits another's warm page cache in its own address
space, leftover worker processes, allocator state or pinned-memory pool. Each child is its own process group, so
Ctrl-C reaches only this parent, which stops the running child (and its workers) and keeps every finished JSON;
rerunning with `resume` skips them. torch.compile's warm-up is paid once per grid, not per configuration: the
children share a persistent inductor cache (TORCHINDUCTOR_CACHE_DIR, FX graph and AOT autograd caches), and each
`train` loop loads and saves the compile cache (training.compile_cache), so the next grid, on this machine or another
of the same GPU, builds nothing either."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from common.atomic import write_json
from common.noreplace import rename_new
from common.stopping import Stopped

from .job import BACKEND_NAMES, Job, estimate_s, expand, runs_in_words

# the grid's fields that `expand` takes by the same names
_EXPANDED = (
    *("data", "backends", "workers", "pin_memory", "batch_sizes", "model", "steps", "warmup", "device", "cpus"),
    *("compile", "repeats", "crosscheck", "precision", "global_batch", "vae", "grad_sync"),
)


@dataclass(kw_only=True)
class GridConfig:
    data: Path  # a `dataprep convert` directory
    out: Path  # results: one JSON per configuration, results.csv, plots
    backends: tuple[str, ...] = BACKEND_NAMES
    workers: tuple[int, ...] = (0, 4, 8)  # none, a few, a core-hungry amount
    pin_memory: tuple[bool, ...] = (True, False)
    batch_sizes: tuple[int, ...] = (128,)  # DDPM's CIFAR-10 batch
    model: str = "none"  # none: the loader alone; else a training.model preset in the real training loop
    steps: int = 200  # measured steps: seconds per configuration for ddpm_cifar10 on a GPU, enough for a median
    warmup: int = 20  # left out: worker start-up, compilation, cuDNN autotuning, page cache
    device: str = "cuda"
    cpus: int | None = None  # cores per run (per rank), as on a node with fewer cores per GPU; None: all allowed
    nproc: tuple[int, ...] = (1,)  # data-parallel ranks under torchrun, one GPU each; several: a scaling table
    global_batch: int | None = None  # strong scaling: global_batch // nproc per rank instead of batch_sizes
    compile: bool = False  # torch.compile the model (its kernels shared through the compile cache, see train)
    precision: str = "bf16"  # the training loop's default
    repeats: int = 1  # >= 2 on the GPU for a run-to-run range
    crosscheck: bool = False  # add one profiled run per configuration: trace-derived starvation (GPU only)
    resume: bool = False  # skip configurations whose JSON already exists in `out`
    # stop starting configurations that would end past this many seconds (a command limit on a shared GPU host);
    # the rest are left for a rerun with resume. None: run the whole grid
    time_limit_s: float | None = None
    # seconds one configuration may run before it is stopped and recorded as failed (a hung loader, a wedged
    # driver). None: 10x its estimate, at least 10 minutes, which no healthy run comes near
    timeout_s: float | None = None
    progress: bool = True
    vae: str | None = None  # pixel or clip data: encode every batch in the step (train --vae), the online baseline
    grad_sync: str = "auto"  # under nproc > 1: how the ranks average gradients (train --grad-sync; auto: as train)
    command: str = field(default_factory=lambda: " ".join(["bench", *sys.argv[1:]]))

    def jobs(self, grid_id: str = "") -> list[Job]:
        return expand(grid_id=grid_id, nprocs=self.nproc, **{k: getattr(self, k) for k in _EXPANDED})


@dataclass
class GridOutcome:
    done: list[Path]  # JSONs of configurations that finished (this run or, with resume, before)
    failed: list[str]  # names of configurations whose run failed (their JSON holds the error)
    interrupted: bool
    left: int = 0  # configurations not started because of the time limit


# set by torchrun: a child that saw them would try to join the training job's process group (`train --loader
# fastest` runs its short bench from rank 0) and wait there for ranks that never come
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")


def child_env(cfg: GridConfig) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARS and not k.startswith("TORCHELASTIC_")}
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str((cfg.out / ".inductor-cache").resolve()))  # a user's own wins
    env |= {
        "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
        "TORCHINDUCTOR_AUTOGRAD_CACHE": "1",
        "GPUFEED_BENCH_COMMAND": cfg.command,
        "PYTHONUNBUFFERED": "1",
    }
    return env


def job_timeout_s(job: Job, timeout_s: float | None) -> float:
    return timeout_s if timeout_s is not None else max(600.0, 10 * estimate_s([job]))


def run_job(job: Job, path: Path, env: dict[str, str], timeout_s: float, log) -> bool:
    """Run one configuration in a fresh process group; True when its JSON holds figures. A run that crashes, is
    killed (the kernel's out-of-memory killer sends SIGKILL) or outlives `timeout_s` is recorded as failed."""
    from . import ranks

    cmd = [sys.executable, "-m", "bench.grid.run_one", "--job", json.dumps(job.to_dict()), "--out", str(path)]
    cmd = ranks.command(job, path) if job.nproc > 1 else cmd
    path.unlink(missing_ok=True)  # an earlier grid's result must not pass for this run's if the child dies silently
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        _write_error(path, job, f"timed out after {timeout_s:.0f} s (--timeout) and was stopped; see grid.log")
    except BaseException:  # Ctrl-C or SIGTERM: stop the child and its workers, leave no partial JSON behind
        _kill_group(proc, grace=1.0)  # within the seconds a stopped command has (common.stopping)
        ranks.clean(job, path)
        raise
    if job.nproc > 1:  # the ranks' records into one (a timeout's error record stays as it is)
        ranks.merge(job, path)
    if not path.exists():
        _write_error(path, job, f"the run {_how_it_ended(proc.returncode)} and wrote nothing; see grid.log")
    return "error" not in json.loads(path.read_text())


def _how_it_ended(returncode: int) -> str:
    if returncode >= 0:
        return f"exited with status {returncode}"
    name = signal.Signals(-returncode).name
    oom = " (out of memory? the kernel's OOM killer sends it)" if name == "SIGKILL" else ""
    return f"was killed by {name}{oom}"


def _kill_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM the run's process group, SIGKILL it if it has not ended `grace` seconds later."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
            os.killpg(proc.pid, signal.SIGCONT)  # a stopped process acts on SIGTERM only once it runs again
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _write_error(path: Path, job: Job, message: str) -> None:
    write_json(path, {"name": job.name, "job": job.to_dict(), "error": message})


def finished(path: Path, job: Job) -> bool:
    """A result of exactly this job (any grid) with figures: what --resume may skip."""
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    same = {"nproc": 1, **rec.get("job", {}), "grid_id": ""} == {**job.to_dict(), "grid_id": ""}  # nproc: older
    return same and "figures" in rec


def this_gpu_uuid(device: str) -> str | None:
    """The GPU the runs will use, as each run records it, asked in a child process so that the grid's own process
    never initialises CUDA. None on a CPU device or without a GPU."""
    if not device.startswith("cuda"):
        return None
    code = f"from common.run_record import hardware; print(hardware({device!r}).get('gpu_uuid', ''))"
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:  # a wedged driver: the runs themselves will fail and say so
        return None
    return out.stdout.strip() or None


def set_aside_foreign_data_free(
    out: Path, done: list[Job], jobs: list[Job], gpu_uuid: Callable[[], str | None], echo
) -> list[Job]:
    """A grid resumed on another GPU measures that GPU's own data-free rate: ratios compare runs of one machine. For
    each batch size with loader runs still to do whose finished data-free runs all ran elsewhere, the first of those
    is renamed after its GPU (kept, and still reported) and runs again here. `gpu_uuid()` says which GPU this is
    (None: no GPU); it is asked only when there is such a choice. Returns the jobs still finished."""
    from ..records.results import gpu_uuid as gpu_of

    todo_bs = {j.batch_size for j in jobs if j.kind == "loader" and j not in done}
    candidates = {bs for bs in todo_bs if any(j.kind == "data_free" and j.batch_size == bs for j in done)}
    gpu = gpu_uuid() if candidates else None
    for bs in sorted(candidates if gpu else ()):
        free = [j for j in done if j.kind == "data_free" and j.batch_size == bs]
        ran_on = [gpu_of(json.loads((out / f"{j.name}.json").read_text())) for j in free]
        if gpu in ran_on:
            continue
        src = out / f"{free[0].name}.json"
        stem, n = f"{free[0].name}-gpu{(ran_on[0] or 'unknown')[:8]}", 1
        dst = src.with_name(f"{stem}.json")
        while dst.exists():  # never rename over a kept result
            dst, n = src.with_name(f"{stem}-{n}.json"), n + 1
        rename_new(src, dst)
        done = [j for j in done if j is not free[0]]
        echo(f"{src.name} ran on another GPU: kept as {dst.name}; measuring this GPU's data-free rate")
    return done


def _grid_id(path: Path) -> str:
    return json.loads(path.read_text())["job"].get("grid_id") or ""


def run_grid(cfg: GridConfig, echo=print) -> GridOutcome:
    """Run every configuration, print the estimate first, finalize (data-free ratios, verdicts, CSV) at the end,
    also after Ctrl-C, which is re-raised as KeyboardInterrupt once the finished results are safe."""
    from tqdm import tqdm

    from ..records.results import finalize

    cfg.out.mkdir(parents=True, exist_ok=True)
    jobs = cfg.jobs()
    done = [j for j in jobs if cfg.resume and finished(cfg.out / f"{j.name}.json", j)]
    done = set_aside_foreign_data_free(cfg.out, done, jobs, lambda: this_gpu_uuid(cfg.device), echo)
    # a resumed grid keeps its id: `fastest` reads one grid, the latest, and must see all of it
    grid_id = min((_grid_id(cfg.out / f"{j.name}.json") for j in done), default="")
    jobs = cfg.jobs(grid_id or datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ"))
    finished_names = {j.name for j in done}
    todo = [j for j in jobs if j.name not in finished_names]
    echo(
        f"{runs_in_words([j.name for j in jobs])} ({len(jobs) - len(todo)} already done), estimated "
        f"{estimate_s(todo) / 60:.1f} min; results in {cfg.out}"
    )
    env, outcome, stop = child_env(cfg), GridOutcome([], [], False), None
    outcome.done = [cfg.out / f"{j.name}.json" for j in jobs if j not in todo]
    bar = tqdm(todo, desc="bench", unit="config", disable=not cfg.progress, file=sys.stderr, dynamic_ncols=True)
    t_start, took = time.perf_counter(), []
    try:
        with open(cfg.out / "grid.log", "ab") as log:
            for i, job in enumerate(bar):
                # expected to take as long as the slowest of the last three (past the first's cold compile); the
                # first always runs, so every call makes progress
                expected = max(took[-3:], default=0.0)
                if cfg.time_limit_s is not None and time.perf_counter() - t_start + expected > cfg.time_limit_s:
                    outcome.left = len(todo) - i
                    break
                bar.set_postfix_str(job.name, refresh=True)
                log.write(f"\n=== {time.strftime('%H:%M:%S')} {job.name}\n".encode())
                log.flush()
                path, t0 = cfg.out / f"{job.name}.json", time.perf_counter()
                ok = run_job(job, path, env, job_timeout_s(job, cfg.timeout_s), log)
                took.append(time.perf_counter() - t0)
                log.write(f"=== {job.name}: {'done' if ok else 'FAILED'} in {took[-1]:.1f} s\n".encode())
                (outcome.done if ok else outcome.failed).append(path if ok else job.name)
    except (KeyboardInterrupt, Stopped) as e:
        outcome.interrupted, stop = True, e
    finally:
        bar.close()
        finalize(cfg.out)
    if outcome.left:
        echo(f"time limit: {outcome.left} runs not started; rerun the same command with --resume")
    if outcome.interrupted:
        kept = f"{runs_in_words([p.stem for p in outcome.done])} finished, kept in {cfg.out}"
        if isinstance(stop, Stopped):  # SIGTERM, or Ctrl-C under the bench command: the signal decides the exit code
            stop.args = (kept,)
            raise stop
        raise KeyboardInterrupt(kept)
    return outcome
