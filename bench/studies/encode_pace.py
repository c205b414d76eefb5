"""Where `dataprep convert --vae` loses time against the encoder's own rate: the same autoencoder, the same batch and
random clips, timed along the conversion's path one piece at a time.

    python -m bench.studies.encode_pace --vae VAES/audioldm --clip-seconds 10.24 --json F [--profile F.txt]

Each row is wall-clock clips/s over the same clips, after a warm-up, with the GPU synchronised at both ends:
- `encoder`: the autoencoder alone on log-mels already on the GPU, as loaded (what the conversion runs);
- `encoder, channels_last`: the same, model and input channels_last (the setup of `latent_cache encoder-rate`);
- `mel + encoder`: waves already on the GPU, AudioLDM's mel computed there first;
- `LatentEncoder.encode`: the conversion's own call on numpy chunks (pinned copy, mel, encoder, copy back);
- `LatentEncoder.stream`: the same through its encoding thread, each chunk queued before the one before it is
  collected, the caller idle (no writers, no decoding).
The gap between two neighbouring rows is what that step costs. `--profile` adds the PyTorch profiler's busiest
operations over two chunks of `LatentEncoder.encode`, by host time and by GPU time."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _rate(fn, clips: int, repeats: int) -> float:
    fn()  # warm-up: cuDNN's heuristics, the allocator's first blocks
    _sync()
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    _sync()
    return round(clips * repeats / (time.perf_counter() - t0), 1)


def measure(
    vae_dir: str, clip_seconds: float, batch: int, chunk: int, repeats: int, profile: Path | None, device: str = "cuda"
) -> dict:
    from common.vae import load_vae
    from dataprep.features import AUDIOLDM_SAMPLE_RATE, audioldm_mel
    from dataprep.latents.encode import LatentEncoder
    from dataprep.sources.base import AudioSpec, Chunk

    spec = AudioSpec(sample_rate=AUDIOLDM_SAMPLE_RATE, clip_seconds=clip_seconds, channels=1)
    rng = np.random.default_rng(0)
    waves = (0.1 * rng.standard_normal((chunk, spec.num_samples))).astype(np.float32)
    chunks = [Chunk(waves, np.zeros(chunk, np.int64)) for _ in range(repeats)]
    vae = load_vae(vae_dir, device)
    enc = LatentEncoder(vae, "audio", waves.shape[1:], spec, batch_size=batch, precision="bf16")
    on_gpu = torch.from_numpy(waves[:batch]).to(device)
    mel = audioldm_mel(on_gpu)[:, None]
    bf16 = enc.autocast  # bf16 on a GPU, as the conversion encodes
    per_chunk = chunk // batch  # the rows below encode `chunk` clips per call, in batches of `batch`

    def encoder(x: torch.Tensor):
        def run():
            with bf16:
                for _ in range(per_chunk):
                    vae.moments(x)

        return run

    def mel_encoder():
        with bf16:
            for _ in range(per_chunk):
                vae.moments(audioldm_mel(on_gpu)[:, None])

    rows = {"encoder": _rate(encoder(mel), chunk, repeats), "mel + encoder": _rate(mel_encoder, chunk, repeats)}
    rows["LatentEncoder.encode"] = _rate(lambda: enc.encode(chunks[0]), chunk, repeats)
    rows["LatentEncoder.stream"] = _rate(lambda: sum(1 for _ in enc.stream(iter(chunks))), chunk * repeats, 1)
    if profile is not None:
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as profiler

        gpu = [ProfilerActivity.CUDA] if device == "cuda" else []
        with profiler(activities=[ProfilerActivity.CPU, *gpu]) as prof:
            for c in chunks[:2]:
                enc.encode(c)
        table = prof.key_averages()
        profile.write_text(
            table.table(sort_by="self_cpu_time_total", row_limit=20)
            + "\n"
            + table.table(sort_by="self_device_time_total", row_limit=20)
            + "\n"
        )
    vae.model.to(memory_format=torch.channels_last)  # last: the rows above run the model as the conversion loads it
    rows["encoder, channels_last"] = _rate(encoder(mel.contiguous(memory_format=torch.channels_last)), chunk, repeats)
    name = torch.cuda.get_device_name() if device == "cuda" else device
    return {
        "vae": vae_dir,
        "clip_seconds": clip_seconds,
        "batch_size": batch,
        "chunk": chunk,
        "repeats": repeats,
        "clips_per_s": rows,
        "device": name,
        "torch": torch.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vae", required=True)
    p.add_argument("--clip-seconds", type=float, default=10.24)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--chunk", type=int, default=96, help="clips per LatentEncoder.encode call, as the conversion's")
    p.add_argument("--repeats", type=int, default=8)
    p.add_argument("--json", type=Path, required=True)
    p.add_argument("--profile", type=Path)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args(argv)
    out = measure(args.vae, args.clip_seconds, args.batch_size, args.chunk, args.repeats, args.profile, args.device)
    from common.run_record import run_record

    args.json.write_text(json.dumps(out | {"run": run_record(args.device)}, indent=1) + "\n")
    for name, rate in out["clips_per_s"].items():
        print(f"{name:>24}: {rate:8,.1f} clips/s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
