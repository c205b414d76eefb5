"""Training-step speed of the DDPM UNet with the data already on the device (one batch reused): what the model can
eat, so we know what the loaders must deliver. Modes, measured in one run: fp32 eager (TF32 matmuls), bf16 eager
(autocast), bf16 + channels_last, + torch.compile, + compile with CUDA graphs ("reduce-overhead").
Each step is a full optimizer step: diffusion loss, backward, grad-clip 1.0, fused Adam.

    python -m bench.train_speed --model ddpm_cifar10 --batch-size 128 --out bench/results/train_speed.json

Warm-up steps (compilation, autotuning) are excluded; timed steps are bracketed by CUDA events."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from training.diffusion import GaussianDiffusion
from training.model import MODEL_PRESETS, UNet
from training.profiling import count_train_flops, peak_tflops

from .env import run_record

MODES = {  # name: (autocast dtype, channels_last, compile mode)
    "fp32_eager": (None, False, None),
    "bf16_eager": (torch.bfloat16, False, None),
    "bf16_channels_last": (torch.bfloat16, True, None),
    "bf16_cl_compile": (torch.bfloat16, True, "default"),
    "bf16_cl_compile_cudagraphs": (torch.bfloat16, True, "reduce-overhead"),
}


def measure(mode: str, args, x0: torch.Tensor) -> dict:
    dtype, channels_last, compile_mode = MODES[mode]
    cuda = args.device.startswith("cuda")
    torch.manual_seed(0)
    model = UNet(MODEL_PRESETS[args.model]()).to(args.device)
    x = x0.contiguous(memory_format=torch.channels_last) if channels_last else x0
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    diffusion = GaussianDiffusion().to(args.device)
    opt = torch.optim.Adam(model.parameters(), lr=2e-4, fused=cuda)
    loss_fn = torch.compile(diffusion.loss, mode=compile_mode) if compile_mode else diffusion.loss

    def step():
        with torch.autocast("cuda" if cuda else "cpu", dtype=dtype, enabled=dtype is not None):
            loss = loss_fn(model, x)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    t = time.perf_counter()
    for _ in range(args.warmup):
        step()
    sync(cuda)
    warm_s = time.perf_counter() - t
    t = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync(cuda)
    dt = time.perf_counter() - t
    return {"images_per_s": args.steps * args.batch_size / dt, "step_ms": 1e3 * dt / args.steps, "warmup_s": warm_s}


def sync(cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="ddpm_cifar10", choices=sorted(MODEL_PRESETS))
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    cfg = MODEL_PRESETS[args.model]()
    x = torch.randn(args.batch_size, cfg.in_channels, cfg.image_size, cfg.image_size, device=args.device)
    flops = count_train_flops(UNet(cfg).to(args.device), GaussianDiffusion().to(args.device), x)
    results = {}
    for mode in args.modes.split(","):
        try:
            r = measure(mode, args, x)
            r["tflops"] = flops / args.batch_size * r["images_per_s"] / 1e12
        except Exception as e:  # a mode that fails (a compile error on some torch) is recorded, the rest still run
            r = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
        results[mode] = r
        print(f"{mode:28s} {r.get('images_per_s', float('nan')):9.0f} img/s {r.get('tflops', float('nan')):7.1f} "
              f"TFLOP/s  {r.get('error', '')}", flush=True)  # fmt: skip
    peak = peak_tflops(args.device, "bf16")
    per_image = flops / args.batch_size / 1e9
    config = vars(args) | {"out": str(args.out)}
    record = run_record() | {"config": config, "gflop_per_image": per_image, "peak_tflops_bf16": peak[0],
                             "results": results}  # fmt: skip
    print(f"counted {flops / args.batch_size / 1e9:.1f} GFLOP per training image (forward + backward)")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
