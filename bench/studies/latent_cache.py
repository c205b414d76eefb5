"""Finding 6's helpers: the autoencoders it measures, and the encoder's own rate.

    python -m bench.studies.latent_cache vaes OUT            # OUT/sd (SD-shaped) and OUT/audioldm, random weights
    python -m bench.studies.latent_cache encoder-rate --vae OUT/sd --shape 3,256,256 --batch-size 64 --json F

No machine here can download weights, so both autoencoders are built from their published shapes with random weights
(dataprep.latents.random_vae, where the shapes are) and loaded by path, the code path a real checkpoint takes. Speed
does not depend on the weights; quality claims would, and none are made."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch


def build_vaes(out: Path) -> dict:
    from dataprep.latents.random_vae import make_vae

    return {name: make_vae(out / name, name) for name in ("sd", "audioldm")}


def encoder_rate(vae_dir: str, shape: tuple[int, ...], batch: int, steps: int, compile: bool, device: str) -> dict:
    """Samples/s of the encoder alone on a batch already on the GPU (bf16 autocast, channels_last), CUDA events
    around `steps` batches after warm-up: the rate `dataprep convert --vae` is compared with."""
    from common.vae import load_vae

    vae = load_vae(vae_dir, device)
    vae.model.to(memory_format=torch.channels_last)
    moments = torch.compile(vae.moments, dynamic=False) if compile else vae.moments
    x = torch.randn(batch, *shape, device=device).contiguous(memory_format=torch.channels_last)
    with torch.autocast("cuda", torch.bfloat16):
        for _ in range(5):
            moments(x)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(steps):
            moments(x)
        end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1000
    return {
        "vae": vae_dir,
        "shape": list(shape),
        "batch_size": batch,
        "steps": steps,
        "compile": compile,
        "samples_per_s": batch * steps / seconds,
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("vaes")
    v.add_argument("out", type=Path)
    r = sub.add_parser("encoder-rate")
    r.add_argument("--vae", required=True)
    r.add_argument("--shape", default="3,256,256")
    r.add_argument("--batch-size", type=int, default=64)
    r.add_argument("--steps", type=int, default=30)
    r.add_argument("--device", default="cuda")
    r.add_argument("--modes", default="eager,compiled", help="eager, compiled or both, comma-separated")
    r.add_argument("--json", type=Path, required=True)
    args = p.parse_args(argv)
    if args.cmd == "vaes":
        print(json.dumps(build_vaes(args.out)))
        return 0
    shape = tuple(int(s) for s in args.shape.split(","))
    modes = [m.strip() for m in args.modes.split(",")]
    if not modes or set(modes) - {"eager", "compiled"}:
        p.error(f"--modes takes eager, compiled or both, not {args.modes!r}")
    rows = [encoder_rate(args.vae, shape, args.batch_size, args.steps, m == "compiled", args.device) for m in modes]
    from common.run_record import run_record

    args.json.write_text(json.dumps({"run": run_record(args.device), "rows": rows}, indent=1) + "\n")
    for row in rows:
        mode = "compiled" if row["compile"] else "eager"
        print(f"encoder {mode}: {row['samples_per_s']:,.0f} samples/s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
