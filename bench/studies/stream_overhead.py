"""What gpufeed's `stream` loader costs over LitData's own loader, on the same shards from the same SeaweedFS.

One dataset, written once by `dataprep convert --format stream` straight into a bucket of a SeaweedFS server on
127.0.0.1. Each configuration runs in a fresh process with an empty cache: epoch 1 (every shard over the network) then
epoch 2 (from the cache), batch 128, shuffled, no model. The two sides do the same data work per batch:

- `litdata`: LitData's StreamingDataset and StreamingDataLoader over the shards, the stream backend's collate (raw
  bytes to one uint8 array), then the same reshape and `finish_images` (uint8 to float in [-1, 1]) gpufeed applies;
- `gpufeed`: `build_loader("stream", "s3://...")`, which adds the manifest, the sha256 check of every shard as it
  arrives, the bounded cache, the per-epoch order and resume bookkeeping.

Rounds alternate which side runs first so drift on a shared machine, and the server's memory of what it served last,
hit both alike; the answer is gpufeed's rate as a share of LitData's, per worker count and epoch, over an even number
of rounds.

    python -m bench.studies.stream_overhead --out bench/results/stream_overhead_cpu.json --images 20000 --rounds 8"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SIDES = ("litdata", "gpufeed")
URL = "s3://study/ds"


def batches(side: str, workers: int, cache: Path):
    """A function of the epoch (1, 2) giving that epoch's batches as float images in [-1, 1], as training gets them,
    and the function that closes the loader."""
    import torch

    from loaders import build_loader

    if side == "gpufeed":
        loader = build_loader("stream", URL, batch_size=128, workers=workers, augment=False, pin_memory=False)

        def ours(e: int):
            loader.set_epoch(e - 1)  # gpufeed counts epochs from 0
            return (b.x for b in loader)

        return ours, loader.close
    from litdata import StreamingDataLoader, StreamingDataset

    from dataprep.formats.stream import DIRNAME
    from dataprep.remote import files_url, load_remote_manifest
    from loaders.base import finish_images
    from loaders.stream_backend import DECODE_ROWS, client_config, collate, plain_http_through_boto3, split

    plain_http_through_boto3()
    manifest = load_remote_manifest(URL)
    shape = tuple(manifest["sample_shape"])
    ds = StreamingDataset(
        f"{files_url(URL, manifest)}/{DIRNAME}",  # the generation folder the manifest names
        cache_dir=str(cache),
        shuffle=True,
        drop_last=True,
        seed=0,
        item_shuffle_window=DECODE_ROWS,  # the stream backend's settings: blocks in random order, each decoded once
        batch_decode=DECODE_ROWS,
        storage_options={"config": client_config()},
    )
    dl = StreamingDataLoader(ds, batch_size=128, num_workers=workers, collate_fn=collate, drop_last=True)

    def theirs(e: int):
        ds.set_epoch(e)  # LitData counts epochs from 1
        for buf, n, _ in dl:
            yield finish_images(split(buf, n, torch.uint8, shape)[0], torch.float32, None)

    return theirs, lambda: None


def one_run(side: str, workers: int) -> dict:
    """Epoch 1 from an empty cache, then epoch 2 from the cache."""
    from loaders.stream_cache import DEFAULT_CACHE

    out: dict = {"side": side, "workers": workers}
    with tempfile.TemporaryDirectory(prefix=f"{side}-cache-") as cache:
        os.environ[DEFAULT_CACHE] = cache  # gpufeed's cache root; LitData's own loader gets cache_dir
        epoch, close = batches(side, workers, Path(cache))
        for e in (1, 2):
            t0, n = time.perf_counter(), 0
            for x in epoch(e):
                n += len(x)
            wall = time.perf_counter() - t0
            out[f"epoch{e}"] = {"samples": n, "seconds": round(wall, 3), "samples_per_s": round(n / wall, 1)}
        close()
    return out


def shares(runs: list[dict]) -> dict:
    """gpufeed's rate / LitData's, per worker count and epoch: each round's, their median, and their geometric mean.
    The second process of a pair tends to be faster (the server has the shards in memory), so rounds alternate which
    side goes first and the geometric mean over an even number of rounds cancels that."""
    out = {}
    for w in sorted({r["workers"] for r in runs}):
        for e in ("epoch1", "epoch2"):
            by_round = {}
            for r in (r for r in runs if r["workers"] == w):
                by_round.setdefault(r["round"], {})[r["side"]] = r[e]["samples_per_s"]
            ratios = [v["gpufeed"] / v["litdata"] for v in by_round.values() if len(v) == 2]
            out[f"workers{w}-{e}"] = {
                "geomean": statistics.geometric_mean(ratios),
                "median": statistics.median(ratios),
                "rounds": ratios,
            }
    return out


def run_study(a) -> dict:
    from importlib.metadata import version

    from bench.objectstore.seaweed import SeaweedServer
    from common.run_record import run_record

    with tempfile.TemporaryDirectory(prefix="stream-overhead-") as tmp, SeaweedServer(Path(tmp) / "s3") as server:
        env = dict(os.environ) | server.env()
        os.environ.update(env)
        import boto3

        boto3.client("s3").create_bucket(Bucket="study")
        convert = [sys.executable, "-m", "dataprep", "convert", "--source", "synthetic-images", "--limit"]
        subprocess.run([*convert, str(a.images), "--format", "stream", "--output", URL, "--quiet"], check=True, env=env)
        runs = []
        for r in range(a.rounds):
            for workers in map(int, a.workers.split(",")):
                for side in SIDES if r % 2 == 0 else SIDES[::-1]:
                    out = Path(tmp) / "one.json"
                    job = json.dumps({"side": side, "workers": workers})
                    own = [sys.executable, "-m", "bench.studies.stream_overhead", "--out", str(out), "--one", job]
                    subprocess.run(own, check=True, env=env)
                    runs.append(json.loads(out.read_text()) | {"round": r})
                    print(json.dumps(runs[-1]), flush=True)
    return {
        "study": "stream_overhead",
        "images": a.images,
        "batch_size": 128,
        "runs": runs,
        "gpufeed_over_litdata": shares(runs),
        "litdata": version("litdata"),
        "environment": run_record("cpu"),
        "command": " ".join(sys.argv),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--images", type=int, default=20000, help="synthetic 32x32 images in the bucket")
    p.add_argument("--workers", default="0,2")
    p.add_argument("--rounds", type=int, default=8, help="even: each side goes first in half of them")
    p.add_argument("--one", help=argparse.SUPPRESS)  # JSON of one run, in a fresh process
    a = p.parse_args()
    if a.one:
        job = json.loads(a.one)
        a.out.write_text(json.dumps(one_run(job["side"], job["workers"])))
        return
    record = run_study(a)
    a.out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record["gpufeed_over_litdata"], indent=1))


if __name__ == "__main__":
    main()
