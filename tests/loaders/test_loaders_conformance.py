"""One conformance suite for every loader backend: same samples as the manifest, proper epochs, shards and flips.
Every property runs on the CPU here and on CUDA with `pytest -m gpu` (the `cuda` variants). The order, epoch and
shard properties run on pixels (`images`) and on cached latents (`latent_images`, conftest.py) alike."""

from __future__ import annotations

import gc
import importlib.util
import sys
import time

import numpy as np
import psutil
import pytest
import torch
from latent_helpers import delivered, read_stored

from dataprep.convert import ConvertConfig, convert
from dataprep.features import train_log_mel
from dataprep.formats.hdf5 import read_chunks
from dataprep.manifest import load_manifest
from loaders import BACKENDS, LoaderError, build_loader

ALL = list(BACKENDS)
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
DATA = ["images", "latent_images"]  # pixels, and the latents conftest.py caches with a tiny autoencoder
N_IMAGES, N_CLIPS = 300, 70
WITH_STREAM = ("all", "stream")  # every backend's format: `all` leaves out the stream shards
ATOL = 1e-6  # x/127.5-1 (ours), (x/255-0.5)/0.5 (torchvision) and DALI's (x-127.5)/127.5 differ by float rounding
# the mel of a clip in a batch of 32 (loaders) or 70 (reference): identical on the CPU. On CUDA, cuFFT's rounding
# differs (float32 vs float64 STFT moves values by < 2e-5 here) and the filterbank matmul may run in TF32 if a test
# enabled it (~1e-4), so CUDA gets 1e-3
MEL_ATOL = {"cpu": 1e-5, "cuda": 1e-3}


@pytest.fixture(autouse=True)
def _cuda_case_has_its_library(request):
    """A GPU machine may carry fewer extras than CI installs (DALI is large): there, a backend whose library is
    missing skips its CUDA cases. CPU cases never skip: CI installs every extra and must test every backend."""
    params = getattr(getattr(request.node, "callspec", None), "params", {})
    module = {"ffcv": "ffcv", "dali": "nvidia.dali"}.get(params.get("backend"))
    if params.get("device") != "cuda" or module is None:
        return
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package (nvidia) is missing too
        found = False
    if not found:
        pytest.skip(f"{module} is not installed on this machine")


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    out = tmp_path_factory.mktemp("img") / "set"
    convert(
        ConvertConfig(
            output=out, source="synthetic-images", limit=N_IMAGES, formats=WITH_STREAM, progress=False, workers=1
        )
    )
    return out


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    out = tmp_path_factory.mktemp("aud") / "set"
    convert(
        ConvertConfig(
            output=out, source="synthetic-audio", limit=N_CLIPS, formats=WITH_STREAM, progress=False, workers=1
        )
    )
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
    return ((x.float().cpu() + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()


def ids(x: torch.Tensor) -> list[bytes]:
    """One key per sample: its uint8 pixels, or for latents (more than 3 channels) its delivered values' bytes, the
    same every epoch since unaugmented latents are a fixed function of what is stored."""
    rows = to_uint8(x) if x.shape[1] == 3 else x.float().cpu().numpy()
    return [s.tobytes() for s in rows]


def expected(data_dir) -> tuple[torch.Tensor, np.ndarray]:
    """What every backend must deliver unshuffled and unaugmented, (N, C, H, W) float32, and the labels: pixels
    x / 127.5 - 1, latents view 0's mean, shifted and scaled (the float16 values converted)."""
    manifest = load_manifest(data_dir)
    if manifest["kind"] == "latent":
        stored, gy = read_stored(data_dir, "hdf5")
        return delivered(stored, manifest["latent"]), gy
    gx, gy = truth(data_dir)
    return torch.from_numpy(gx).permute(0, 3, 1, 2).float() / 127.5 - 1, gy


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("workers,pin", [(0, False), (2, True)])
@pytest.mark.parametrize("backend", ALL)
@pytest.mark.parametrize("data", DATA)
def test_equal_manifest_in_order(request, data, backend, workers, pin, device):
    """shuffle=False, augment=False: the manifest's samples in order, normalized within ATOL: pixels uint8-exact,
    latents the stored mean of the unmirrored view times the scaling factor (after the shift)."""
    data_dir = request.getfixturevalue(data)
    reference, gy = expected(data_dir)
    with build_loader(
        backend,
        data_dir,
        batch_size=64,
        workers=workers,
        pin_memory=pin,
        device=device,
        shuffle=False,
        augment=False,
        drop_last=False,
    ) as loader:
        x, y, batches = epoch(loader)
    assert len(batches) == len(loader) == -(-len(gy) // 64)
    assert x.shape == reference.shape and x.dtype == torch.float32 and y.dtype == torch.int64
    assert x.device.type == y.device.type == device
    if device == "cuda":
        assert all(b.x.is_contiguous(memory_format=torch.channels_last) for b in batches)
    if data == "images":
        assert np.array_equal(to_uint8(x), truth(data_dir)[0]), f"{backend}: pixels differ from the manifest"
    assert torch.allclose(x.cpu(), reference, atol=ATOL, rtol=0), f"{backend}: values differ from the manifest"
    assert np.array_equal(y.cpu().numpy(), gy)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", ALL)
def test_audio_wave_and_mel(clips, backend, device):
    """Audio: the waveform equals the manifest exactly; the mel equals the shared definition on the truth."""
    gx, gy = truth(clips)
    kw = dict(batch_size=32, workers=1, device=device, shuffle=False, augment=False, drop_last=False)
    with build_loader(backend, clips, representation="wave", **kw) as loader:
        x, y, _ = epoch(loader)
    assert x.shape == (N_CLIPS, 1, 16384) and x.device.type == device
    assert np.array_equal(x[:, 0].cpu().numpy(), gx) and np.array_equal(y.cpu().numpy(), gy)
    with build_loader(backend, clips, **kw) as loader:
        mel, _, _ = epoch(loader)
    assert mel.shape == (N_CLIPS, 1, 64, 64) and mel.device.type == device
    reference = train_log_mel(torch.from_numpy(gx)[:, None].to(device), 16000)  # the shared definition, on the device
    assert torch.allclose(mel, reference, atol=MEL_ATOL[device], rtol=0)
    assert mel.min() >= -1 and mel.max() <= 1 and mel.std() > 0.1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("drop_last", [True, False])
@pytest.mark.parametrize("backend", ALL)
@pytest.mark.parametrize("data", DATA)
def test_shuffled_epochs_cover_and_differ(request, data, backend, drop_last, device):
    """Each shuffled epoch covers every sample once (minus drop_last); epochs differ; a rebuilt loader repeats."""
    data_dir = request.getfixturevalue(data)
    count = load_manifest(data_dir)["count"]

    def orders(loader):
        return [ids(epoch(loader, e)[0]) for e in (0, 1)]

    kw = dict(batch_size=64, workers=1, device=device, shuffle=True, augment=False, drop_last=drop_last, seed=3)
    with build_loader(backend, data_dir, **kw) as a:
        first = orders(a)
        n_batches = len(a)
    with build_loader(backend, data_dir, **kw) as b:
        again = orders(b)
    want = (count // 64) * 64 if drop_last else count
    for order in first:
        assert len(order) == want == len(set(order)) and n_batches == -(-want // 64)
    assert first[0] != first[1], "two epochs in the same order"
    assert first == again, "the same seed must give the same epochs"
    with build_loader(backend, data_dir, **(kw | {"seed": 4})) as c:
        assert orders(c)[0] != first[0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("world,drop_last", [(3, False), (2, True)], ids=["3-ranks", "2-ranks-drop-last"])
@pytest.mark.parametrize("backend", ALL)
@pytest.mark.parametrize("data", DATA)
def test_shards_are_disjoint_and_cover(request, data, backend, device, world, drop_last):
    """The ranks' samples are disjoint and together cover the epoch, in both epochs. With drop_last (as training
    runs) every rank yields the same number of full batches, so DDP ranks step together, and what is left out of an
    epoch is less than one batch per rank."""
    data_dir = request.getfixturevalue(data)
    count, bs = load_manifest(data_dir)["count"], 16
    for e in (0, 1):
        seen, batches = [], []
        for rank in range(world):
            with build_loader(
                backend,
                data_dir,
                batch_size=bs,
                workers=1,
                device=device,
                shuffle=True,
                augment=False,
                drop_last=drop_last,
                seed=1,
                rank=rank,
                world_size=world,
            ) as loader:
                for skipped in range(e):  # DALI cannot jump to an epoch: it has to run through the earlier ones
                    epoch(loader, skipped)
                x, _, got = epoch(loader, e)
                seen.append(set(ids(x)))
                batches.append((len(got), len(loader)))
        covered = len(set.union(*seen))
        assert sum(len(s) for s in seen) == covered, f"{backend}: a sample reached two ranks in epoch {e}"
        if drop_last:
            assert len(set(batches)) == 1 and batches[0][0] == batches[0][1], f"{backend}: batches per rank {batches}"
            assert covered == world * bs * batches[0][0] and count - covered < world * bs
        else:
            assert covered == count


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", ALL)
def test_flip_is_half_and_only_flips(images, backend, device):
    """augment=True mirrors about half the samples horizontally and changes nothing else."""
    gx, _ = truth(images)
    with build_loader(
        backend, images, batch_size=50, workers=1, device=device, shuffle=False, augment=True, drop_last=False
    ) as loader:
        x = to_uint8(epoch(loader)[0])
    same = np.array([np.array_equal(a, b) for a, b in zip(x, gx)])
    mirrored = np.array([np.array_equal(a, b[:, ::-1]) for a, b in zip(x, gx)])
    assert (same | mirrored).all(), "augmentation did something other than a horizontal flip"
    assert 0.35 < mirrored.mean() < 0.65


@pytest.mark.parametrize("device", [pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("backend", ALL)
@pytest.mark.parametrize("data", DATA)
def test_a_batch_does_not_wait_for_queued_steps(request, data, backend, device):
    """A batch fetched while a training step is still queued on the GPU comes without waiting for it, flipped and
    drawn. A copy from pageable memory (or a read-back) would wait, and the GPU would then idle inside the next step
    while the host launches it: lost time that no wait for input shows."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device (run `pytest -m gpu` on the GPU machine)")
    step_s = 1.0
    with build_loader(
        backend, request.getfixturevalue(data), batch_size=32, workers=2, device=device, shuffle=True, augment=True
    ) as loader:
        batches = iter(loader)
        next(batches)  # workers, pipelines and page-locked buffers started
        torch.cuda.synchronize()
        torch.cuda._sleep(_cycles(step_s))
        t0 = time.perf_counter()
        next(batches)
        waited = time.perf_counter() - t0
        torch.cuda.synchronize()
    assert waited < step_s / 2, f"{backend}: the batch took {waited:.2f} s, waiting for the {step_s} s step queued"


def _cycles(seconds: float) -> int:
    """GPU clock cycles of torch.cuda._sleep that take about `seconds` on this device."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1000)  # the kernel loaded before it is timed
    start.record()
    torch.cuda._sleep(10_000_000)
    end.record()
    end.synchronize()
    return int(10_000_000 * seconds * 1000 / start.elapsed_time(end))


def settled_thread_count(target: int | None = None, timeout: float = 5.0) -> int:
    """OS threads of this process once the stragglers are gone: multiprocessing queue feeder threads exit on their
    own shortly after close(), so wait (up to `timeout`) for the count to reach `target`, or to stop changing."""
    deadline, last = time.monotonic() + timeout, -1
    while True:
        n = psutil.Process().num_threads()
        if (n <= target if target is not None else n == last) or time.monotonic() > deadline:
            return n
        last = n
        time.sleep(0.25)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", ALL)
def test_close_leaves_no_workers(images, backend, device):
    """After two epochs and close(), no worker process and no extra OS thread is left."""

    def run_and_close():
        loader = build_loader(backend, images, batch_size=64, workers=2, device=device, shuffle=True, drop_last=True)
        for e in range(2):
            epoch(loader, e)
        loader.close()
        del loader
        gc.collect()

    # the first run starts what lives once per process (torch's intra-op pool, the CUDA driver's threads); a loader
    # that leaks would leak again in the second run
    before = {p.pid for p in psutil.Process().children(recursive=True)}  # not the loader's: another test's server
    run_and_close()
    threads = settled_thread_count()
    run_and_close()
    # multiprocessing's resource tracker and forkserver are per-interpreter singletons, not loader workers
    singletons = ("resource_tracker", "forkserver")
    children = psutil.Process().children(recursive=True)
    alive = [p for p in children if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE]
    left = [p.cmdline() for p in alive]
    assert [c for c in left if not any(s in " ".join(c) for s in singletons)] == []
    assert settled_thread_count(threads) <= threads


def test_unknown_backend_and_missing_format(images, tmp_path):
    """Unknown names list the valid ones; a missing format names the dataprep command that makes it."""
    with pytest.raises(LoaderError, match="valid: torch, hdf5, ffcv, dali, gpu"):
        build_loader("tfrecord", images, batch_size=8)
    convert(
        ConvertConfig(output=tmp_path / "h", source="synthetic-images", limit=20, formats=("hdf5",), progress=False)
    )
    with pytest.raises(LoaderError, match="dataprep convert --format ffcv"):
        build_loader("ffcv", tmp_path / "h", batch_size=8)


@pytest.mark.parametrize(
    "backend,module,extra,dataset",
    [
        ("ffcv", "ffcv", "ffcv", "images"),
        ("dali", "nvidia.dali", "dali", "images"),
        ("torch", "soundfile", "audio", "clips"),
    ],
)
def test_missing_extra_is_named(request, monkeypatch, backend, module, extra, dataset):
    """Without an optional library installed, building the backend names the extra to install."""
    data_dir = request.getfixturevalue(dataset)
    for name in [m for m in sys.modules if m == module or m.startswith(module + ".")] + [f"loaders.{backend}_backend"]:
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setitem(sys.modules, module, None)  # what Python does for a package that is not installed
    with pytest.raises(LoaderError, match=rf"needs the '{extra}' extra .*pip install -e '\.\[{extra}\]'"):
        build_loader(backend, data_dir, batch_size=8)


@pytest.mark.parametrize(
    "option,message",
    [
        ({"batch_size": 0}, "batch_size must be at least 1"),
        ({"rank": 2, "world_size": 2}, r"rank must be in \[0"),
        ({"workers": -1}, "workers must be 0"),
        ({"representation": "cqt"}, "'mel' or 'wave'"),
    ],
)
def test_bad_options_are_refused(images, option, message):
    """Impossible options fail at build time with a message naming the option."""
    with pytest.raises(LoaderError, match=message):
        build_loader("hdf5", images, **({"batch_size": 8} | option))


@pytest.mark.parametrize("context", ["fork", "forkserver", "spawn"])
def test_hdf5_workers_any_start_method(images, context):
    """The HDF5 backend opens the file lazily in each worker, so every start method works."""
    gx, _ = truth(images)
    with build_loader(
        "hdf5", images, batch_size=100, workers=2, shuffle=False, augment=False, drop_last=False, mp_context=context
    ) as loader:
        assert np.array_equal(to_uint8(epoch(loader)[0]), gx)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["cifar10", "fsdd"])
def test_real_data_equal_manifest(request, tmp_path, kind):
    """Real CIFAR-10 JPEGs and real spoken digits: every backend yields the manifest's samples exactly."""
    root = request.getfixturevalue("cifar_jpg_root" if kind == "cifar10" else "fsdd_root")
    source = root if kind == "cifar10" else root / "recordings"
    convert(
        ConvertConfig(output=tmp_path / kind, input=source, limit=200, formats=WITH_STREAM, progress=False, workers=1)
    )
    gx, gy = truth(tmp_path / kind)
    for backend in ALL:
        with build_loader(
            backend,
            tmp_path / kind,
            batch_size=64,
            workers=1,
            shuffle=False,
            augment=False,
            drop_last=False,
            representation="wave",
        ) as loader:
            x, y, _ = epoch(loader)
        got = to_uint8(x) if kind == "cifar10" else x[:, 0].numpy()
        assert np.array_equal(got, gx) and np.array_equal(y.numpy(), gy), f"{backend} differs from the manifest"


@pytest.mark.parametrize("device", DEVICES)
def test_gpu_backend_refuses_too_big(images, monkeypatch, device):
    """The resident backend refuses a dataset larger than its share of free device (or host) memory."""
    import loaders.gpu_resident as g

    monkeypatch.setattr(g, "MAX_FREE_FRACTION", 1e-12)
    with pytest.raises(MemoryError, match=r"exceed 0% of the .* GiB free on .*use the hdf5, ffcv or dali loader"):
        build_loader("gpu", images, batch_size=8, device=device)


def test_mel_frames_follow_the_clip_length():
    """One frame per hop of 256 samples: 1.024 s at 16 kHz gives 64 frames, 2.048 s gives 128 (the first 63 of them
    the same as the shorter clip's; the 64th sees audio past its end), not 64 of them with the rest dropped."""
    wave = torch.randn(2, 32768)
    short, long = train_log_mel(wave[:, :16384], 16000), train_log_mel(wave, 16000)
    assert short.shape == (2, 64, 64) and long.shape == (2, 64, 128)
    assert torch.allclose(long[..., :63], short[..., :63], atol=1e-5)
