"""Fixtures shared by the test folders: the real data in ../shared/datasets, unpacked once per session, synthetic
and latent data sets, the SeaweedFS server, the gpu marker, and a compile cache and a hash book of the tests' own. A
fixture that only one folder's tests use lives in that folder's conftest.py."""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATASETS = REPO.parent / "shared" / "datasets"


@pytest.fixture(scope="session", autouse=True)
def compile_cache(tmp_path_factory) -> Iterator[Path]:
    """Compiled runs in tests (and the processes they start) keep their kernels in a folder of their own, not in the
    user's ~/.cache/gpufeed/compile."""
    path = tmp_path_factory.mktemp("compile-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GPUFEED_COMPILE_CACHE", str(path))
        yield path


@pytest.fixture(scope="session", autouse=True)
def hash_book(tmp_path_factory) -> Iterator[Path]:
    """Large files' remembered hashes (dataprep.hashbook) go to a book of the tests' own, not the user's."""
    path = tmp_path_factory.mktemp("hash-book") / "sha256.json"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GPUFEED_HASH_BOOK", str(path))
        yield path


def pytest_collection_modifyitems(config, items):
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (run `pytest -m gpu` on the GPU machine)")
    for item in items:
        if item.get_closest_marker("gpu") is not None:  # not `in keywords`: a "gpu" parameter id matches that
            item.add_marker(skip)


def _unpack(name: str, tmp_path_factory) -> Path:
    archive = SHARED_DATASETS / name
    if not archive.exists():
        pytest.skip(f"real data not found: {archive} (CI and the dev machines have ../shared beside the repo)")
    out = tmp_path_factory.mktemp(name.split(".")[0])
    with tarfile.open(archive) as tar:
        tar.extractall(out, filter="data")
    return out


@pytest.fixture(scope="session")
def cifar_jpg_root(tmp_path_factory) -> Path:
    """The real CIFAR-10 JPEGs: ROOT/train/<class>/*.jpg and ROOT/test/<class>/*.jpg."""
    return _unpack("cifar10-jpg.tar.gz", tmp_path_factory)


@pytest.fixture(scope="session")
def cifar_small(cifar_jpg_root, tmp_path_factory) -> Path:
    """512 real CIFAR-10 training images in HDF5, as the training tests' loaders read them."""
    from dataprep.convert import ConvertConfig, convert

    out = tmp_path_factory.mktemp("train-data") / "cifar512"
    convert(ConvertConfig(output=out, input=cifar_jpg_root, formats=("hdf5",), limit=512, workers=1, progress=False))
    return out


@pytest.fixture(scope="session")
def fsdd_root(tmp_path_factory) -> Path:
    """The real spoken-digit clips: ROOT/recordings/<digit>_<speaker>_<n>.wav."""
    return _unpack("fsdd-wav.tar.gz", tmp_path_factory)


@pytest.fixture(scope="session")
def synthetic_images(tmp_path_factory):
    """synthetic_images(n, formats): a directory of n synthetic 32x32 images, converted once per (n, formats)."""
    from dataprep.convert import ConvertConfig, convert

    made: dict[tuple, Path] = {}

    def make(count: int, formats: tuple[str, ...] = ("hdf5",)) -> Path:
        key = (count, formats)
        if key not in made:
            made[key] = tmp_path_factory.mktemp("synthetic") / f"{'-'.join(formats)}-{count}"
            convert(
                ConvertConfig(
                    output=made[key], source="synthetic-images", limit=count, formats=formats, workers=1, progress=False
                )
            )
        return made[key]

    return make


N_LATENT = 96  # images in the latent fixtures: six batches of 16, and enough for a statistical check of the flips


@pytest.fixture(scope="session")
def image_vae(tmp_path_factory) -> Path:
    """A tiny RGB AutoencoderKL directory (save_pretrained): 32x32 images -> (4, 16, 16) latents."""
    from latent_helpers import build_image_vae

    return build_image_vae(tmp_path_factory.mktemp("vae") / "image")


@pytest.fixture(scope="session")
def latent_pixels(synthetic_images) -> Path:
    """The N_LATENT synthetic images that latent_images encodes, as pixels (hdf5)."""
    return synthetic_images(N_LATENT)


@pytest.fixture(scope="session")
def latent_images(image_vae, tmp_path_factory) -> Path:
    """The same N_LATENT synthetic images encoded by image_vae on the CPU, in every format."""
    from dataprep.convert import ConvertConfig, convert

    out = tmp_path_factory.mktemp("latent") / "images"
    formats = ("files", "hdf5", "ffcv", "dali", "stream")
    convert(
        ConvertConfig(
            output=out,
            source="synthetic-images",
            limit=N_LATENT,
            formats=formats,
            vae=str(image_vae),
            device="cpu",
            batch_size=32,
            workers=1,
            progress=False,
        )
    )
    return out


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory):
    """One real SeaweedFS server (S3 API) on 127.0.0.1 for the whole test run, its standard AWS_* variables set for
    every test, and a fresh bucket per call of `seaweed.bucket()`. Started once: it is ready in 3-25 s."""
    pytest.importorskip("boto3", reason="the stream tests need the 'stream' extra")
    from objectstore_helpers import TestStore

    with TestStore(tmp_path_factory.mktemp("seaweed")) as store, pytest.MonkeyPatch.context() as patch:
        for name, value in store.server.env().items():
            patch.setenv(name, value)
        yield store


@pytest.fixture(scope="session")
def text_encoders(tmp_path_factory) -> dict[str, Path]:
    """Tiny CLIP, T5 and CLAP text encoders built from config (random weights), by name: folders for --text-encoder."""
    from dataprep.textenc import make_text_encoder

    root = tmp_path_factory.mktemp("text-encoders")
    return {kind: make_text_encoder(kind, root / kind) for kind in ("clip", "t5", "clap")}
