"""What the loop reports: a tqdm bar every step, a log line and a metrics.jsonl record every `log_every` steps (and,
with `tensorboard`, the same scalars and every sample grid as TensorBoard events).

Window figures come from `StepTimer.summary` over the window's steps (CUDA events on GPU), so images/s and
TFLOP/s include the time the device waited for data. Reading them syncs the device once per window."""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from loaders import backend_label

from . import ddp
from .config import TrainConfig
from .summary import ranks_detail

# metrics.jsonl keys -> TensorBoard tags ("host wait": the median time the host blocked on the next batch)
BOARD_TAGS = {
    "loss": "train/loss",
    "images_per_s": "speed/images_per_s",
    "starvation": "speed/starvation",
    "wait_median_ms": "speed/host_wait_ms",
    "tflops": "speed/tflops",
    "mfu": "speed/mfu",
    "memory_gib": "device/memory_gib",
}


# each rank's own figures, gathered on every rank at the end of a run (RunSummary.ranks)
RANK_FIGURES = ("samples_per_s", "starvation", "host_behind", "wait_median_ms", "param_checksum")


def _none(row: list[float]) -> list[float | None]:
    return [None if math.isnan(v) else v for v in row]


def waited_on(idle: list[list[float]], span_s: float) -> dict:
    """Under DDP a rank whose input is late holds every rank at the next all-reduce, so the group loses, at each step,
    the longest wait of any rank. From every rank's idle seconds per step (`idle[rank][step]`): `starvation_any`, the
    share of the span that some rank spent waiting for its input (the time every GPU lost to input); `waited_on_rank`,
    the rank whose waits were the longest most of that time, and `waited_on_share`, its part of it."""
    lost = [0.0] * len(idle)
    for step in zip(*idle):
        worst = max(range(len(step)), key=lambda r: step[r])
        lost[worst] += step[worst]
    total = sum(lost)
    rank = max(range(len(idle)), key=lambda r: lost[r])
    return {
        "starvation_any": total / span_s if span_s > 0 else 0.0,
        "waited_on_rank": rank if total > 0 else None,
        "waited_on_share": lost[rank] / total if total > 0 else None,
    }


def group_headline(starvation: dict) -> dict:
    """Under several ranks the headline `starvation` is the group's (`starvation_any`): a rank held at the all-reduce
    by another's late input looks busy, so its own figure hides what every GPU lost. That own figure stays beside it
    as `starvation_own`. One process: unchanged."""
    if starvation.get("starvation_any") is None:
        return starvation
    return starvation | {"starvation": starvation["starvation_any"], "starvation_own": starvation["starvation"]}


def merged(ranks: list[dict], key: str) -> dict:
    """KEY_mean over ranks and the worst rank (KEY_max, KEY_worst_rank): under DDP every step waits for the slowest
    rank, so one starved rank idles every GPU. None where no rank has the figure (host_behind on CPU)."""
    have = [r for r in ranks if r[key] is not None]
    worst = max(have, key=lambda r: r[key], default=None)
    mean = sum(r[key] for r in have) / len(have) if have else None
    return {f"{key}_mean": mean, f"{key}_max": worst and worst[key], f"{key}_worst_rank": worst and worst["rank"]}


class MetricsLog:
    def __init__(self, cfg: TrainConfig, world: ddp.Dist, device: str, start_step: int, backend: str, reason) -> None:
        from tqdm import tqdm

        from .profiling import peak_tflops

        self.cfg, self.world, self.device = cfg, world, device
        self.cuda = device.startswith("cuda")
        self.peak, self.peak_name = peak_tflops(device, cfg.precision)
        self.last_logged = 0  # timer steps already covered by a window
        self.images_per_step = cfg.batch_size * world.world_size
        self.file = None
        self.bar = tqdm(
            total=cfg.steps,
            initial=start_step,
            unit="step",
            disable=not (cfg.progress and world.main),
            file=sys.stderr,
            dynamic_ncols=True,
        )
        if world.main:
            cfg.out.mkdir(parents=True, exist_ok=True)
            self.file = open(cfg.out / "metrics.jsonl", "a")  # appended to across resumes
            peak = f"{self.peak:.0f} TFLOP/s ({self.peak_name})" if self.peak else "unknown for this device"
            if reason:  # a loader given to the loop (bench's runs, `fastest`'s probe) is the caller's to describe
                mfu = f"; MFU peak: {peak}" if self.cuda else ""
                self.write(f"data: {backend_label(backend, device)} ({reason}){mfu}")
        self.board = None
        if world.main and cfg.tensorboard:  # the ecosystem's viewer: `tensorboard --logdir RUN_DIR/tensorboard`
            from torch.utils.tensorboard import SummaryWriter

            self.board = SummaryWriter(str(cfg.out / "tensorboard"), purge_step=start_step + 1 if start_step else None)

    def write(self, line: str) -> None:
        if self.world.main:
            self.bar.write(line, file=sys.stderr)

    @contextmanager
    def compiling(self, step: int) -> Iterator[None]:
        """The first compiled step takes minutes on a fresh machine: the bar says it is compiling, with a clock."""
        self.write(f"step {step}: compiling the model (minutes on a fresh machine, less with the compile cache)")
        t0, done = time.perf_counter(), threading.Event()

        def tick() -> None:  # Dynamo and Inductor hold the GIL in turns of 5 ms at most: this thread gets its turn
            while not done.wait(1.0):
                self.bar.set_description_str(f"compiling {time.perf_counter() - t0:.0f} s")

        clock = threading.Thread(target=tick, name="compile-clock", daemon=True)
        if self.world.main and not self.bar.disable:
            clock.start()
        try:
            yield
        finally:
            done.set()
            if clock.is_alive():
                clock.join()
                self.bar.set_description_str("")

    def step(self, step: int, loss: float, timer) -> None:
        if not self.world.main or self.bar.disable:
            return
        dt = timer.wall[-1] - timer.wall[-2] if len(timer.wall) > 1 else float("nan")
        rate = self.images_per_step / dt if dt > 0 else float("nan")
        self.bar.set_postfix(
            loss=f"{loss:.4f}", samples_s=f"{rate:.0f}", wait_ms=f"{1e3 * timer.waits[-1]:.1f}", refresh=False
        )
        self.bar.update(1)

    def window(self, step: int, loss: float, timer, flops: float | None) -> None:
        n = len(timer.wall)
        width, self.last_logged = n - self.last_logged, n
        s = timer.summary(skip=n - width) if width >= 2 else None
        # every rank has the same steps in its window: the idle seconds per step and the span ride the one collective
        idle = [*timer.idle_per_step(n - width), s.wall_s] if s is not None and self.world.enabled else []
        rows = ddp.gather([loss, s.starvation if s else math.nan, *idle], self.world, self.device)
        rec = {"step": step, "loss": sum(r[0] for r in rows) / len(rows)}
        if s is not None:
            rec |= self._rates(s, flops)
            if self.world.enabled:  # every step waits for the slowest rank: its wait idles every GPU
                ranks = [{"rank": r, "starvation": row[1]} for r, row in enumerate(rows)]
                group = waited_on([row[2:-1] for row in rows], sum(row[-1] for row in rows) / len(rows))
                rec = group_headline(rec | merged(ranks, "starvation") | group)
        if self.file is None:
            return
        self.file.write(json.dumps(rec) + "\n")
        self.file.flush()
        if self.board is not None:
            for key, tag in BOARD_TAGS.items():
                if key in rec:
                    self.board.add_scalar(tag, rec[key], step)
        if s is not None:
            detail = f" ({ranks_detail(rec, self.world.world_size)})" if self.world.enabled else ""
            # on a CPU the FLOP rate of a preset sized for it rounds to 0.0, and device memory and MFU have no meaning
            compute = f", {rec['tflops']:.1f} TFLOP/s, MFU {100 * rec['mfu']:.1f}%, mem {rec['memory_gib']:.2f} GiB"
            self.write(
                f"step {step}: loss {rec['loss']:.4f}, {rec['images_per_s']:.0f} samples/s, wait "
                f"{rec['wait_median_ms']:.1f} ms, starved {100 * rec['starvation']:.1f}%{detail}"
                + (compute if self.cuda else "")
            )

    def _rates(self, s, flops: float | None) -> dict:
        tflops = (flops or 0.0) * s.steps / s.wall_s / 1e12
        return {
            "images_per_s": self.images_per_step * s.steps / s.wall_s,
            "wait_median_ms": s.wait_median_ms,
            "starvation": s.starvation,
            "tflops": tflops,
            "mfu": tflops / self.peak if self.peak else 0.0,
            "memory_gib": torch.cuda.max_memory_allocated(self.device) / 2**30 if self.cuda else 0.0,
        }

    def samples(
        self, ema_model, diffusion, shape: tuple[int, ...], kind: str, step: int, labels=None, preview=None
    ) -> None:
        from .samples import write_samples

        path = self.cfg.out / "samples" / f"step{step:07d}.png"
        write_samples(
            ema_model, diffusion, shape, self.cfg.sample_steps, self.device, self.cfg.seed, path, kind, labels, preview
        )
        self.write(f"step {step}: samples -> {path}")
        if self.board is not None:  # the grid exactly as written, read back from its PNG
            import numpy as np
            from PIL import Image

            self.board.add_image("samples", np.asarray(Image.open(path).convert("RGB")), step, dataformats="HWC")

    def final(self, timer, flops: float | None, checksum: float) -> dict:
        """Timing figures over the measured steps. Rates add up over ranks; under several ranks `starvation` is the
        time every rank lost to some rank's input (group_headline), with this rank's own, the mean over ranks and the
        worst rank beside it; host_behind is this rank's, likewise; `ranks` holds every rank's own figures."""
        n = len(timer.wall)
        skip = max(0, min(self.cfg.timing_warmup, n - 2))  # a run shorter than its warm-up: its last 2 steps
        s = timer.summary(skip=skip) if n >= 2 else None
        own = [math.nan] * 4
        if s is not None:
            behind = math.nan if s.host_behind is None else s.host_behind
            own = [self.cfg.batch_size * s.steps / s.wall_s, s.starvation, behind, s.wait_median_ms]
        ranks = [
            dict(zip(RANK_FIGURES, _none(row)), rank=r)
            for r, row in enumerate(ddp.gather([*own, checksum], self.world, self.device))
        ]
        figures = {"samples_per_s": 0.0, "starvation": {}, "tflops": 0.0, "mfu": 0.0}
        if s is not None:
            rates = self._rates(s, flops)
            # how many steps the figures rest on (`steps`), and how many were left out (`untimed_steps`)
            starvation = (
                s.to_dict() | {"untimed_steps": skip} | merged(ranks, "starvation") | merged(ranks, "host_behind")
            )
            if self.world.enabled:  # one more collective, on every rank alike (the same steps are measured)
                rows = ddp.gather([*timer.idle_per_step(skip), s.wall_s], self.world, self.device)
                starvation = group_headline(
                    starvation | waited_on([r[:-1] for r in rows], sum(r[-1] for r in rows) / len(rows))
                )
            figures = {
                "samples_per_s": sum(r["samples_per_s"] for r in ranks),
                "starvation": starvation,
                "tflops": rates["tflops"],
                "mfu": rates["mfu"],
            }
        mem = torch.cuda.max_memory_allocated(self.device) / 2**30 if self.cuda else 0.0
        return figures | {"peak_tflops": self.peak or 0.0, "peak_memory_gib": mem, "ranks": ranks}

    def close(self) -> None:
        self.bar.close()
        if self.board is not None:
            self.board.close()
        if self.file is not None:
            self.file.close()
