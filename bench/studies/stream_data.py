"""The synthetic datasets the stream studies (stream_gpu.py, stream_pace.py) read from object storage: 32x32 images
converted straight to the store, and latent moments of DiT-B/2's input written without an autoencoder, then uploaded."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

LATENT = (2, 2, 4, 32, 32)  # views, (mean, std), channels, h, w: DiT-B/2 at 256 px with an SD-shaped VAE


def write_latents(out: Path, count: int, formats: tuple[str, ...] = ("stream",)) -> None:
    """A latent dataset in `formats` (stream, hdf5), made without an autoencoder: random moments, a valid manifest."""
    from common.atomic import write_json
    from dataprep.convert_write import describe_files
    from dataprep.digest import SampleDigest
    from dataprep.formats.base import DatasetMeta
    from dataprep.formats.hdf5 import Hdf5Writer
    from dataprep.formats.stream import StreamWriter
    from dataprep.sources.base import Chunk

    out.mkdir(parents=True)
    meta = DatasetMeta("latent", LATENT, "float16", ["a", "b"])
    kinds = {"stream": StreamWriter, "hdf5": Hdf5Writer}
    writers = {f: kinds[f](out, meta) for f in formats}
    digest, rng = SampleDigest(), np.random.default_rng(0)
    for start in range(0, count, 512):
        n = min(512, count - start)
        x = rng.standard_normal((n, *LATENT)).astype(np.float16)
        x[:, :, 1] = np.abs(x[:, :, 1]) * 0.1  # std
        chunk = Chunk(x, (np.arange(start, start + n) % 2).astype(np.int64))
        for writer in writers.values():
            writer.write(chunk)
        digest.update(chunk)
    described = {f: {"files": describe_files(out, w.finish(), 4)} for f, w in writers.items()}
    latent = {
        "of": "image",
        "views": ["image", "mirror"],
        "shape": list(LATENT[2:]),
        "scaling_factor": 0.18215,
        "shift_factor": 0.0,
        "vae": {"name": "synthetic", "sha256": "none"},
        "size": 256,
    }
    manifest = {
        "gpufeed_version": "study",
        "kind": "latent",
        "sample_shape": list(LATENT),
        "dtype": "float16",
        "count": digest.count,
        "classes": ["a", "b"],
        "digest": digest.result(),
        "audio": None,
        "formats": described,
        "latent": latent,
        "skipped": [],
        "source": {"kind": "synthetic-latents", "path": None, "split": "train"},
    }
    write_json(out / "manifest.json", manifest)


def prepare(server, bucket: str, images: int, latents: int, tmp: Path) -> None:
    from dataprep.convert import ConvertConfig, convert
    from dataprep.remote_write import upload_dir

    convert(
        ConvertConfig(
            output=f"s3://{bucket}/images",
            source="synthetic-images",
            limit=images,
            formats=("stream",),
            workers=2,
            progress=False,
        )
    )
    write_latents(tmp / "latents", latents)
    upload_dir(tmp / "latents", f"s3://{bucket}/latents", overwrite=False)


def download_manifest(url: str) -> str:
    from dataprep.remote import MANIFEST, fetch

    with tempfile.TemporaryDirectory() as tmp:
        return fetch(url, MANIFEST, Path(tmp) / MANIFEST).read_text()
