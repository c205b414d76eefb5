"""The encoder passes of `dataprep convert --vae` and `--text-encoder`: the autoencoder and the text encoder loaded on
this process's device, the encoder that turns decoded chunks into latents (dataprep.latents), and the ranks under
torchrun, which encode in turns (batches of samples, batches of distinct captions) while rank 0 alone writes."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import chain

from common import ranks

from .convert_config import ConvertConfig
from .convert_input import chunk_size, listed_captions, open_source, usable, with_templates
from .sources import AudioSpec, Chunk
from .timings import Timings


@contextmanager
def ranks_group(cfg: ConvertConfig, times: Timings) -> Iterator[None]:
    """Under torchrun the ranks encode in turns (--vae): they join one process group for the conversion, each rank on
    its own GPU, and leave it at its end, as a group left to the interpreter's shutdown can abort the rank there (gloo:
    "terminate called without an active exception"). A rank that fails ends every rank promptly (common.ranks)."""
    if (cfg.vae is None and cfg.text_encoder is None) or ranks.world()[1] == 1:
        yield
        return
    import torch

    if torch.distributed.is_initialized():  # a group the caller made is the caller's to leave
        device = _rank_device(cfg)
        if device.startswith("cuda"):
            torch.cuda.set_device(device)
        yield
        return
    with times.timed("join the other ranks"):
        watch = ranks.join(_rank_device(cfg))
    try:
        yield
    except BaseException as e:
        ranks.leave(watch, e)
        raise
    ranks.leave(watch)


def start_device(cfg: ConvertConfig, times: Timings) -> None:
    """CUDA's start on this process's GPU, timed apart from the models it then holds (seconds in a fresh process)."""
    device = _rank_device(cfg)
    if device.startswith("cuda"):
        import torch

        with times.timed("start CUDA on the GPU"):
            torch.empty(1, device=device)


def load_autoencoder(cfg: ConvertConfig, times: Timings):
    """The autoencoder on this process's device (under torchrun, the rank's GPU)."""
    from common.vae import check_vae_name

    from .latents import load_vae

    check_vae_name(cfg.vae)  # a wrong --vae fails before the import's seconds
    _import_timed(times, "diffusers", "AutoencoderKL")
    with times.timed("load the autoencoder"):
        return load_vae(cfg.vae, _rank_device(cfg))


def load_caption_encoder(cfg: ConvertConfig, times: Timings):
    """The text encoder on this process's device (under torchrun, the rank's GPU): bf16 weights and CUDA graphs on a
    GPU (its fast path), fp32 on the CPU."""
    import torch

    from .textenc import load_text_encoder

    device = _rank_device(cfg)
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    _import_timed(times, "transformers", "AutoTokenizer", "PreTrainedModel")
    with times.timed("load the text encoder"):
        encoder = load_text_encoder(cfg.text_encoder, device, dtype, cfg.text_max_tokens)
    encoder.use_cuda_graphs(cfg.batch_size)  # its warm-up runs while the input is listed and read
    return encoder


def _import_timed(times: Timings, package: str, *names: str) -> None:
    """`package` and its lazily imported `names` imported as a stage of their own (seconds); where it is missing, the
    loader that follows names the extra to install."""
    import importlib

    with times.timed(f"import {package}"):
        try:
            module = importlib.import_module(package)
            for name in names:
                getattr(module, name)
        except (ImportError, AttributeError):
            pass


def latent_encoder(cfg: ConvertConfig, vae, kind: str, first: Chunk, spec: AudioSpec):
    from .latents.encode import LatentEncoder

    return LatentEncoder(
        vae,
        kind,
        tuple(first.x.shape[1:]),
        spec,
        batch_size=cfg.batch_size,
        precision=cfg.vae_precision,
        compile=cfg.compile,
    )


def share_decoding(cfg: ConvertConfig, source, size: int) -> None:
    """Under torchrun a rank decodes only the files of its own batches (rank r encodes batches r, r + world, ... of
    each chunk of `size`), and the first file, which gives every left-out sample its shape. Only where samples keep
    their places: a skipped bad file (--on-bad-file skip) moves every later one, so there each rank decodes all."""
    rank, world, _ = ranks.world()
    if cfg.vae is None or world == 1 or cfg.on_bad_file != "error" or not hasattr(source, "needed"):
        return  # (captions, with --text-encoder, come from the listing or the labels: every rank has them all)
    bs = cfg.batch_size
    source.needed = lambda i: i == 0 or (i % size) // bs % world == rank


def decoded_line(source) -> str | None:
    """How many samples this rank decoded, for --timings (None where the source does not count them)."""
    if not hasattr(source, "decoded"):
        return None
    return f"rank {ranks.world()[0]}: decoded {source.decoded:,} of {len(source):,} samples"


def encode_share(cfg: ConvertConfig, spec: AudioSpec, vae, text_encoder) -> dict:
    """A rank other than 0 under torchrun: read the same input, encode this rank's batches of samples (--vae) and of
    distinct captions (--text-encoder), write nothing (rank 0 gathers every batch and writes the one output)."""
    from .convert_write import caption_cache

    source = open_source(cfg, spec)
    if vae is None and (captions := listed_captions(cfg, source)) is not None:  # listed: nothing to decode here
        cache = caption_cache(cfg, text_encoder, None)
        cache.add(captions)
        cache.finish()
        return {}
    size = chunk_size(cfg, source, spec)
    share_decoding(cfg, source, size)
    chunks = source.chunks(size, cfg.on_bad_file, cfg.workers)
    stream = with_templates(cfg, source, usable(chunks, cfg.limit, []))
    first = next(stream, None)
    if first is None:
        return {}
    encoded = chain([first], stream)
    if vae is not None:
        encoded = latent_encoder(cfg, vae, source.kind, first, spec).stream(encoded)
    cache = None if text_encoder is None else caption_cache(cfg, text_encoder, None, first)
    encoded = encoded if cache is None else cache.stream(encoded)
    try:
        for _ in encoded:
            pass
        if cache is not None:
            cache.finish()
    finally:  # on an error too: the decoding processes stop now, not at the interpreter's shutdown
        encoded.close()
        stream.close()
    if cfg.timings and (line := decoded_line(source)):
        print(line, file=sys.stderr)
    return {}


def add_encoder_times(times: Timings, encoder) -> None:
    """The encoder thread's stages; the first chunk apart: it holds the compiling, the rest is the encoder's pace."""
    (_, first_s, _), *rest = encoder.chunks
    times.add("encode: the first chunk's result (a thread)", first_s)
    times.add("encode: the first result to the last (a thread)", sum(s for _, s, _ in rest))
    # near the line above: the GPU was the limit; far below: the host was late queuing work or taking results
    times.add("encode: waiting for the GPU (a thread)", sum(w for *_, w in rest))


def _rank_device(cfg: ConvertConfig) -> str:
    return ranks.rank_device(_device(cfg))


def _device(cfg: ConvertConfig) -> str:
    import torch

    return cfg.device or ("cuda" if torch.cuda.is_available() else "cpu")
