"""Regional compilation of the UNet: does marking its blocks as nested compile regions
(`torch.compiler.nested_compile_region`, traced and compiled once per distinct signature, then stamped out) shorten
the first compiled training step, and at what step rate? Each configuration runs in a fresh process with an empty
local Inductor cache: the whole model compiled as `train --compile` does it (`none`), and the same with the blocks
named in `--regions` made nested regions (`ResBlock+Attention`: every residual block and every attention).

    python -m bench.studies.compile_regions --model ddpm_cifar10 --device cpu --batch-size 8 \\
        --backends aot_eager,inductor --regions none,ResBlock+Attention,ResBlock,Attention \\
        --out bench/results/cold_start_cpu/regions
    python -m bench.studies.compile_regions --model ddpm_cifar10 --device cuda --batch-size 128 \\
        --mode reduce-overhead --backends inductor --regions none,ResBlock+Attention --steps 50 --dense-skip \\
        --out bench/results/cold_start_h100/candidates/regions

`aot_eager` stops after Dynamo's and AOTAutograd's tracing (what regions can spare on any device); `inductor` adds
code generation and the compiler's builds. A run that fails keeps its error's last line in the table and the JSON.
`--dense-skip` makes the skip half of each concatenation's gradient dense too (the UNet hands it on as a strided
slice), so that every call of a region's backward sees the same strides."""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from training.model import _CatDenseGrad

# Dynamo's own timers (torch._dynamo.utils.compilation_time_metrics) kept per run, summed over calls
PHASES = (
    "bytecode_tracing",
    "create_aot_dispatcher_function",
    "aot_trace_joint_graph",
    "GraphLowering.codegen",
    "async_compile.wait",
    "compile_fx_inner",
)


def child(args: argparse.Namespace) -> dict:
    """One configuration in this process: the first training step's seconds, then the rate of `steps` more."""
    from torch._dynamo.utils import compilation_time_metrics

    from training.diffusion import GaussianDiffusion
    from training.model import MODEL_PRESETS, Attention, ResBlock, UNet

    region = torch.compiler.nested_compile_region
    # ddpm_cifar10 has 11 ResBlock input shapes, more than the default 8 reuse entries
    many = {"max_reuse_entries": 64} if "max_reuse_entries" in inspect.signature(region).parameters else {}
    for block in (b for b in (ResBlock, Attention) if b.__name__ in args.blocks.split("+")):
        block.forward = region(block.forward, **many)
    if args.dense_skip:
        UNet._cat = staticmethod(_CatBothDense.apply)
    cuda = args.device.startswith("cuda")
    torch.manual_seed(0)
    cfg = MODEL_PRESETS[args.model]()
    layout = torch.channels_last if cuda else torch.contiguous_format  # as `train` runs it
    model = cfg.build().to(args.device, memory_format=layout)
    net = torch.compile(model, backend=args.backend, mode=args.mode)
    diffusion = GaussianDiffusion().to(args.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    shape = (args.batch_size, cfg.in_channels, cfg.image_size, cfg.image_size)
    x = torch.randn(shape, device=args.device).contiguous(memory_format=layout)
    autocast = torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16, enabled=cuda)

    def step() -> torch.Tensor:
        if args.mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()
        with autocast:
            loss = diffusion.loss(net, x)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    t0 = time.perf_counter()
    first_loss = step().item()
    first = time.perf_counter() - t0
    t1 = time.perf_counter()
    for _ in range(args.steps):
        last = step()
    last.item()  # waits for the queued steps
    rate = args.steps * args.batch_size / (time.perf_counter() - t1)
    phases = {k: round(sum(v), 2) for k, v in compilation_time_metrics.items() if k in PHASES}
    return {
        "first_step_s": round(first, 2),
        "samples_per_s": round(rate, 2),
        "first_loss": first_loss,
        "phases": phases,
    }


class _CatBothDense(_CatDenseGrad):
    """The UNet's concatenation, whose gradient is dense in the input's layout for the skip half too."""

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        layout = torch.channels_last if ctx.channels_last else torch.contiguous_format
        return (
            grad[:, : ctx.split].contiguous(memory_format=layout),
            grad[:, ctx.split :].contiguous(memory_format=layout),
        )


def run(args: argparse.Namespace, backend: str, blocks: str) -> dict:
    """A configuration in a fresh process, its own empty Inductor and Triton caches."""
    record = {"backend": backend, "regions": blocks}
    with tempfile.TemporaryDirectory(prefix="gpufeed-regions-") as local:
        env = os.environ | {"TORCHINDUCTOR_CACHE_DIR": f"{local}/inductor", "TRITON_CACHE_DIR": f"{local}/triton"}
        cmd = [
            sys.executable,
            "-m",
            "bench.studies.compile_regions",
            "--child",
            "--backend",
            backend,
            "--blocks",
            blocks,
            *forwarded(args),
        ]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        record["launch_to_exit_s"] = round(time.perf_counter() - t0, 1)
    if done.returncode != 0:
        return record | {"error": (done.stderr.strip().splitlines() or ["(no output)"])[-1]}
    return record | json.loads(done.stdout.strip().splitlines()[-1])


def forwarded(args: argparse.Namespace) -> list[str]:
    opts = [
        "--model",
        args.model,
        "--device",
        args.device,
        "--batch-size",
        str(args.batch_size),
        "--steps",
        str(args.steps),
    ]
    return opts + (["--mode", args.mode] if args.mode else []) + (["--dense-skip"] if args.dense_skip else [])


def table(runs: list[dict]) -> str:
    head = ["backend", "regions", "first step, s", *PHASES, "samples/s", "error"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in runs:
        phases = [str(r.get("phases", {}).get(p, "–")) for p in PHASES]
        cells = [
            r["backend"],
            r["regions"],
            str(r.get("first_step_s", "–")),
            *phases,
            str(r.get("samples_per_s", "–")),
            r.get("error", ""),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="ddpm_cifar10")
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=2, help="steps timed after the first")
    p.add_argument("--mode", default=None, help="torch.compile's mode (reduce-overhead: CUDA graphs, as train runs)")
    p.add_argument("--backends", default="aot_eager,inductor")
    p.add_argument("--regions", default="none,ResBlock+Attention", help="the blocks made regions, per configuration")
    p.add_argument("--dense-skip", action="store_true", help="the skip half of the concatenation's gradient dense too")
    p.add_argument("--out", type=Path)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--backend", help=argparse.SUPPRESS)
    p.add_argument("--blocks", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return
    if args.out is None:
        p.error("--out is required")
    from common.atomic import write_json
    from common.run_record import run_record

    runs = []
    for backend in args.backends.split(","):
        for blocks in args.regions.split(","):
            runs.append(run(args, backend, blocks))
            print(json.dumps(runs[-1]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(
        args.out / "compile_regions.json",
        {"config": vars(args) | {"out": str(args.out)}, "run": run_record(args.device), "runs": runs},
    )
    (args.out / "compile_regions.md").write_text(table(runs) + "\n")
    print(table(runs))


if __name__ == "__main__":
    main()
