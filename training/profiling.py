"""FLOP counting (once per run), peak rates for MFU, and `--profile`: a PyTorch profiler trace of a few steps with
a ranked operator table and a bar chart."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

# dense peak TFLOP/s by device name and precision, from the vendors' datasheets (SXM parts; sparsity excluded)
PEAKS = {
    "H100": {"bf16": 989.0, "fp16": 989.0, "fp32": 494.5},  # fp32 runs on tensor cores as TF32 here
    "H200": {"bf16": 989.0, "fp16": 989.0, "fp32": 494.5},
    "A100": {"bf16": 312.0, "fp16": 312.0, "fp32": 156.0},
}


def peak_tflops(device: str, precision: str) -> tuple[float, str]:
    """(peak, what it is) for this device and precision; (0.0, "") when unknown, e.g. on a CPU."""
    if not str(device).startswith("cuda") or not torch.cuda.is_available():
        return 0.0, ""
    name = torch.cuda.get_device_name(torch.device(device))
    for key, table in PEAKS.items():
        if key in name:
            return table[precision], f"{key} dense {precision}{' (TF32)' if precision == 'fp32' else ''}"
    return 0.0, ""


def count_train_flops(model: torch.nn.Module, diffusion, x: torch.Tensor) -> float:
    """FLOPs of one training step's forward and backward on batch `x` (the optimizer's are negligible)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        diffusion.loss(model, x).backward()
    return float(counter.get_total_flops())


def profile_steps(step_fn: Callable[[], None], steps: int, out_dir: Path, top: int = 20) -> Path:
    """Run `step_fn` `steps` times under the profiler; write trace.json (Chrome/Perfetto), ops.txt and ops.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from torch.profiler import ProfilerActivity, profile

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities, record_shapes=False) as prof:
        for _ in range(steps):
            step_fn()
        if cuda:
            torch.cuda.synchronize()
    prof.export_chrome_trace(str(out_dir / "trace.json"))
    key = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    averages = prof.key_averages()
    (out_dir / "ops.txt").write_text(averages.table(sort_by=key, row_limit=top) + "\n")
    attr = "self_device_time_total" if cuda and hasattr(averages[0], "self_device_time_total") else (
        "self_cuda_time_total" if cuda else "self_cpu_time_total")  # fmt: skip
    ranked = sorted(averages, key=lambda e: getattr(e, attr), reverse=True)[:top]
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(ranked) + 1.5))
    ax.barh([e.key[:48] for e in ranked][::-1], [getattr(e, attr) / 1e3 / steps for e in ranked][::-1])
    ax.set_xlabel(f"{'GPU' if cuda else 'CPU'} self time per step (ms)")
    ax.set_title(f"Most expensive operators over {steps} profiled steps")
    fig.tight_layout()
    fig.savefig(out_dir / "ops.png", dpi=110)
    plt.close(fig)
    return out_dir
