"""What one all-reduce of a model's gradients costs alone: the floor under any `--grad-sync` that does not overlap it
with the backward. Run under torchrun on a GPU host:

    NCCL_DEBUG=INFO torchrun --standalone --nproc_per_node 2 -m bench.studies.nccl_probe --out probe.json

Per size (1 MB, one 25 MB DDP bucket, the whole fp32 gradient of `--model`, and that in bf16): the median of 20
timed all-reduces after 5 untimed, in ms, and the bandwidths nccl-tests reports (algbw = bytes / time; busbw = algbw
x 2(n-1)/n, comparable across rank counts). Also what `--grad-sync flat` adds around its all-reduce: the copy of every
gradient into one buffer and back, from the first launch to the last kernel's end, so the host's time to launch them
from Python is in it (in a training step the host runs ahead and the GPU pays less of it). NCCL_DEBUG=INFO prints
which transport each channel took (P2P over NVLink, SHM)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

import torch
import torch.distributed as dist


def timed(fn, repeats: int = 20, warmup: int = 5) -> float:
    """Median ms of `fn` on the current stream, every rank in step (a barrier before each)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        dist.barrier()
        torch.cuda.synchronize()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        fn()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end))
    return statistics.median(times)


def probe(model_name: str) -> dict:
    from training.model import MODEL_PRESETS

    n = dist.get_world_size()
    grads = [torch.randn_like(p) for p in MODEL_PRESETS[model_name]().build().cuda().parameters()]
    numel = sum(g.numel() for g in grads)
    sizes = {"1 MB fp32": (2**18, torch.float32), "25 MB fp32 (a DDP bucket)": (25 * 2**18, torch.float32)}
    sizes |= {
        f"{model_name} gradient fp32": (numel, torch.float32),
        f"{model_name} gradient bf16": (numel, torch.bfloat16),
    }
    rows = []
    for name, (count, dtype) in sizes.items():
        t = torch.ones(count, dtype=dtype, device="cuda")
        ms = timed(lambda t=t: dist.all_reduce(t))
        size = t.numel() * t.element_size()
        algbw = size / ms / 1e6  # GB/s
        rows.append({"what": name, "bytes": size, "ms": ms, "algbw_gb_s": algbw, "busbw_gb_s": algbw * 2 * (n - 1) / n})
    flat = torch.empty(numel, device="cuda")
    views = [v.view_as(g) for v, g in zip(flat.split([g.numel() for g in grads]), grads)]
    copies = timed(lambda: (torch.cat([g.reshape(-1) for g in grads], out=flat), torch._foreach_copy_(grads, views)))
    return {"world_size": n, "tensors": len(grads), "all_reduce": rows, "flat_copies_ms": copies}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="ddpm_cifar10")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    try:
        from common.run_record import run_record

        result = probe(a.model) | {
            "run": run_record(),
            "device": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())),
        }
        if dist.get_rank() == 0:
            a.out.write_text(json.dumps(result, indent=1))
            print(json.dumps(result, indent=1))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
