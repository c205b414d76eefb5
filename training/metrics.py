"""What the loop reports: a tqdm bar every step, a log line and a metrics.jsonl record every `log_every` steps (and,
with `tensorboard`, the same scalars and every sample grid as TensorBoard events).

Window figures come from `StepTimer.summary` over the window's steps (CUDA events on GPU), so images/s and
TFLOP/s include the time the device waited for data. Reading them syncs the device once per window."""

from __future__ import annotations

import json
import sys

import torch

from . import ddp
from .config import TrainConfig

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


class MetricsLog:
    def __init__(self, cfg: TrainConfig, info: ddp.Dist, device: str, start_step: int, backend: str, reason) -> None:
        from tqdm import tqdm

        from .profiling import peak_tflops

        self.cfg, self.info, self.device = cfg, info, device
        self.cuda = device.startswith("cuda")
        self.peak, self.peak_name = peak_tflops(device, cfg.precision)
        self.last_logged = 0  # timer steps already covered by a window
        self.images_per_step = cfg.batch_size * info.world_size
        self.file = None
        self.bar = tqdm(
            total=cfg.steps,
            initial=start_step,
            unit="step",
            disable=not (cfg.progress and info.main),
            file=sys.stderr,
            dynamic_ncols=True,
        )
        if info.main:
            cfg.out.mkdir(parents=True, exist_ok=True)
            self.file = open(cfg.out / "metrics.jsonl", "a")  # appended to across resumes
            peak = f"{self.peak:.0f} TFLOP/s ({self.peak_name})" if self.peak else "unknown for this device"
            self.write(f"data: {backend} ({reason}); MFU peak: {peak}")
        self.board = None
        if info.main and cfg.tensorboard:  # the ecosystem's viewer: `tensorboard --logdir RUN_DIR/tensorboard`
            from torch.utils.tensorboard import SummaryWriter

            self.board = SummaryWriter(str(cfg.out / "tensorboard"), purge_step=start_step + 1 if start_step else None)

    def write(self, line: str) -> None:
        if self.info.main:
            self.bar.write(line, file=sys.stderr)

    def step(self, step: int, loss: float, timer) -> None:
        if not self.info.main or self.bar.disable:
            return
        dt = timer.wall[-1] - timer.wall[-2] if len(timer.wall) > 1 else float("nan")
        rate = self.images_per_step / dt if dt > 0 else float("nan")
        self.bar.set_postfix(
            loss=f"{loss:.4f}", img_s=f"{rate:.0f}", wait_ms=f"{1e3 * timer.waits[-1]:.1f}", refresh=False
        )
        self.bar.update(1)

    def window(self, step: int, loss: float, timer, flops: float | None) -> None:
        n = len(timer.wall)
        width, self.last_logged = n - self.last_logged, n
        loss = ddp.all_reduce([loss], self.info, self.device)[0] / self.info.world_size
        rec = {"step": step, "loss": loss}
        if width >= 2:
            s = timer.summary(skip=n - width)
            rec |= self._rates(s, flops)
        if self.file is None:
            return
        self.file.write(json.dumps(rec) + "\n")
        self.file.flush()
        if self.board is not None:
            for key, tag in BOARD_TAGS.items():
                if key in rec:
                    self.board.add_scalar(tag, rec[key], step)
        if width >= 2:
            self.write(
                f"step {step}: loss {loss:.4f}, {rec['images_per_s']:.0f} img/s, wait {rec['wait_median_ms']:.1f} ms, "
                f"starved {100 * rec['starvation']:.1f}%, {rec['tflops']:.1f} TFLOP/s, MFU {100 * rec['mfu']:.1f}%, "
                f"mem {rec['memory_gib']:.2f} GiB"
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

    def samples(self, ema_model, diffusion, shape: tuple[int, ...], kind: str, step: int) -> None:
        from .samples import write_samples

        path = self.cfg.out / "samples" / f"step{step:07d}.png"
        write_samples(ema_model, diffusion, shape, self.cfg.sample_steps, self.device, self.cfg.seed, path, kind)
        self.write(f"step {step}: samples -> {path}")
        if self.board is not None:  # the grid exactly as written, read back from its PNG
            import numpy as np
            from PIL import Image

            self.board.add_image("samples", np.asarray(Image.open(path).convert("RGB")), step, dataformats="HWC")

    def final(self, timer, flops: float | None) -> dict:
        """Timing figures over the measured steps, merged across ranks (sum of rates, worst starvation)."""
        n = len(timer.wall)
        if n < 2:
            figures = {"samples_per_s": 0.0, "starvation": {}, "tflops": 0.0, "mfu": 0.0}
        else:
            s = timer.summary(skip=max(0, min(self.cfg.timing_warmup, n - 2)))
            rates = self._rates(s, flops)
            own = self.cfg.batch_size * s.steps / s.wall_s
            total = ddp.all_reduce([own], self.info, self.device, "sum")[0]
            worst = ddp.all_reduce([s.starvation], self.info, self.device, "max")[0]
            figures = {
                "samples_per_s": total,
                "starvation": s.to_dict() | {"starvation_max": worst},
                "tflops": rates["tflops"],
                "mfu": rates["mfu"],
            }
        mem = torch.cuda.max_memory_allocated(self.device) / 2**30 if self.cuda else 0.0
        return figures | {"peak_tflops": self.peak or 0.0, "peak_memory_gib": mem}

    def close(self) -> None:
        self.bar.close()
        if self.board is not None:
            self.board.close()
        if self.file is not None:
            self.file.close()
