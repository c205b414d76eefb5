"""What `dataprep convert` is asked to do (ConvertConfig, the command's options as a typed function's argument), and
the error it raises when the request or the input cannot be converted."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .parallel import cores_per_rank


class ConvertError(Exception):
    pass


@dataclass
class ConvertConfig:
    output: Path | str  # a directory, or s3://BUCKET/PREFIX (converted locally, then uploaded)
    input: Path | None = None
    formats: tuple[str, ...] = ("all",)
    source: str = "auto"  # detected from the layout; see dataprep.sources.SOURCES
    split: str = "train"
    limit: int | None = None  # first N usable samples; the size of the synthetic sets
    workers: int = field(default_factory=cores_per_rank)  # decoding, encoding, FFCV writer processes: our cores
    on_bad_file: str = "error"  # or "skip": leave bad samples out and list them in the manifest
    sample_rate: int = 16000
    clip_seconds: float = 1.024  # 16384 samples at 16 kHz: 64 STFT hops of 256
    channels: int = 1
    size: int | None = None  # images: shorter side to size, centre crop size x size (see dataprep.sources.images)
    progress: bool = True
    overwrite: bool = False
    timings: bool = False  # print where the time went (the manifest keeps it either way)
    command: str | None = None  # recorded in the manifest; defaults to sys.argv
    caption_templates: tuple[str, ...] = ()  # captions from class names, one drawn per sample (sources.captions)
    # latents (dataprep.latents): encode every sample once with this AutoencoderKL (a directory or a hub id)
    vae: str | None = None
    batch_size: int = 64  # samples per autoencoder batch: an SD-sized encoder at 256 px fits in a few GiB at 64
    device: str | None = None  # where the autoencoder runs; None: cuda when there is one
    vae_precision: str = "bf16"  # bf16 autocast on a GPU (the encoder's fast path); always fp32 on the CPU
    compile: bool = False  # torch.compile the encoder: faster after half a minute of compiling (finding 6)
    # caption embeddings (dataprep.textcache): encode every distinct caption once with this save_pretrained encoder
    text_encoder: str | None = None
    text_max_tokens: int | None = None  # None: the encoder's own limit (CLIP 77, T5 120)
    text_dtype: str = "bf16"  # what the embeddings are stored as: bf16 (T5's range) or fp16 (3 more mantissa bits)
