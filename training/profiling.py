"""FLOP counting (once per run), peak rates for MFU, and `--profile`: a PyTorch profiler trace of a few steps with
a ranked operator table and a bar chart."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

# dense peak TFLOP/s by device name and precision, from the vendors' datasheets (SXM parts; sparsity excluded)
PEAKS = {
    "H100": {"bf16": 989.0, "fp32": 494.5},  # fp32 runs on tensor cores as TF32 here
    "H200": {"bf16": 989.0, "fp32": 494.5},
    "A100": {"bf16": 312.0, "fp32": 156.0},
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


def count_train_flops(
    model: torch.nn.Module, diffusion, x: torch.Tensor, y: torch.Tensor | None = None, text=None
) -> int:
    """FLOPs of one training step's forward and backward on batch `x` (the optimizer's are negligible; under
    `--vae` the encoder's are not counted: MFU is the model's). Works on the meta device too: count there to pay
    nothing."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        diffusion.loss(model, x, y=y, text=text).backward()
    return int(counter.get_total_flops())


def profile_steps(step_fn: Callable[[], None], steps: int, out_dir: Path, top: int = 20) -> Path:
    """Run `step_fn` `steps` times under the profiler; write trace.json (Chrome/Perfetto), ops.md (ranked table),
    ops.txt (PyTorch's own table) and ops.png (bar chart) into `out_dir`."""
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
    averages = prof.key_averages()
    (out_dir / "ops.txt").write_text(_torch_table(averages, cuda, top) + "\n")
    ranked, unit = _ranked(averages, cuda, steps)
    total = sum(ms for _, ms, _ in ranked) or 1.0
    lines = [
        f"# Most expensive operators: {unit}, mean over {steps} profiled steps",
        "",
        "| rank | operator | ms per step | share | calls per step |",
        "|---:|---|---:|---:|---:|",
    ]
    for i, (name, ms, calls) in enumerate(ranked[:top], 1):
        cell = name[:100].replace("|", "\\|")
        lines.append(f"| {i} | `{cell}` | {ms:.3f} | {100 * ms / total:.1f}% | {calls:g} |")
    (out_dir / "ops.md").write_text("\n".join(lines + ["", f"Total: {total:.2f} ms per step."]) + "\n")
    _bar_chart(ranked[:top], unit, steps, out_dir / "ops.png")
    return out_dir


def _torch_table(averages, cuda: bool, top: int) -> str:
    if not cuda:
        return averages.table(sort_by="self_cpu_time_total", row_limit=top)
    try:
        return averages.table(sort_by="self_device_time_total", row_limit=top)
    except (AttributeError, KeyError):  # the older spelling, before "cuda" became "device" in the profiler's names
        return averages.table(sort_by="self_cuda_time_total", row_limit=top)


def _ranked(averages, cuda: bool, steps: int) -> tuple[list[tuple[str, float, float]], str]:
    """(name, ms per step, calls per step), most expensive first. On CUDA: GPU kernels and copies only, so nested
    ranges (a compiled graph's call, the optimizer step) are not counted twice; on CPU: operators' self time."""
    from torch.autograd import DeviceType

    rows = [e for e in averages if e.device_type == DeviceType.CUDA] if cuda else []
    if rows:
        ms = [getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0.0)) for e in rows]
        unit = "GPU kernel time"
    else:  # a CPU run, or no kernel events (CUPTI unavailable): rank the host-side operators
        rows = [e for e in averages if not e.key.startswith(("## ", "ProfilerStep", "Optimizer."))]
        ms, unit = [e.self_cpu_time_total for e in rows], "CPU self time"
    ranked = [(e.key, t / 1e3 / steps, e.count / steps) for e, t in zip(rows, ms)]
    return sorted(ranked, key=lambda r: r[1], reverse=True), unit


def _bar_chart(ranked: list[tuple[str, float, float]], unit: str, steps: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 0.35 * len(ranked) + 1.5))
    ax.barh([name[:60] for name, _, _ in ranked][::-1], [ms for _, ms, _ in ranked][::-1])
    ax.set_xlabel(f"{unit} per step (ms)")
    ax.set_title(f"Most expensive operators ({unit}), mean over {steps} profiled steps")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
