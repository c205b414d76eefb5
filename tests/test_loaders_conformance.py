"""One conformance suite for every loader backend: same samples as the manifest, proper epochs, shards and flips."""

from __future__ import annotations

import threading

import numpy as np
import psutil
import pytest
import torch

from dataprep.convert import ConvertConfig, convert
from dataprep.formats.hdf5 import read_chunks
from dataprep.manifest import load_manifest
from loaders import BACKENDS, LoaderError, build_loader
from loaders.base import log_mel

ALL = list(BACKENDS)
N_IMAGES, N_CLIPS = 300, 70
ATOL = 1e-6  # x/127.5-1 (ours), (x/255-0.5)/0.5 (torchvision) and DALI's (x-127.5)/127.5 differ by float rounding


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    out = tmp_path_factory.mktemp("img") / "set"
    convert(ConvertConfig(output=out, source="synthetic-images", limit=N_IMAGES, progress=False, workers=1))
    return out


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    out = tmp_path_factory.mktemp("aud") / "set"
    convert(ConvertConfig(output=out, source="synthetic-audio", limit=N_CLIPS, progress=False, workers=1))
    return out


def truth(data_dir):
    chunks = list(read_chunks(data_dir, load_manifest(data_dir), 10_000))
    return np.concatenate([c.x for c in chunks]), np.concatenate([c.y for c in chunks])


def epoch(loader, e=0):
    loader.set_epoch(e)
    batches = list(loader)
    return torch.cat([b.x for b in batches]), torch.cat([b.y for b in batches]), batches


def to_uint8(x: torch.Tensor) -> np.ndarray:
    """Back from [-1, 1] NCHW to uint8 NHWC: exact, since every backend maps 0..255 to k/127.5-1 within 1e-6."""
    return ((x.float() + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()


def ids(x: torch.Tensor) -> list[bytes]:
    return [s.tobytes() for s in to_uint8(x)]


@pytest.mark.parametrize("workers,pin", [(0, False), (2, True)])
@pytest.mark.parametrize("backend", ALL)
def test_images_equal_manifest_in_order(images, backend, workers, pin):
    """shuffle=False, augment=False: the manifest's samples in order, uint8-exact and normalized within ATOL."""
    gx, gy = truth(images)
    with build_loader(backend, images, batch_size=64, workers=workers, pin_memory=pin, shuffle=False,
                      augment=False, drop_last=False) as loader:  # fmt: skip
        x, y, batches = epoch(loader)
    assert len(batches) == len(loader) == 5
    assert x.shape == (N_IMAGES, 3, 32, 32) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert np.array_equal(to_uint8(x), gx), f"{backend}: pixels differ from the manifest"
    reference = torch.from_numpy(gx).permute(0, 3, 1, 2).float() / 127.5 - 1
    assert torch.allclose(x, reference, atol=ATOL, rtol=0)
    assert np.array_equal(y.numpy(), gy)


@pytest.mark.parametrize("backend", ALL)
def test_audio_wave_and_mel(clips, backend):
    """Audio: the waveform equals the manifest exactly; the mel equals the shared definition on the truth."""
    gx, gy = truth(clips)
    with build_loader(backend, clips, batch_size=32, workers=1, shuffle=False, augment=False, drop_last=False,
                      representation="wave") as loader:  # fmt: skip
        x, y, _ = epoch(loader)
    assert x.shape == (N_CLIPS, 1, 16384) and np.array_equal(x[:, 0].numpy(), gx) and np.array_equal(y, gy)
    with build_loader(backend, clips, batch_size=32, workers=1, shuffle=False, augment=False,
                      drop_last=False) as loader:  # fmt: skip
        mel, _, _ = epoch(loader)
    assert mel.shape == (N_CLIPS, 1, 64, 64)
    assert torch.allclose(mel, log_mel(torch.from_numpy(gx)[:, None], 16000), atol=1e-5)
    assert mel.min() >= -1 and mel.max() <= 1 and mel.std() > 0.1


@pytest.mark.parametrize("drop_last", [True, False])
@pytest.mark.parametrize("backend", ALL)
def test_shuffled_epochs_cover_and_differ(images, backend, drop_last):
    """Each shuffled epoch covers every sample once (minus drop_last); epochs differ; a rebuilt loader repeats."""

    def orders(loader):
        return [ids(epoch(loader, e)[0]) for e in (0, 1)]

    kw = dict(batch_size=64, workers=1, shuffle=True, augment=False, drop_last=drop_last, seed=3)
    with build_loader(backend, images, **kw) as a:
        first = orders(a)
        n_batches = len(a)
    with build_loader(backend, images, **kw) as b:
        again = orders(b)
    expected = (N_IMAGES // 64) * 64 if drop_last else N_IMAGES
    for order in first:
        assert len(order) == expected == len(set(order)) and n_batches == -(-expected // 64)
    assert first[0] != first[1], "two epochs in the same order"
    assert first == again, "the same seed must give the same epochs"
    with build_loader(backend, images, **(kw | {"seed": 4})) as c:
        assert orders(c)[0] != first[0]


@pytest.mark.parametrize("backend", ALL)
def test_shards_are_disjoint_and_cover(images, backend):
    """world_size=3: the ranks' samples are disjoint and together cover the epoch."""
    seen = []
    for rank in range(3):
        with build_loader(backend, images, batch_size=16, workers=1, shuffle=True, augment=False, drop_last=False,
                          seed=1, rank=rank, world_size=3) as loader:  # fmt: skip
            seen.append(set(ids(epoch(loader)[0])))
    assert sum(len(s) for s in seen) == len(set.union(*seen)) == N_IMAGES


@pytest.mark.parametrize("backend", ALL)
def test_flip_is_half_and_only_flips(images, backend):
    """augment=True mirrors about half the samples horizontally and changes nothing else."""
    gx, _ = truth(images)
    with build_loader(backend, images, batch_size=50, workers=1, shuffle=False, augment=True,
                      drop_last=False) as loader:  # fmt: skip
        x = to_uint8(epoch(loader)[0])
    same = np.array([np.array_equal(a, b) for a, b in zip(x, gx)])
    mirrored = np.array([np.array_equal(a, b[:, ::-1]) for a, b in zip(x, gx)])
    assert (same | mirrored).all(), "augmentation did something other than a horizontal flip"
    assert 0.35 < mirrored.mean() < 0.65


@pytest.mark.parametrize("backend", ALL)
def test_close_leaves_no_workers(images, backend):
    """After a second epoch and close(), no worker process and no extra thread is left."""
    threads = threading.active_count()
    loader = build_loader(backend, images, batch_size=64, workers=2, shuffle=True, drop_last=True)
    for e in range(2):
        epoch(loader, e)
    loader.close()
    del loader
    import gc

    gc.collect()
    # multiprocessing's resource tracker and forkserver are per-interpreter singletons, not loader workers
    singletons = ("resource_tracker", "forkserver")
    alive = [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
    left = [p.cmdline() for p in alive]
    assert [c for c in left if not any(s in " ".join(c) for s in singletons)] == []
    assert threading.active_count() <= threads + 1  # +1: torch's pin/thread pool may start once per process


def test_unknown_backend_and_missing_format(images, tmp_path):
    """Unknown names list the valid ones; a missing format names the dataprep command that makes it."""
    with pytest.raises(LoaderError, match="valid: torch, hdf5, ffcv, dali, gpu"):
        build_loader("tfrecord", images, batch_size=8)
    convert(ConvertConfig(output=tmp_path / "h", source="synthetic-images", limit=20, formats=("hdf5",),
                          progress=False))  # fmt: skip
    with pytest.raises(LoaderError, match="dataprep convert --format ffcv"):
        build_loader("ffcv", tmp_path / "h", batch_size=8)


@pytest.mark.parametrize("backend,module,extra", [("ffcv", "ffcv", "ffcv"), ("dali", "nvidia.dali", "dali")])
def test_missing_extra_is_named(images, monkeypatch, backend, module, extra):
    """Without the library installed, building the backend says which extra to install."""
    import sys

    for name in [m for m in sys.modules if m == module or m.startswith(module + ".")] + [f"loaders.{backend}_backend"]:
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setitem(sys.modules, module, None)  # what Python does for a package that is not installed
    with pytest.raises(LoaderError, match=rf"gpufeed\[{extra}\]"):
        build_loader(backend, images, batch_size=8)


@pytest.mark.parametrize("context", ["fork", "forkserver", "spawn"])
def test_hdf5_workers_any_start_method(images, context):
    """The HDF5 backend opens the file lazily in each worker, so every start method works."""
    gx, _ = truth(images)
    with build_loader("hdf5", images, batch_size=100, workers=2, shuffle=False, augment=False, drop_last=False,
                      mp_context=context) as loader:  # fmt: skip
        assert np.array_equal(to_uint8(epoch(loader)[0]), gx)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ALL)
def test_cuda_batches_match_cpu(images, backend):
    """On CUDA every backend delivers the same samples, on the device, channels_last."""
    gx, gy = truth(images)
    with build_loader(backend, images, batch_size=64, workers=2, device="cuda", shuffle=False, augment=False,
                      drop_last=False) as loader:  # fmt: skip
        x, y, _ = epoch(loader)
    assert x.is_cuda and y.is_cuda and x.is_contiguous(memory_format=torch.channels_last)
    assert np.array_equal(to_uint8(x.cpu()), gx) and np.array_equal(y.cpu().numpy(), gy)


@pytest.mark.gpu
def test_gpu_backend_refuses_too_big(images, monkeypatch):
    """The resident backend refuses a dataset larger than its share of free device memory."""
    import loaders.gpu_resident as g

    monkeypatch.setattr(g, "MAX_FREE_FRACTION", 1e-12)
    with pytest.raises(MemoryError, match="exceed"):
        build_loader("gpu", images, batch_size=8, device="cuda")
