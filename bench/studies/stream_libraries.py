"""Which streaming library the `stream` loader stands on: MosaicML Streaming or LitData, each through its own loader
alone (its StreamingDataset and StreamingDataLoader, no model), on the same samples served by the same SeaweedFS.

Both get the samples of a prepared HDF5 directory (uint8 pixels as raw bytes and the int64 label: no encoding on
either side), in shards of the same size, uploaded to one SeaweedFS server on 127.0.0.1. Each configuration runs in a
fresh process with an empty cache for epoch 1 (every shard comes over the network) and then epoch 2 (from its local
cache), shuffled with the library's default algorithm, batch 128; the same collate turns the bytes into one uint8
array per batch for both. Rounds alternate the libraries so drift on a shared machine hits both alike.

Beside the rates it records how well each shuffles: for every batch of epoch 1 the number of distinct shards its
samples came from (a shard-level shuffle gives 1-2; a uniform permutation gives min(batch, shards) nearly), and the
mean distance in manifest order between consecutive samples relative to a uniform permutation's (N/3).

    python -m bench.studies.stream_libraries --data DIR_WITH_HDF5 --out bench/results/stream_libraries_cpu.json

MosaicML Streaming need not be installed in the environment (0.13.0 pins numpy<2.2 and imports transformers): point
--mds-path at a folder it was installed into with `pip install --target DIR --no-deps mosaicml-streaming ...`."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

LIBRARIES = ("litdata", "mosaic")


def collate(items: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Raw sample bytes -> (uint8 (n, bytes), labels, manifest indices): the same work for both libraries."""
    x = np.stack([np.frombuffer(it["x"], np.uint8) for it in items])
    return x, np.asarray([it["y"] for it in items]), np.asarray([it["i"] for it in items])


def write_litdata(data: Path, out: Path, shard_bytes: int) -> None:
    import h5py
    from litdata.streaming.writer import BinaryWriter

    with h5py.File(data / "data.h5") as f:
        x, y = f["x"], f["y"][:]
        writer = BinaryWriter(str(out), chunk_bytes=shard_bytes)
        for i in range(len(y)):
            writer[i] = {"x": x[i].tobytes(), "y": int(y[i]), "i": i}
        writer.done()
        writer.merge()


def write_mosaic(data: Path, out: Path, shard_bytes: int) -> None:
    import h5py
    from streaming import MDSWriter

    with (
        h5py.File(data / "data.h5") as f,
        MDSWriter(out=str(out), columns={"x": "bytes", "y": "int", "i": "int"}, size_limit=shard_bytes) as writer,
    ):
        x, y = f["x"], f["y"][:]
        for i in range(len(y)):
            writer.write({"x": x[i].tobytes(), "y": int(y[i]), "i": i})


def upload(local: Path, bucket: str, prefix: str) -> None:
    import boto3

    s3 = boto3.client("s3")
    for path in sorted(local.rglob("*")):
        if path.is_file():
            s3.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(local)}")


def shard_of(library: str, local: Path) -> np.ndarray:
    """Manifest index -> shard number, from the library's own index file."""
    index = json.loads((local / "index.json").read_text())
    sizes = (
        [c["chunk_size"] for c in index["chunks"]] if library == "litdata" else [s["samples"] for s in index["shards"]]
    )
    return np.repeat(np.arange(len(sizes)), sizes)


def loader(library: str, url: str, cache: Path, workers: int, seed: int):
    if library == "litdata":
        from loaders.stream_backend import plain_http_through_boto3

        plain_http_through_boto3()  # LitData's obstore path cannot reach a plain-http endpoint (loaders/stream_backend)
        from litdata import StreamingDataLoader, StreamingDataset

        ds = StreamingDataset(url, cache_dir=str(cache), shuffle=True, seed=seed, drop_last=True)
        return StreamingDataLoader(ds, batch_size=128, num_workers=workers, collate_fn=collate, drop_last=True)
    from streaming import StreamingDataLoader, StreamingDataset

    ds = StreamingDataset(remote=url, local=str(cache), shuffle=True, shuffle_seed=seed, batch_size=128)
    return StreamingDataLoader(ds, batch_size=128, num_workers=workers, collate_fn=collate, drop_last=True)


def one_run(library: str, url: str, workers: int, shards: np.ndarray) -> dict:
    """Epoch 1 from an empty cache, then epoch 2 from the cache: rates, and epoch 1's mixing."""
    out: dict = {"library": library, "workers": workers}
    with tempfile.TemporaryDirectory(prefix=f"{library}-cache-") as cache:
        dl = loader(library, url, Path(cache), workers, seed=0)
        for epoch in (1, 2):
            if library == "litdata":
                dl.dataset.set_epoch(epoch)
            t0, first, n, order, distinct = time.perf_counter(), None, 0, [], []
            for x, _, idx in dl:
                first = first or time.perf_counter() - t0
                n += len(x)
                order.append(idx)
                distinct.append(len(np.unique(shards[idx])))
            wall = time.perf_counter() - t0
            order = np.concatenate(order)
            out[f"epoch{epoch}"] = {
                "samples": n,
                "seconds": round(wall, 3),
                "samples_per_s": round(n / wall, 1),
                "first_batch_s": round(first, 3),
                "distinct_shards_per_batch": float(np.mean(distinct)),
                "step_distance_vs_uniform": float(np.abs(np.diff(order)).mean() / (len(shards) / 3)),
                "unique_samples": int(len(np.unique(order))),
            }
        del dl
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, help="a prepared directory with the hdf5 format")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--shard-mb", type=float, default=8.0, help="shard size for both libraries")
    p.add_argument("--workers", default="0,2")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--mds-path", help="a folder MosaicML Streaming was installed into (pip --target)")
    p.add_argument("--one", help=argparse.SUPPRESS)  # JSON of one run, in a fresh process
    a = p.parse_args()
    if a.one:
        job = json.loads(a.one)
        result = one_run(job["library"], job["url"], job["workers"], np.load(job["shards"]))
        a.out.write_text(json.dumps(result))
        return
    run_study(a)


def run_study(a) -> None:
    from bench.objectstore.seaweed import SeaweedServer
    from common.run_record import run_record

    env = dict(os.environ)
    if a.mds_path:
        env["PYTHONPATH"] = os.pathsep.join([str(Path(a.mds_path).resolve()), env.get("PYTHONPATH", "")])
    with tempfile.TemporaryDirectory(prefix="stream-libraries-") as tmp, SeaweedServer(Path(tmp) / "s3") as server:
        tmp = Path(tmp)
        env |= server.env() | {"S3_ENDPOINT_URL": server.endpoint}  # MosaicML Streaming reads its own variable
        os.environ.update(env)
        import boto3

        boto3.client("s3").create_bucket(Bucket="study")
        shard_bytes = int(a.shard_mb * 2**20)
        subprocess.run(
            [
                sys.executable,
                "-c",
                f"from bench.studies.stream_libraries import write_litdata as w; "
                f"from pathlib import Path; w(Path({str(a.data)!r}), Path({str(tmp / 'litdata')!r}), "
                f"{shard_bytes})",
            ],
            check=True,
            env=env,
        )
        subprocess.run(
            [
                sys.executable,
                "-c",
                f"from bench.studies.stream_libraries import write_mosaic as w; "
                f"from pathlib import Path; w(Path({str(a.data)!r}), Path({str(tmp / 'mosaic')!r}), "
                f"{shard_bytes})",
            ],
            check=True,
            env=env,
        )
        runs, layout = [], {}
        for library in LIBRARIES:
            upload(tmp / library, "study", library)
            np.save(tmp / f"{library}-shards.npy", shard_of(library, tmp / library))
            files = [p for p in (tmp / library).iterdir() if p.name != "index.json"]
            layout[library] = {"shards": len(files), "bytes": sum(p.stat().st_size for p in files)}
        for r in range(a.rounds):
            for workers in map(int, a.workers.split(",")):
                for library in LIBRARIES if r % 2 == 0 else LIBRARIES[::-1]:
                    job = {
                        "library": library,
                        "url": f"s3://study/{library}",
                        "workers": workers,
                        "shards": str(tmp / f"{library}-shards.npy"),
                    }
                    out = tmp / "one.json"
                    subprocess.run(
                        [
                            sys.executable,
                            "-m",
                            "bench.studies.stream_libraries",
                            "--out",
                            str(out),
                            "--one",
                            json.dumps(job),
                        ],
                        check=True,
                        env=env,
                    )
                    runs.append(json.loads(out.read_text()) | {"round": r})
                    print(json.dumps(runs[-1]), flush=True)
    versions = {}
    for name in ("litdata", "streaming"):
        code = f"import {name}; print({name}.__version__)"
        versions[name] = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True
        ).stdout.strip()
    record = {
        "study": "stream_libraries",
        "data": str(a.data),
        "shard_mb": a.shard_mb,
        "batch_size": 128,
        "layout": layout,
        "versions": versions,
        "runs": runs,
        "environment": run_record("cpu"),
        "command": " ".join(sys.argv),
    }
    a.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
