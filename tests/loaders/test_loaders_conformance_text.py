"""The conformance suite's captioned case: every backend (and `stream`) delivers Batch(x, y, text) through the one
contract, `text` the cached embeddings of each sample's own caption on the device, padded to the batch's longest
caption, equal to an independent encoding of the captions to fp16 rounding; without cached embeddings, the captions
themselves. CPU here, CUDA with `pytest -m gpu`."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dataprep.convert import ConvertConfig, convert
from dataprep.formats.hdf5 import read_chunks
from dataprep.manifest import load_manifest
from dataprep.textenc import TextEmbeddings, load_text_encoder
from loaders import BACKENDS, build_loader

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
TEMPLATES = ("a photo of a {label}", "a picture of one {label}, seen from rather far away", "{label}")
N = 96
FP16 = 2**-10  # one fp16 rounding, relative


def captioned_set(out, formats=("all", "stream"), **text) -> None:
    convert(
        ConvertConfig(
            output=out,
            source="synthetic-images",
            limit=N,
            formats=formats,
            progress=False,
            workers=1,
            caption_templates=TEMPLATES,
            batch_size=16,
            **text,
        )
    )


@pytest.fixture(scope="module")
def embedded(tmp_path_factory, text_encoders):
    """Synthetic images captioned from templates, their CLIP embeddings cached as fp16, in every format."""
    out = tmp_path_factory.mktemp("text") / "set"
    # encoded on the CPU, in fp32 as the reference is: on a GPU the conversion encodes with bf16 weights
    captioned_set(out, text_encoder=str(text_encoders["clip"]), text_dtype="fp16", device="cpu")
    return out


def stored(data_dir) -> dict[bytes, str]:
    """Each sample's pixels (its key) -> its caption, as data.h5 holds them."""
    chunks = list(read_chunks(data_dir, load_manifest(data_dir), 10_000))
    return {x.tobytes(): t for c in chunks for x, t in zip(c.x, c.text)}


def keys(x: torch.Tensor) -> list[bytes]:
    """Delivered [-1, 1] NCHW back to the stored uint8 HWC pixels' bytes (exact for every backend)."""
    pixels = ((x.float().cpu() + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
    return [p.tobytes() for p in pixels]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", list(BACKENDS))
def test_batches_carry_their_captions_embeddings(embedded, text_encoders, backend, device):
    """Shuffled, in batches of 32: each sample's tokens, mask and pooled vector are its own caption's, equal to the
    encoder's output for those captions to fp16 rounding, on the device as fp16, padded to the batch's longest."""
    caption_of = stored(embedded)
    encoder = load_text_encoder(text_encoders["clip"])
    kw = dict(batch_size=32, workers=1, device=device, shuffle=True, augment=False, drop_last=False, seed=1)
    seen = 0
    with build_loader(backend, embedded, **kw) as loader:
        loader.set_epoch(0)
        for batch in loader:
            text = batch.text
            assert isinstance(text, TextEmbeddings) and len(text) == len(batch.y)
            assert text.tokens.device.type == text.mask.device.type == device and text.tokens.dtype == torch.float16
            assert text.tokens.shape[1] == int(text.mask.sum(1).max()), "padded past the batch's longest caption"
            want = encoder.encode([caption_of[k] for k in keys(batch.x)])
            assert torch.equal(text.mask.cpu(), want.mask), f"{backend}: masks differ"
            for got, ref in ((text.tokens, want.tokens), (text.pooled, want.pooled)):
                assert torch.allclose(got.cpu().float(), ref, rtol=FP16, atol=1e-6), f"{backend}: embeddings differ"
            seen += len(batch.y)
    assert seen == N


def test_captions_without_embeddings_are_delivered_as_text(tmp_path):
    """Data with captions but no cached embeddings: `text` is each sample's caption, as stored (one backend: every
    backend hands its captions to the same Loader.text, which the test above checks for each)."""
    out = tmp_path / "captions-only"
    captioned_set(out, ("hdf5",))
    caption_of = stored(out)
    kw = dict(batch_size=40, workers=0, device="cpu", shuffle=False, augment=False, drop_last=False)
    with build_loader("hdf5", out, **kw) as loader:
        got = [(k, t) for b in loader for k, t in zip(keys(b.x), b.text)]
    assert len(got) == N and all(caption_of[k] == t for k, t in got)
    assert np.unique([t for _, t in got]).size > 1


def test_a_truncated_table_is_refused_at_open(embedded, tmp_path):
    """text/tokens.bin cut short: every backend refuses the directory at open, naming the file, before a lookup could
    read past it."""
    import shutil

    from loaders import LoaderError

    damaged = tmp_path / "set"
    shutil.copytree(embedded, damaged)
    tokens = damaged / "text" / "tokens.bin"
    tokens.write_bytes(tokens.read_bytes()[:-64])
    for backend in BACKENDS:
        with pytest.raises(LoaderError, match=r"text/tokens\.bin: .* bytes, the manifest's sizes make"):
            build_loader(backend, damaged, batch_size=8, device="cpu")


@pytest.mark.gpu
def test_resident_loader_starts_a_captioned_epoch_without_waiting_for_the_gpu(embedded):
    """The resident loader hands out a captioned epoch without reading anything back from the device: a read-back
    waits for every queued training step, and the GPU then idles while the next ones are launched."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device (run `pytest -m gpu` on the GPU machine)")
    kw = dict(batch_size=32, device="cuda", shuffle=True, augment=True, drop_last=False, seed=1)
    with build_loader("gpu", embedded, **kw) as loader:
        for epoch in range(2):
            loader.set_epoch(epoch)
            torch.cuda.set_sync_debug_mode("error")
            try:
                n = sum(len(batch.y) for batch in loader)
            finally:
                torch.cuda.set_sync_debug_mode("default")
            assert n == N
