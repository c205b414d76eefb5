"""Loader-only throughput: images/s delivered as normalized tensors on the device, every backend and the reference
pipelines it must beat, measured in one run (the targets: ffcv >= upstream FFCV's CIFAR pipeline at the same threads,
dali >= 3x a naive one-.npy-per-sample DALI pipeline, hdf5 >= 4x the torch baseline at the same workers, gpu > 1M/s).

    python -m bench.studies.loader_speed --data DIR --workers 8 --batch-size 128 --out bench/results/loader_speed.json

Each contender: build, one warm-up epoch (worker start, JIT, page cache), then `--epochs` timed epochs; the clock
stops after a device synchronize. The consumer touches every batch (a sum), nothing more."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from common.atomic import write_json
from common.run_record import run_record


def timed(make_iter, epochs: int, device: str) -> dict:
    """Samples/s of `epochs` passes over make_iter(epoch) after one warm-up pass."""
    sink = torch.zeros((), device=device)
    for x in make_iter(0):
        sink += x.float().mean()
    sync(device)
    n, t = 0, time.perf_counter()
    for e in range(1, epochs + 1):
        for x in make_iter(e):
            sink += x.float().mean()
            n += x.shape[0]
    sync(device)
    dt = time.perf_counter() - t
    return {"samples": n, "seconds": dt, "samples_per_s": n / dt}


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def ours(name: str, args) -> dict:
    from loaders import build_loader

    loader = build_loader(
        name,
        args.data,
        batch_size=args.batch_size,
        workers=args.workers,
        pin_memory=True,
        device=args.device,
        shuffle=True,
        augment=True,
        drop_last=True,
    )

    def epoch(e):
        loader.set_epoch(e)
        return (b.x for b in loader)

    try:
        return timed(epoch, args.epochs, args.device)
    finally:
        loader.close()


def upstream_ffcv(args) -> dict:
    """FFCV's own CIFAR-10 training pipeline (its examples/cifar: flip, translate, cutout on the CPU threads, then
    ToDevice, ToTorchImage, Convert, Normalize), at the same thread count."""
    import torchvision
    from ffcv import transforms as T
    from ffcv.fields.decoders import IntDecoder, SimpleRGBImageDecoder
    from ffcv.loader import Loader, OrderOption

    mean, std = [125.307, 122.961, 113.8575], [51.5865, 50.847, 51.255]
    dev = torch.device(args.device)
    fill = tuple(map(int, mean))
    # as upstream, except Convert(float32) where it has float16: our loaders deliver float32 too
    image = [
        SimpleRGBImageDecoder(),
        T.RandomHorizontalFlip(),
        T.RandomTranslate(padding=2, fill=fill),
        T.Cutout(4, fill),
        T.ToTensor(),
        T.ToDevice(dev, non_blocking=True),
        T.ToTorchImage(),
        T.Convert(torch.float32),
        torchvision.transforms.Normalize(mean, std),
    ]
    label = [IntDecoder(), T.ToTensor(), T.ToDevice(dev), T.Squeeze()]
    loader = Loader(
        str(args.data / "data.beton"),
        batch_size=args.batch_size,
        num_workers=args.workers,
        order=OrderOption.RANDOM,
        drop_last=True,
        pipelines={"image": image, "label": label},
        os_cache=True,
    )
    return timed(lambda e: (b[0] for b in loader), args.epochs, args.device)


def naive_dali(args) -> dict:
    """The pipeline people write first: one .npy file per sample, fn.readers.numpy, then the same normalize."""
    import h5py
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    with tempfile.TemporaryDirectory() as tmp, h5py.File(args.data / "data.h5") as f:
        for i, sample in enumerate(f["x"][:]):
            np.save(Path(tmp) / f"{i:07d}.npy", sample)
        gpu = args.device.startswith("cuda")

        @pipeline_def(batch_size=args.batch_size, num_threads=args.workers, device_id=0 if gpu else None, seed=0)
        def pipe():
            x = fn.readers.numpy(file_root=tmp, random_shuffle=True, name="reader")
            x = x.gpu() if gpu else x
            return fn.crop_mirror_normalize(
                x,
                dtype=types.FLOAT,
                output_layout="CHW",
                mean=[127.5] * 3,
                std=[127.5] * 3,
                mirror=fn.random.coin_flip(),
            )

        p = pipe()
        p.build()
        it = DALIGenericIterator(
            [p], ["x"], reader_name="reader", last_batch_policy=LastBatchPolicy.DROP, auto_reset=True
        )
        return timed(lambda e: (b[0]["x"] for b in it), args.epochs, args.device)


CONTENDERS = {
    "torch": lambda a: ours("torch", a),
    "hdf5": lambda a: ours("hdf5", a),
    "ffcv": lambda a: ours("ffcv", a),
    "dali": lambda a: ours("dali", a),
    "gpu": lambda a: ours("gpu", a),
    "upstream_ffcv": upstream_ffcv,
    "naive_dali_npy": naive_dali,
}
TARGETS = [("ffcv", "upstream_ffcv", 1.0), ("dali", "naive_dali_npy", 3.0), ("hdf5", "torch", 4.0)]


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, required=True, help="a `dataprep convert --format all` image directory")
    p.add_argument("--workers", type=int, default=8, help="processes (torch, hdf5) or threads (ffcv, dali) for all")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--epochs", type=int, default=1, help="timed epochs, after one warm-up epoch")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--only", default=",".join(CONTENDERS), help="comma list of contenders")
    p.add_argument("--out", type=Path, help="where to write the raw JSON record")
    args = p.parse_args(argv)
    unknown = set(args.only.split(",")) - set(CONTENDERS)
    if unknown:
        p.error(f"--only: unknown {', '.join(sorted(unknown))}; valid: {', '.join(CONTENDERS)}")
    if not (args.data / "manifest.json").is_file():
        p.error(f"--data {args.data}: no manifest.json; make one with: dataprep convert --format all --output DIR")
    return args


def table(results: dict, checks: dict) -> str:
    """The printed summary: every contender's rate, then each target ratio and whether it was met."""
    lines = [f"{'contender':16s} {'img/s':>12s}"]
    for name, r in results.items():
        lines.append(f"{name:16s} {r['samples_per_s']:>12,.0f}" if "samples_per_s" in r else f"{name:16s} {r['error']}")
    lines.append(f"{'ours/reference':24s} {'ratio':>6s} {'target':>7s}")
    for k, v in checks.items():
        met = "ok" if v["ratio"] >= v["target"] else "MISSED"
        lines.append(f"{k:24s} {v['ratio']:5.2f}x {v['target']:6.1f}x {met}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    results = {}
    for name in args.only.split(","):
        try:
            results[name] = CONTENDERS[name](args)
        except Exception as e:  # one broken contender must not lose the others' numbers
            results[name] = {"error": f"{type(e).__name__}: {e}"}
        print(f"{name}: {results[name].get('samples_per_s', results[name].get('error'))}", file=sys.stderr, flush=True)
    rate = {k: v.get("samples_per_s") for k, v in results.items()}
    checks = {
        f"{a}/{b}": {"ratio": rate[a] / rate[b], "target": t} for a, b, t in TARGETS if rate.get(a) and rate.get(b)
    }
    print(table(results, checks))
    record = run_record() | {
        "config": vars(args) | {"data": str(args.data), "out": str(args.out)},
        "results": results,
        "ratios": checks,
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_json(args.out, record)
    return record


if __name__ == "__main__":
    main()
