"""What an epoch start costs a loader: the wait for each batch of several epochs, the loader alone on this machine's
cores, a sleep standing in for the GPU's step (which a loader's workers overlap). Finding 9's data in small: 4,000
captioned samples as 4x32x32 latents (a one-block autoencoder that keeps 32 px) with a tiny CLIP's cached captions,
15 batches of 256 an epoch, as in its grid on 2 cores.

    taskset -c 0,1 python -m bench.studies.epoch_starts --backends torch,hdf5,dali --workers 2 --out starts.json

The dataset is built once into --data (default: a temporary folder), from config: no download."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from common.atomic import write_json
from common.run_record import run_record

SAMPLES, BATCH = 4000, 256
STEP_S = 0.114  # dit_b2_text's step at batch 256 on an H200 (finding 9's data-free rate: 2,244 samples/s)


def build(root: Path) -> Path:
    """Captioned synthetic images, encoded to latents and their captions' embeddings, in every format timed here."""
    from diffusers import AutoencoderKL

    from dataprep.convert import ConvertConfig, convert
    from dataprep.textenc import make_text_encoder

    data = root / "data"
    if (data / "manifest.json").exists():
        return data
    torch.manual_seed(0)
    AutoencoderKL(
        down_block_types=("DownEncoderBlock2D",),
        up_block_types=("UpDecoderBlock2D",),
        block_out_channels=(32,),
        latent_channels=4,
        layers_per_block=1,
        norm_num_groups=8,
        sample_size=32,
    ).save_pretrained(root / "vae")
    encoder = make_text_encoder("clip", root / "clip")
    templates = ("a photo of a {label}", "a picture of one {label}, seen from rather far away")
    convert(
        ConvertConfig(
            output=data,
            source="synthetic-images",
            limit=SAMPLES,
            formats=("files", "hdf5", "dali"),
            progress=False,
            vae=str(root / "vae"),
            device="cpu",
            text_encoder=str(encoder),
            caption_templates=templates,
            workers=2,
        )
    )
    return data


def waits(backend: str, data: Path, workers: int, epochs: int, step_s: float) -> list[list[float]]:
    """Milliseconds waited for each batch of each epoch, `step_s` slept after each batch."""
    from loaders import build_loader

    kw = dict(batch_size=BATCH, workers=workers, device="cpu", shuffle=True, augment=True, drop_last=True, seed=0)
    out = []
    with build_loader(backend, data, **kw) as loader:
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            epoch_waits, t = [], time.perf_counter()
            for _ in loader:
                epoch_waits.append(1000 * (time.perf_counter() - t))
                time.sleep(step_s)
                t = time.perf_counter()
            out.append(epoch_waits)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backends", default="torch,hdf5,dali")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--step-ms", type=float, default=1000 * STEP_S, help="the stand-in for the GPU's step")
    p.add_argument("--data", type=Path, help="where the dataset is built once (default: a temporary folder)")
    p.add_argument("--out", type=Path, required=True, help="the JSON record")
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="epoch-starts-") as tmp:
        root = args.data or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        data = build(root)
        for backend in args.backends.split(","):
            got = waits(backend, data, args.workers, args.epochs, args.step_ms / 1000)
            row = {
                "backend": backend,
                "first_ms": [e[0] for e in got],  # each epoch's first batch
                "rest_median_ms": statistics.median(w for e in got for w in e[1:]),
                "rest_max_ms": max(w for e in got for w in e[1:]),
                "waits_ms": got,
            }
            rows.append(row)
            print(
                backend,
                f"first {[round(w) for w in row['first_ms']]} ms, the rest median "
                f"{row['rest_median_ms']:.1f} max {row['rest_max_ms']:.1f}",
                file=sys.stderr,
            )
    record = run_record("cpu") | {"cores": len(os.sched_getaffinity(0))}
    write_json(
        args.out,
        {
            "run": record,
            "batch_size": BATCH,
            "samples": SAMPLES,
            "workers": args.workers,
            "step_ms": args.step_ms,
            "rows": rows,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
