"""Training-step speed of the DDPM UNet with the data already on the device (one random batch reused): what the model
can eat, so we know what the loaders must deliver. Each step is a full optimizer step: diffusion loss (uniform t,
fresh noise), backward, grad-clip 1.0, Adam (fused on CUDA), as in the paper. Modes, measured in one run:

    fp32_eager                  fp32 with TF32 matmuls/convolutions
    bf16_eager                  autocast bf16
    bf16_channels_last          + channels_last model and batch
    bf16_cl_compile             + torch.compile (default mode)
    bf16_cl_compile_cudagraphs  + CUDA graphs (compile mode "reduce-overhead"): what `train --compile` runs
    bf16_cl_cudagraphs_torch_gn the same with PyTorch's nn.GroupNorm, which turns channels_last into NCHW (as before
                                training.model.GroupNorm kept the layout): the layout copies it costs
    bf16_compile_cudagraphs     the same in NCHW: do channels_last <-> contiguous copies cost more than NHWC wins?
    bf16_cl_loss_cudagraphs     compile the whole loss (timestep and noise draw, q_sample, UNet, MSE), CUDA graphs
    bf16_cl_max_autotune        compile "max-autotune": Triton/cuDNN choices benchmarked, CUDA graphs (slow warm-up)
    bf16_max_autotune           the same in NCHW

The faster forms of training.model (GroupNorm reduced per channel, a dense gradient at the up path's concatenations,
upsampling as a broadcast) against the forms they replaced (bench/studies/speedups.py: same function, same parameters):

    bf16_cl_cudagraphs_prev_all       all three previous forms: the compiled step before them
    bf16_cl_cudagraphs_prev_gn        only GroupNorm's previous form (per-group statistics)
    bf16_cl_cudagraphs_prev_cat       only torch.cat's sliced gradient
    bf16_cl_cudagraphs_prev_upsample  only the gather upsampling (scatter-add gradient)
    bf16_cl_cudagraphs_coordesc       the default + Inductor's coordinate-descent tuning of its kernels' block sizes
                                      (minutes of warm-up), not run unless named in --modes

    python -m bench.studies.train_speed --model ddpm_cifar10 --batch-size 128 --out bench/results/train_speed.json
    python -m bench.studies.train_speed --device cpu --model tiny --steps 3     # a smoke run without a GPU
    python -m bench.studies.train_speed --device cpu --model tiny --steps 2 --compile-backend aot_eager \\
        --modes bf16_cl_compile_cudagraphs,bf16_cl_cudagraphs_prev_all    # compiled modes' model code, traced on a CPU

Warm-up steps (compilation, autotuning, cuDNN benchmarking) are excluded; the timed steps are bracketed by CUDA
events after a synchronize. FLOPs are counted once on the meta device with torch.utils.flop_counter. A mode that
fails (say, a compile error on some torch) is recorded in the JSON with its error and the others still run."""

from __future__ import annotations

import argparse
import gc
import time
from pathlib import Path

import torch
from torch import nn

from common.atomic import write_json
from common.run_record import run_record
from training.diffusion import GaussianDiffusion
from training.model import MODEL_PRESETS, GroupNorm, UNet
from training.profiling import count_train_flops, peak_tflops, profile_steps

from .speedups import revert
from .train_speed_modes import CPU_DEFAULT, GPU_DEFAULT, MODES, TORCH_GN

PROFILED_STEPS = 5  # enough for a stable ranking of the kernels


def build_step(mode: str, args: argparse.Namespace, x0: torch.Tensor):
    """A closure running one optimizer step in `mode`, and the model (for parameter count and cleanup)."""
    dtype, channels_last, compile_mode, compiled, variants, _ = MODES[mode]
    cuda = args.device.startswith("cuda")
    torch.manual_seed(0)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = UNet(MODEL_PRESETS[args.model]()).to(args.device, memory_format=fmt)
    revert(model, [v for v in variants if v != TORCH_GN])
    if TORCH_GN in variants:
        for m in model.modules():
            if isinstance(m, GroupNorm):
                m.__class__ = nn.GroupNorm  # the subclass adds no state: same parameters, PyTorch's forward
    x = x0.contiguous(memory_format=fmt)
    diffusion = GaussianDiffusion().to(args.device)
    opt = torch.optim.Adam(model.parameters(), lr=2e-4, fused=cuda)
    inductor = args.compile_backend == "inductor"  # another backend takes no mode
    compile_kw = {
        "mode": None if compile_mode == "default" or not inductor else compile_mode,
        "backend": args.compile_backend,
    }
    net = torch.compile(model, **compile_kw) if compile_mode and compiled == "model" else model
    loss_fn = torch.compile(diffusion.loss, **compile_kw) if compile_mode and compiled == "loss" else diffusion.loss
    graphs = inductor and compile_mode in ("reduce-overhead", "max-autotune")
    params = list(model.parameters())

    def step() -> torch.Tensor:
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()  # the previous step's graph outputs may be overwritten
        with torch.autocast(args.device.split(":")[0], dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = loss_fn(net, x)
        kept = loss.detach().clone()  # a copy: a CUDA graph's output is overwritten by its next replay
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return kept

    return step, model


def timed(step, n: int, cuda: bool) -> tuple[float, float]:
    """Seconds for n steps (CUDA events around the enqueued work, started after the device is idle) and their mean
    loss, read after the timing: every mode starts from the same weights and draws the same batches of noise and
    timesteps, so a mode that changes what is computed shows in it."""
    losses = []
    if not cuda:
        t = time.perf_counter()
        for _ in range(n):
            losses.append(step())
        return time.perf_counter() - t, torch.stack(losses).float().mean().item()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        losses.append(step())
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3, torch.stack(losses).float().mean().item()


def measure(mode: str, args: argparse.Namespace, x0: torch.Tensor, flops_per_image: int) -> dict:
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    from torch._inductor import config as inductor_config

    with inductor_config.patch(dict(MODES[mode].inductor)):  # compilation happens in the first steps
        step, model = build_step(mode, args, x0)
        try:
            t = time.perf_counter()
            for _ in range(args.warmup):
                step()
            if cuda:
                torch.cuda.synchronize()
            warm_s = time.perf_counter() - t
            dt, mean_loss = timed(step, args.steps, cuda)
            if args.profile:  # after the timed steps, so the profiler's overhead stays out of them
                profile_steps(step, PROFILED_STEPS, args.profile / mode)
        finally:
            del step, model
            cleanup(cuda)
    images_per_s = args.steps * args.batch_size / dt
    tflops = flops_per_image * images_per_s / 1e12
    peak = peak_tflops(args.device, "fp32" if MODES[mode].dtype is None else "bf16")[0]
    return {
        "images_per_s": images_per_s,
        "step_ms": 1e3 * dt / args.steps,
        "tflops": tflops,
        "mfu": tflops / peak if peak else None,
        "peak_tflops": peak or None,
        "warmup_s": warm_s,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        "mean_loss": mean_loss,
    }


def cleanup(cuda: bool) -> None:
    """Forget compiled graphs and free memory, so one mode's caches neither help nor starve the next."""
    torch._dynamo.reset()
    gc.collect()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="ddpm_cifar10", choices=sorted(MODEL_PRESETS))
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=50, help="timed steps per mode")
    p.add_argument("--warmup", type=int, help="untimed steps per mode (compile, autotune, cudnn); 15 on CUDA, 1 on CPU")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument(
        "--modes",
        help=f"comma-separated, from: {', '.join(MODES)}; 'all' for every one "
        f"(default: all but max-autotune and the candidates on CUDA, the eager ones on CPU)",
    )
    p.add_argument("--out", type=Path, help="write the raw results as JSON here")
    p.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help=f"also profile {PROFILED_STEPS} steps per mode into DIR/MODE: ops.md, ops.txt, trace.json",
    )
    p.add_argument(
        "--compile-backend",
        default="inductor",
        choices=("inductor", "aot_eager"),
        help="aot_eager traces the compiled modes' model code (autograd included) without generating "
        "kernels: a quick check on a CPU, its timings mean nothing",
    )
    args = p.parse_args(argv)
    if args.warmup is None:  # CUDA graphs and autotuning need several steps; the CPU only runs eager modes
        args.warmup = 15 if args.device.startswith("cuda") else 1
    if args.modes is None:
        args.modes = list(GPU_DEFAULT if args.device.startswith("cuda") else CPU_DEFAULT)
    else:
        args.modes = list(MODES) if args.modes == "all" else args.modes.split(",")
    unknown = [m for m in args.modes if m not in MODES]
    if unknown:
        p.error(f"unknown mode(s) {', '.join(unknown)}; valid: {', '.join(MODES)}, all")
    if args.steps < 1 or args.warmup < 0 or args.batch_size < 1:
        p.error("--steps and --batch-size must be at least 1, --warmup at least 0")
    return args


def flops_per_image(model_name: str) -> int:
    """forward + backward FLOPs of one training image, counted on the meta device (no memory, no time)."""
    cfg = MODEL_PRESETS[model_name]()
    x = torch.empty(2, cfg.in_channels, cfg.image_size, cfg.image_size, device="meta")
    return count_train_flops(UNet(cfg).to("meta"), GaussianDiffusion().to("meta"), x) // 2


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True  # "fp32" runs as TF32
    torch.backends.cudnn.benchmark = True  # fixed shapes: pick the fastest convolution once, during warm-up
    cfg = MODEL_PRESETS[args.model]()
    x = torch.randn(args.batch_size, cfg.in_channels, cfg.image_size, cfg.image_size, device=args.device)
    per_image = flops_per_image(args.model)
    print(f"{args.model}, batch {args.batch_size}, {args.device}: {per_image / 1e9:.2f} GFLOP per training image")
    print(f"{'mode':28s} {'img/s':>9s} {'ms/step':>8s} {'TFLOP/s':>8s} {'MFU':>6s} {'warm-up s':>9s} {'loss':>7s}")
    record = run_record() | {
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "gflop_per_image": per_image / 1e9,
        "peak_tflops_bf16": peak_tflops(args.device, "bf16")[0] or None,
        "peak_used": peak_tflops(args.device, "bf16")[1] or "none (no known peak for this device)",
        "best_mode": None,
        "results": {},
    }
    results = record["results"]
    for mode in args.modes:
        results[mode] = run_mode(mode, args, x, per_image)
        ok = [m for m in results if "error" not in results[m]]
        record["best_mode"] = max(ok, key=lambda m: results[m]["images_per_s"], default=None)
        if args.out:  # after every mode, so a run cut short by a time limit keeps what it measured
            args.out.parent.mkdir(parents=True, exist_ok=True)
            write_json(args.out, record)
    if record["best_mode"]:
        print(f"best: {record['best_mode']}, {results[record['best_mode']]['images_per_s']:.0f} images/s")
    return record


def run_mode(mode: str, args: argparse.Namespace, x: torch.Tensor, per_image: int) -> dict:
    """One mode's figures and a table row on stdout; a mode that fails is recorded with its error instead."""
    try:
        r = measure(mode, args, x, per_image)
    except Exception as e:  # e.g. a compile error on one torch version: the other modes still run
        cleanup(args.device.startswith("cuda"))
        r = {"error": f"{type(e).__name__}: {str(e)[:2000]}"}
        print(f"{mode:28s} FAILED {r['error'][:200]}", flush=True)
        return r
    mfu = f"{100 * r['mfu']:5.1f}%" if r["mfu"] else "     -"
    print(
        f"{mode:28s} {r['images_per_s']:9.0f} {r['step_ms']:8.2f} {r['tflops']:8.1f} {mfu} {r['warmup_s']:9.1f} "
        f"{r['mean_loss']:7.4f}",
        flush=True,
    )
    return r


if __name__ == "__main__":
    main()
