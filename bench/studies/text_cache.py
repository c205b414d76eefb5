"""Finding 9's study: what caching caption embeddings buys against what it costs. `dit_b2_text` trains on synthetic
cached latents (256 px: 4x32x32) in the real training loop, its captions either cached (embeddings looked up in a
text table as `convert --text-encoder` writes it, moved to the device per batch, as every loader does) or online
(raw captions, encoded in the step as `train --text-encoder` does), with a CLIP-L-sized and a T5-XL-sized encoder
built from config by `make_text_encoder` (random weights: speed and bytes do not depend on them). For each encoder
it records both rates and their ratio, and the bytes a sample's caption costs on disk and on the link: padded to the
encoder's limit in fp32 (as PixArt's .npz and mosaicml's shards keep them), padded in 16 bits, and valid tokens only
(the table's own files, fp16 and bf16 alike), with whether fp16 overflows on these embeddings.

    python -m bench.studies.text_cache --device cuda --steps 200 --warmup 50 --out bench/results/text_cache_h100.json

On the CPU, small: `--steps 3 --device cpu --model dit_tiny_text --encoders clip=tiny,t5=tiny` (or a folder of an
encoder already made, `clip=PATH`); the figures then only show the study runs."""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

import torch

from common.atomic import write_json
from common.run_record import run_record

WORDS = "a photo of the small large red blue green dog cat car house tree river city night sky old man woman".split()


def captions(n: int, seed: int = 0) -> list[str]:
    """`n` distinct captions of 8 to 48 words: the spread of real datasets' captions (LAION's short alt-texts to
    PixArt's long synthetic ones), so valid-tokens-only storage is measured on varied lengths."""
    rng, out = random.Random(seed), {}
    while len(out) < n:
        out.setdefault(" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 48))), None)
    return list(out)


def write_metadata(folder: Path) -> int:
    """Caption every image below `folder` (sorted paths) with its own distinct caption, in Hugging Face imagefolder's
    `metadata.jsonl`, so a conversion has as many distinct captions as images, as real captioned datasets do."""
    import json

    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.suffix.lower() in {".jpg", ".png"})
    lines = [json.dumps({"file_name": f, "text": c}) for f, c in zip(files, captions(len(files)))]
    (folder / "metadata.jsonl").write_text("\n".join(lines) + "\n")
    return len(files)


class Feed:
    """The training loop's loader: `steps` batches of random latents on the device, each with its captions as raw
    text (online) or as their cached embeddings from `table` (cached), drawn from `pool` in a seeded order."""

    order_from_epoch = True

    def __init__(self, pool: list[str], table, batch: int, steps: int, device: str) -> None:
        self.pool, self.table, self.batch, self.steps, self.device, self.epoch = pool, table, batch, steps, device, 0
        self.x = torch.randn(batch, 4, 32, 32, device=device)  # resident: the data plays no part

    def __len__(self) -> int:
        return self.steps

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def close(self) -> None:
        pass

    def __iter__(self):
        from loaders.base import Batch

        rng = random.Random(self.epoch)
        y = torch.zeros(self.batch, dtype=torch.int64, device=self.device)
        for _ in range(self.steps):
            text = [rng.choice(self.pool) for _ in range(self.batch)]
            if self.table is not None:  # as loaders.base does: a host lookup, padded per batch, then the copy
                text = self.table.lookup(text, pin_memory=self.device.startswith("cuda")).to(self.device)
            yield Batch(self.x, y, text)


def encoder_folder(spec: str, work: Path) -> tuple[str, Path]:
    """(name, folder) of `kind=SIZE` (built into `work`) or `kind=FOLDER` (an encoder made before)."""
    from dataprep.textenc import make_text_encoder

    kind, _, what = spec.partition("=")
    if Path(what).is_dir():
        return f"{kind}:{Path(what).name}", Path(what)
    return f"{kind}:{what}", make_text_encoder(kind, work / f"{kind}-{what}", what)


def table_bytes(folder: Path, pool: list[str], work: Path, device: str) -> tuple[object, dict]:
    """(the bf16 text table of `pool`, bytes a caption costs stored each way, and fp16's overflow)."""
    from dataprep.textcache import TextTable
    from dataprep.textcache_write import TextCacheWriter
    from dataprep.textenc import load_text_encoder

    encoder = load_text_encoder(folder, device, max_tokens=None)
    full = encoder.encode(pool)  # fp32, padded to the batch's longest
    sizes, tables = {}, {}
    for dtype in ("fp16", "bf16"):
        out = work / f"{folder.name}-{dtype}"
        out.mkdir()
        writer = TextCacheWriter(out, encoder, dtype, batch_size=64)
        writer.add(pool)
        files, entry = writer.finish()
        sizes[dtype] = sum((out / f).stat().st_size for f in files if f.name != "captions.json") / len(pool)
        tables[dtype] = TextTable(out, {"text": entry})
    positions, pooled = encoder.max_tokens, encoder.pooled_dim  # padded: every position's tokens and mask byte
    return tables["bf16"], {
        "encoder_params": sum(p.numel() for p in encoder.model.parameters()),
        "dim": encoder.dim,
        "max_tokens": encoder.max_tokens,
        "mean_valid_tokens": float(full.mask.sum(1).float().mean()),
        "bytes_per_sample": {
            "fp32_padded": positions * (4 * encoder.dim + 1) + 4 * pooled,
            "16bit_padded": positions * (2 * encoder.dim + 1) + 2 * pooled,
            "fp16_valid_only": sizes["fp16"],
            "bf16_valid_only": sizes["bf16"],
        },
        "fp16_overflows": bool((full.tokens.abs() > torch.finfo(torch.float16).max).any()),
    }


def rate(args, folder: Path, pool: list[str], table, out: Path) -> float:
    """Samples/s of the training loop's timed steps, captions cached (`table`) or encoded in the step (None)."""
    from training.config import measuring_run
    from training.loop import main

    cfg = measuring_run(
        out,
        args.warmup + args.steps,
        data=out,  # no manifest: the loader is given, the model the preset's (4x32x32 latents)
        loader="torch",
        model=args.model,
        text_encoder=str(folder),  # the width, and (online) the encoder the step runs
        caption_dropout=0.0,
        batch_size=args.batch_size,
        timing_warmup=args.warmup,
        precision="bf16" if args.device.startswith("cuda") else "fp32",
        compile=args.compile,
        device=args.device,
        warmup=0,
    )
    return main(cfg, Feed(pool, table, args.batch_size, args.warmup + args.steps, args.device)).samples_per_s


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--encoders", default="clip=clip-l,t5=t5-xl", help="kind=SIZE or kind=FOLDER, comma-separated")
    p.add_argument("--model", default="dit_b2_text")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=200, help="timed steps per rate")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps first (compile, autotune)")
    p.add_argument("--captions", type=int, default=512, help="distinct captions drawn from")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--out", type=Path, help="the JSON record")
    p.add_argument("--caption-folder", type=Path, help="only write a distinct caption per image of this folder")
    args = p.parse_args(argv)
    if args.caption_folder is not None:
        print(f"{write_metadata(args.caption_folder):,} captions in {args.caption_folder}/metadata.jsonl")
        return 0
    if args.out is None:
        p.error("--out is required")
    pool, rows = captions(args.captions), []
    with tempfile.TemporaryDirectory(prefix="text-cache-study-") as tmp:
        work = Path(tmp)
        for spec in args.encoders.split(","):
            name, folder = encoder_folder(spec, work)
            table, row = table_bytes(folder, pool, work, args.device)
            cached = rate(args, folder, pool, table, work / f"{folder.name}-cached")
            online = rate(args, folder, pool, None, work / f"{folder.name}-online")
            row |= {"encoder": name, "cached_samples_per_s": cached, "online_samples_per_s": online}
            rows.append(row | {"speedup": cached / online})
            print(
                f"{name}: cached {cached:,.1f} samples/s, online {online:,.1f}: x{cached / online:.2f}", file=sys.stderr
            )
    record = {"run": run_record(args.device), "model": args.model, "batch_size": args.batch_size, "rows": rows}
    write_json(args.out, record | {"steps": args.steps, "warmup": args.warmup, "captions": args.captions})
    return 0


if __name__ == "__main__":
    sys.exit(main())
