"""Finding 9's writer rate: is `dataprep convert --text-encoder` as fast as its encoder? For each encoder, in
alternating rounds: distinct captions/s of the encoder alone (as the conversion loads it: bf16 and CUDA graphs on a
GPU, one batch per call, tokenizing included, results left on the device), of the conversion's caption writer
without files (the encoder, the copy of the valid tokens to the host), and of the writer writing its files into each
scratch folder; beside each folder, how fast a plain sequential write of the same bytes goes there (the disk's own
limit). The encoder's weights are hashed for the manifest before the rounds, as a conversion hashes them before it
loads the encoder.

    python -m bench.studies.text_rate --encoders clip=PATH,t5=PATH --captions 12000 --repeats 3 \\
        --scratch /tmp,/dev/shm --out rate.json

On the CPU, small: `--device cpu --encoders clip=tiny --captions 256 --batch-size 32`."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import Future
from pathlib import Path

import torch

from common.atomic import write_json
from common.run_record import run_record

from .text_cache import captions, encoder_folder

WARM_BATCHES = 8  # untimed batches first: one left the first timed figure up to 2x low (kernels, allocator)
BLOCK = 8 << 20  # the plain write's block, as large as the writer's biggest


def disk_write_per_s(folder: Path, size: int) -> float:
    """Bytes/s of writing `size` bytes to a new file in `folder` in 8 MiB blocks, closed, not synced: what the
    writer's files get from the page cache and the disk behind it."""
    block = os.urandom(BLOCK)
    with tempfile.NamedTemporaryFile(dir=folder, prefix="disk-") as f:
        t0, left = time.perf_counter(), size
        while left > 0:
            left -= f.write(block[: min(left, BLOCK)])
        f.flush()
        return size / (time.perf_counter() - t0)


def one_round(encoder, pool: list[str], batch: int, scratch: list[Path], sync, identity: Future) -> dict:
    from dataprep.textcache import TOKENS
    from dataprep.textcache_write import TextCacheWriter

    t0 = time.perf_counter()
    for k in range(0, len(pool), batch):
        encoder.encode(pool[k : k + batch])
    sync()
    row = {"encoder_alone_per_s": len(pool) / (time.perf_counter() - t0)}
    for folder in [None, *scratch]:
        with tempfile.TemporaryDirectory(prefix="text-writer-", dir=folder) as tmp:
            writer = TextCacheWriter(None if folder is None else Path(tmp), encoder, "bf16", batch, identity)
            t0 = time.perf_counter()
            writer.add(pool)
            writer.finish()
            per_s = len(pool) / (time.perf_counter() - t0)
            if folder is None:
                row["writer_no_files_per_s"] = per_s
                continue
            size = (Path(tmp) / "text" / TOKENS).stat().st_size
            row[f"writer_per_s {folder}"] = per_s
            row[f"bytes_written {folder}"] = size
            row[f"disk_write_bytes_per_s {folder}"] = disk_write_per_s(Path(tmp), size)
    return row


def encoder_rates(folder: Path, n: int, batch: int, device: str, repeats: int, scratch: list[Path]) -> dict:
    """Every figure of `one_round`, each round's and their medians."""
    from dataprep.textenc import load_text_encoder
    from dataprep.textenc.identity import sha256_soon

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    encoder = load_text_encoder(folder, device, torch.bfloat16 if device.startswith("cuda") else torch.float32)
    encoder.use_cuda_graphs()
    pool = captions(n + WARM_BATCHES * batch)
    warm, pool = pool[: WARM_BATCHES * batch], pool[WARM_BATCHES * batch :]
    for k in range(0, len(warm), batch):
        encoder.encode(warm[k : k + batch])
    sync()
    # hashed once, before the rounds: a conversion starts the hash before it imports and loads the encoder (8-13 s
    # for T5-XL), so its caption writer does not run beside it, and nor does a round's
    identity = sha256_soon(folder)
    identity.result()
    rounds = [one_round(encoder, pool, batch, scratch, sync, identity) for _ in range(repeats)]
    medians = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    alone = medians["encoder_alone_per_s"]
    shares = {k.replace("_per_s", "_of_alone"): v / alone for k, v in medians.items() if k.startswith("writer")}
    return {"captions": n, "batch_size": batch, "repeats": repeats, "median": medians | shares, "rounds": rounds}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--encoders", default="clip=clip-l,t5=t5-xl", help="kind=SIZE or kind=FOLDER, comma-separated")
    p.add_argument("--captions", type=int, default=12000, help="distinct captions a round encodes")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3, help="alternating rounds; the medians are reported")
    p.add_argument("--scratch", default=tempfile.gettempdir(), help="folders the files go to, comma-separated")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--out", type=Path, required=True, help="the JSON record")
    args = p.parse_args(argv)
    scratch = [Path(s) for s in args.scratch.split(",") if s]
    for s in scratch:
        if not s.is_dir():
            p.error(f"--scratch {s}: not a folder")
    rows = []
    with tempfile.TemporaryDirectory(prefix="text-rate-") as tmp:
        for spec in args.encoders.split(","):
            name, folder = encoder_folder(spec, Path(tmp))
            got = encoder_rates(folder, args.captions, args.batch_size, args.device, args.repeats, scratch)
            rows.append({"encoder": name} | got)
            print(name, {k: round(v, 3) for k, v in got["median"].items()}, file=sys.stderr)
    write_json(args.out, {"run": run_record(args.device), "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
