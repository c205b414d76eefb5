"""The stream loader's pace on a many-core GPU host, the loader alone: real CIFAR-10 from a SeaweedFS server on
127.0.0.1, batches moved to the device and finished there as training gets them, one fresh process a cell (epoch 1
from the store, epoch 2 from the cache), while a monitor thread samples every process of the loader (CPU share and
thread count). The cells vary what can starve a GPU host: worker count, the threads of the training process, and the
shard size.

    python -m bench.studies.stream_pace prepare --input CIFAR/train --url s3://data/c16 --shard-mib 16
    python -m bench.studies.stream_pace cell --url s3://data/c16 --workers 4 --device cuda --out cell.json
    bash bench/studies/stream_pace.sh          # the whole plan on the GPU machine (carry .whl/stream, .devdata)"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from pathlib import Path


def prepare(source: str, url: str, shard_mib: float | None) -> None:
    """`dataprep convert --format stream` of the images at `source` into `url`: shards of `shard_mib` MiB, or of the
    product's own size (dataprep.formats.stream.shard_samples) when None."""
    import dataprep.formats.stream as stream
    from dataprep.convert import ConvertConfig, convert

    if shard_mib:  # the study's own knob: shards of that many bytes
        stream.SHARD_SAMPLES, stream.SHARD_BYTES = 1 << 30, int(shard_mib * (1 << 20))
    t0 = time.perf_counter()
    convert(ConvertConfig(output=url, input=Path(source), formats=("stream",), workers=os.cpu_count(), progress=False))
    print(f"prepared {url} ({shard_mib or 'default'} MiB shards) in {time.perf_counter() - t0:.1f} s", flush=True)


def latents(url: str, local: Path, count: int) -> None:
    """`count` synthetic latent moments of DiT-B/2's input at 256 px in hdf5 (for the `gpu` loader) and stream
    format at `local`, the whole dataset uploaded to `url` (bench.studies.stream_data.write_latents)."""
    from bench.studies.stream_data import write_latents
    from dataprep.remote_write import upload_dir

    write_latents(local, count, formats=("stream", "hdf5"))
    upload_dir(local, url, overwrite=False)
    print(f"prepared {count} latents at {local} and {url}", flush=True)


def hold_link(target_port: int, rate: float, state: Path) -> None:
    """A shaped link (bench.objectstore.throttle) of `rate` bytes/s in front of the store at `target_port`, kept up
    until this process is killed; `state` holds its port and the bytes it has carried, rewritten twice a second."""
    from bench.objectstore.throttle import ShapedLink
    from common.atomic import write_json

    link = ShapedLink(target_port, rate or None, 0.0).start()
    while True:
        write_json(state, {"port": link.port, "rate": rate, "bytes_down": link.bytes_down, "t": time.time()})
        time.sleep(0.5)


class Monitor(threading.Thread):
    """Samples this process and its children every `period` s: CPU share (of one core) and thread count."""

    def __init__(self, period: float = 0.5) -> None:
        super().__init__(daemon=True)
        import psutil

        self.me, self.period, self.samples, self.done = psutil.Process(), period, [], threading.Event()

    def run(self) -> None:
        procs: dict[int, object] = {}
        while not self.done.wait(self.period):
            row = []
            for p in [self.me, *self.me.children(recursive=True)]:
                try:
                    p = procs.setdefault(p.pid, p)
                    row.append({"pid": p.pid, "cpu": p.cpu_percent(), "threads": p.num_threads()})
                except Exception:  # a worker that ended between the listing and the reading
                    pass
            self.samples.append({"t": time.perf_counter(), "procs": row})

    def summary(self, t0: float, t1: float) -> dict:
        """Median CPU share and threads of the main process and of each worker between t0 and t1."""
        rows = [s["procs"] for s in self.samples if t0 <= s["t"] <= t1]
        main = [r[0] for r in rows if r and r[0]["pid"] == self.me.pid]
        workers = [p for r in rows for p in r[1:]]
        med = lambda xs: round(statistics.median(xs), 1) if xs else None  # noqa: E731
        return {
            "main_cpu": med([p["cpu"] for p in main]),
            "main_threads": med([p["threads"] for p in main]),
            "worker_cpu": med([p["cpu"] for p in workers]),
            "worker_threads": med([p["threads"] for p in workers]),
            "processes": med([len(r) for r in rows]),
        }


def cell(url: str, workers: int, device: str, epochs: int, batch_size: int, threads: int | None) -> dict:
    import torch

    from common.run_record import run_record
    from loaders import build_loader

    if threads:
        torch.set_num_threads(threads)
    monitor = Monitor()
    monitor.start()
    t_open = time.perf_counter()
    loader = build_loader(
        "stream", url, batch_size=batch_size, workers=workers, pin_memory=device.startswith("cuda"), device=device
    )
    out = {
        "url": url,
        "workers": workers,
        "device": device,
        "batch_size": batch_size,
        "torch_threads": torch.get_num_threads(),
        "open_s": round(time.perf_counter() - t_open, 3),
        "epochs": [],
    }
    for e in range(epochs):
        loader.set_epoch(e)
        t0, n, first = time.perf_counter(), 0, None
        for b in loader:
            n += len(b.y)
            if first is None:
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                first = time.perf_counter() - t0
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t1 = time.perf_counter()
        row = {"epoch": e + 1, "samples": n, "seconds": round(t1 - t0, 3), "rate": round(n / (t1 - t0), 1)}
        out["epochs"].append(row | {"first_batch_s": round(first or 0, 3)} | monitor.summary(t0, t1))
        print(f"{url} workers={workers} threads={out['torch_threads']} epoch {e + 1}: {row['rate']:,.0f}/s", flush=True)
    loader.close()
    monitor.done.set()
    return out | {"record": run_record(device)}


VERSIONS = {"before": "full in-shard shuffle", "blocks": "blocks of 256", "final": "blocks of 256"}
SHARDS = {"c16": "16 MiB shards", "c4": "4 MiB", "c2": "2 MiB", "cd": "1,024 images (default)"}


def plot(folder: Path, out: Path) -> None:
    """Images/s against workers, epoch 1 (store) and 2 (cache), for each shard size and code version in `folder`'s
    sub-folders (cells named SHARDS_wN[_tT][_callK].json)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for version in sorted(p for p in folder.iterdir() if p.is_dir()):
        lines: dict[str, dict[int, list[float]]] = {}
        for f in version.glob("*_w*.json"):
            name, rest = f.stem.split("_w", 1)
            if "_t" in rest or name.startswith("profiled"):
                continue
            d = json.loads(f.read_text())
            for e, row in enumerate(d["epochs"]):
                lines.setdefault(f"{name}:{e}", {}).setdefault(d["workers"], []).append(row["rate"])
        for key, points in sorted(lines.items()):
            name, e = key.split(":")
            w = sorted(x for x in points if x > 0)  # 0 workers: the loading process itself, off a log axis
            label = f"{VERSIONS.get(version.name, version.name)}, {SHARDS.get(name, name)}"
            axes[int(e)].plot(w, [statistics.median(points[x]) for x in w], marker="o", label=label)
    for e, ax in enumerate(axes):
        ax.set(title=f"epoch {e + 1} ({'from the store' if e == 0 else 'from the cache'})", xlabel="loader workers")
        ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("images/s, the loader alone")
    axes[1].legend(fontsize=7)
    fig.suptitle("stream loader, 50,000 CIFAR-10 images from SeaweedFS on the host, one H200 host (16 cores)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.studies.stream_pace", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("prepare")
    a.add_argument("--input", required=True)
    a.add_argument("--url", required=True)
    a.add_argument("--shard-mib", type=float, default=None, help="[default: the product's shards]")
    lat = sub.add_parser("latents")
    lat.add_argument("--url", required=True)
    lat.add_argument("--local", type=Path, required=True)
    lat.add_argument("--count", type=int, default=16384)
    h = sub.add_parser("link")
    h.add_argument("--target-port", type=int, required=True)
    h.add_argument("--rate", type=float, required=True, help="bytes/s; 0: no cap")
    h.add_argument("--state", type=Path, required=True)
    c = sub.add_parser("cell")
    c.add_argument("--url", required=True)
    c.add_argument("--workers", type=int, required=True)
    c.add_argument("--device", default="cuda")
    c.add_argument("--epochs", type=int, default=2)
    c.add_argument("--batch-size", type=int, default=128)
    c.add_argument("--threads", type=int, default=None, help="torch threads of the loading process")
    c.add_argument("--out", type=Path, required=True)
    g = sub.add_parser("plot")
    g.add_argument("folder", type=Path)
    g.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    if args.command == "plot":
        plot(args.folder, args.out)
        return
    if args.command == "link":
        hold_link(args.target_port, args.rate, args.state)
        return
    if args.command == "latents":
        latents(args.url, args.local, args.count)
        return
    if args.command == "prepare":
        prepare(args.input, args.url, args.shard_mib)
        return
    result = cell(args.url, args.workers, args.device, args.epochs, args.batch_size, args.threads)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
