"""Measure the two storage choices dataprep makes, so the comments in dataprep/formats cite numbers, not lore:

1. HDF5 chunk size and read method: random batches of 128, read sample by sample with integer indexing (as
   loaders/hdf5_backend.py does) and, for comparison, as one sorted fancy index, from files written with 1, 16, 64
   and 256 samples per chunk (64 MiB chunk cache, as the loader opens it).
2. DALI layout: a CPU pipeline (no GPU needed) reading the same samples as webdataset tar shards of raw pixels
   (what dataprep writes), one .npy file per sample (fn.readers.numpy), and one PNG per sample (readers.file +
   decoders.image).

    python -m bench.studies.format_choices --data DIR --out bench/results/format_choices.json

DIR must hold the hdf5, dali and files formats of an image set (`dataprep convert --format all`).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np


def hdf5_chunks(x: np.ndarray, batches: int = 100, batch: int = 128) -> dict[str, float]:
    rng = np.random.default_rng(0)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for per_chunk in (1, 16, 64, 256):
            path = Path(tmp) / f"c{per_chunk}.h5"
            with h5py.File(path, "w") as f:
                f.create_dataset("x", data=x, chunks=(per_chunk, *x.shape[1:]))
            with h5py.File(path, "r", rdcc_nbytes=64 << 20) as f:
                ds, buf = f["x"], np.empty((batch, *x.shape[1:]), x.dtype)
                t = time.perf_counter()
                for _ in range(batches):
                    for k, i in enumerate(rng.choice(len(x), batch, replace=False)):
                        buf[k] = ds[i]
                out[f"per_sample_chunk{per_chunk}"] = batches * batch / (time.perf_counter() - t)
                t = time.perf_counter()
                for _ in range(batches // 10):
                    ds.read_direct(buf, np.s_[np.sort(rng.choice(len(x), batch, replace=False))])
                out[f"fancy_index_chunk{per_chunk}"] = batches // 10 * batch / (time.perf_counter() - t)
    return out


def dali_rate(pipe_fn, batches: int) -> float:
    pipe = pipe_fn()
    pipe.build()
    pipe.run()  # warm-up: reader start-up and first fill
    t = time.perf_counter()
    for _ in range(batches):
        pipe.run()
    return batches * pipe.max_batch_size / (time.perf_counter() - t)


def dali_layouts(data_dir: Path, x: np.ndarray, batch: int = 128, threads: int = 2) -> dict[str, float]:
    from nvidia.dali import fn, pipeline_def, types

    from dataprep.formats.dali import shard_paths

    tars, idx = shard_paths(data_dir)
    kw = dict(batch_size=batch, num_threads=threads, device_id=None, seed=0)

    @pipeline_def(**kw)
    def wds():
        img, _ = fn.readers.webdataset(
            paths=tars, index_paths=idx, ext=["rgb", "cls"], dtypes=[types.UINT8, types.INT64], random_shuffle=True
        )
        return fn.reshape(img, shape=list(x.shape[1:]))

    @pipeline_def(**kw)
    def png_files():
        files = sorted(str(p) for p in (data_dir / "files").rglob("*.png"))
        data, _ = fn.readers.file(files=files, random_shuffle=True)
        return fn.decoders.image(data, device="cpu")

    with tempfile.TemporaryDirectory() as tmp:
        for i, sample in enumerate(x):
            np.save(Path(tmp) / f"{i:07d}.npy", sample)

        @pipeline_def(**kw)
        def npy():
            return fn.readers.numpy(file_root=tmp, random_shuffle=True)

        rates = {"webdataset_raw": dali_rate(wds, 50), "npy_per_sample": dali_rate(npy, 50)}
    rates["png_per_sample"] = dali_rate(png_files, 50)
    return rates


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    with h5py.File(args.data / "data.h5", "r") as f:
        x = f["x"][:]
    from common.run_record import run_record

    result = {
        "run": run_record("cpu"),
        "samples": len(x),
        "hdf5_samples_per_s_by_chunk": hdf5_chunks(x),
        "dali_samples_per_s_by_layout": dali_layouts(args.data, x),
    }
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
