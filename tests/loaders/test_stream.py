"""The stream format and loader over a real SeaweedFS server (conftest's `seaweed`): conversion to s3://, info and
verify of a remote dataset, deterministic and better-than-shard shuffles, exact mid-epoch resume (the loader's and
train's), the bounded cache and its removal. The conformance suite covers the stream backend on local shards; the
faults are in test_stream_faults.py."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from objectstore_helpers import convert_synthetic
from training_helpers import tiny_cfg

from dataprep.cli import cli
from loaders import build_loader
from training.config import TrainConfig
from training.loop import main

N = 600  # synthetic 32x32 images: 1.8 MB, in shards of SHARD_BYTES set small below so there are several


@pytest.fixture(scope="module")
def remote(seaweed, small_shards) -> str:
    """N synthetic images in hdf5 (the ground truth) and stream, converted straight to s3://BUCKET/images."""
    url = f"s3://{seaweed.bucket()}/images"
    convert_synthetic(url, N, "hdf5,stream")
    return url


@pytest.fixture(scope="module")
def local(remote, tmp_path_factory) -> Path:
    """The same dataset downloaded: the hdf5 backend's ground truth."""
    from dataprep.remote import download_dataset

    out = tmp_path_factory.mktemp("local") / "images"
    out.mkdir()
    download_dataset(remote, out)
    return out


def batches(loader, epoch: int = 0) -> list[torch.Tensor]:
    loader.set_epoch(epoch)
    return [b.x for b in loader]


def ids(x: torch.Tensor, truth: np.ndarray) -> list[int]:
    """Manifest index of every delivered image (all synthetic images differ)."""
    index = {row.tobytes(): i for i, row in enumerate(truth)}
    pixels = ((x + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
    return [index[p.tobytes()] for p in pixels]


def truth_of(local: Path) -> np.ndarray:
    import h5py

    with h5py.File(local / "data.h5") as f:
        return f["x"][:]


def test_remote_dataset_equals_hdf5_and_verifies(remote, local):
    """s3://: the manifest lists the shards beside the digest; info reads it; verify hashes every shard; the loader
    delivers exactly the hdf5 samples in manifest order."""
    manifest = json.loads((local / "manifest.json").read_text())
    shards = [f for f in manifest["formats"]["stream"]["files"] if f["path"].endswith(".bin")]
    assert len(shards) >= 10 and all(len(f["sha256"]) == 64 for f in shards)
    r = CliRunner().invoke(cli, ["info", remote])
    assert r.exit_code == 0 and f"{N:,} image samples" in r.output and "stream" in r.output
    r = CliRunner().invoke(cli, ["verify", remote])
    assert r.exit_code == 0 and "every file and every sample of every format matches" in r.output, r.output
    kw = dict(batch_size=64, shuffle=False, augment=False, drop_last=False)
    with build_loader("hdf5", local, workers=0, **kw) as a, build_loader("stream", remote, workers=2, **kw) as b:
        assert torch.equal(torch.cat(batches(a)), torch.cat(batches(b)))


def test_shuffle_is_deterministic_and_better_than_shard_level(remote, local):
    """Per (seed, epoch) the same order from a new loader; another epoch or seed, another order. Better than a
    shard-level shuffle: within each shard the order is permuted too, so consecutive samples are manifest neighbours
    with chance ~2/(samples per shard), 5% here, 0.04% in 16 MiB CIFAR shards (a shard-level shuffle keeps ~all
    neighbours together: 98% here)."""
    truth = truth_of(local)
    kw = dict(batch_size=32, workers=0, augment=False, drop_last=False)
    with build_loader("stream", remote, seed=5, **kw) as a:
        first = [ids(torch.cat(batches(a, e)), truth) for e in (0, 1)]
    with build_loader("stream", remote, seed=5, **kw) as b:
        again = [ids(torch.cat(batches(b, e)), truth) for e in (0, 1)]
    with build_loader("stream", remote, seed=6, **kw) as c:
        other = ids(torch.cat(batches(c, 0)), truth)
    assert first == again and first[0] != first[1] and other != first[0]
    assert sorted(first[0]) == list(range(N))
    adjacent = np.mean(np.abs(np.diff(first[0])) == 1)
    shard_level = (N - N // 42) / N  # consecutive within each of the ~N/42 shards
    assert adjacent < 0.15 < 0.9 < shard_level, f"{adjacent:.3f} of consecutive samples are manifest neighbours"


@pytest.mark.parametrize("workers", [0, 2])
def test_a_shuffled_epoch_decodes_each_sample_once(workers, monkeypatch, tmp_path):
    """Shuffled epochs decode each stored sample once (a shard split between two workers: its boundary block twice),
    counted where LitData keeps each decoded
    block, in this process or the workers it forks, for the shards pyarrow writes (Arrow record batches of 256 rows: a
    full in-shard shuffle decoded a block of 256 for every item read, ~128 decoded per sample; blocks counted from a
    split shard's part instead of its start decoded ~15 a sample in epoch 1) and for the plain ones."""
    from litdata.streaming.item_loader import PyTreeLoader

    import dataprep.formats.stream as stream

    monkeypatch.setattr(stream, "SHARD_BYTES", 1 << 20)
    data = Path(convert_synthetic(str(tmp_path / "images"), 1200, "stream"))
    keep, tally = PyTreeLoader._store_decode_window, tmp_path / "decoded"

    def counting(self, chunk_index, start, rows, table_idx=None):
        with open(tally, "a") as f:
            f.write(f"{len(rows)}\n")
        return keep(self, chunk_index, start, rows, table_idx)

    monkeypatch.setattr(PyTreeLoader, "_store_decode_window", counting)
    with build_loader("stream", data, batch_size=32, workers=workers, augment=False, drop_last=False) as loader:
        seen = [sum(len(x) for x in batches(loader, epoch)) for epoch in (0, 1)]
    decoded = sum(int(n) for n in tally.read_text().split())
    ahead = 256 * max(1, workers)  # the third epoch's first block in each reader, read ahead before close()
    assert seen == [1200, 1200] and 2400 <= decoded <= 2400 + 2 * 256 * workers + ahead, f"{decoded} for {seen}"


def test_workers_persist_across_epochs(remote):
    """With workers, the next epoch is read by the same worker processes (an epoch start otherwise waits for new ones,
    each a fork of the training process, and their first shards), and delivers what a fresh loader's does; a resumed
    position gets workers of its own."""
    import psutil

    def workers() -> set[int]:
        return {p.pid for p in psutil.Process().children()} - before

    kw = dict(batch_size=32, workers=2, augment=False, drop_last=True, seed=3)
    before = {p.pid for p in psutil.Process().children()}  # the store's server
    with build_loader("stream", remote, **kw) as a:
        a.set_epoch(0)
        first = [workers() for i, _ in enumerate(a) if i == 1][0]
        a.set_epoch(1)
        second = [b.x for b in a]
        again = workers()
        a.set_epoch(1)
        a.start_at(3)
        resumed = [b.x for b in a]
        resumed_by = workers()
    with build_loader("stream", remote, **kw) as b:
        fresh = batches(b, 1)
    assert len(first) == kw["workers"] and first == again and not first & resumed_by, (first, again, resumed_by)
    assert len(second) == len(fresh) and all(torch.equal(p, q) for p, q in zip(second, fresh))
    assert len(resumed) == len(fresh) - 3 and all(torch.equal(p, q) for p, q in zip(resumed, fresh[3:]))


def test_the_next_epoch_is_read_while_this_one_trains(remote, monkeypatch, tmp_path):
    """Once the workers have made an epoch's last batch, they start the next one while the training loop still takes
    this one's queued batches: the next epoch's first shards are decoded before the loop asks for that epoch (an epoch
    start otherwise stalled every rank at each boundary)."""
    from litdata.streaming.item_loader import PyTreeLoader

    keep, tally = PyTreeLoader._store_decode_window, tmp_path / "decoded"

    def counting(self, chunk_index, start, rows, table_idx=None):
        with open(tally, "a") as f:
            f.write(f"{len(rows)}\n")
        return keep(self, chunk_index, start, rows, table_idx)

    monkeypatch.setattr(PyTreeLoader, "_store_decode_window", counting)
    # unshuffled, one reader decodes each of the N samples once an epoch: more than N decoded before the loop asks for
    # the second epoch is that epoch read ahead
    kw = dict(batch_size=32, workers=2, augment=False, shuffle=False, drop_last=False)
    with build_loader("stream", remote, **kw) as loader:
        first = len(batches(loader, 0))

        def decoded() -> int:
            return sum(int(n) for n in tally.read_text().split())

        deadline = time.monotonic() + 60
        while decoded() <= N and time.monotonic() < deadline:
            time.sleep(0.05)
        before_asked = decoded()
        second = batches(loader, 1)
    assert first == len(second) == -(-N // 32) and before_asked > N, (first, len(second), before_asked)


def test_a_batch_crosses_from_a_worker_as_one_tensor(remote):
    """A worker's batch reaches the training process as one tensor (labels, then sample bytes): each tensor crosses
    through a file descriptor of its own, a socket handshake in the process that trains."""
    from loaders.stream_backend import collate

    items = [{"x": bytes([i]) * 12, "y": i + 7} for i in range(5)]
    out = collate(items)
    tensors = [v for v in out if isinstance(v, torch.Tensor)]
    assert len(tensors) == 1 and tensors[0].dtype == torch.uint8
    buf, n = out[0], out[1]
    assert buf[: n * 8].view(torch.int64).tolist() == [7, 8, 9, 10, 11]
    assert buf[n * 8 :].view(n, 12)[:, 0].tolist() == [0, 1, 2, 3, 4]


def test_a_process_makes_one_s3_client_for_all_its_epochs(remote, tmp_path):
    """LitData builds a downloader for every epoch of every worker; they share the process's S3 client (a new boto3
    client took 65-240 ms of a core at each epoch start, four times what the shard itself took)."""
    from litdata.streaming.downloader import _DOWNLOADERS

    from common.litdata_private import use_s3_downloader
    from loaders.stream_backend import client_config
    from loaders.stream_checks import check_download, explain_download

    use_s3_downloader(check_download, explain_download)
    made = [_DOWNLOADERS["s3://"](f"{remote}/stream", str(tmp_path), [], {"config": client_config()}) for _ in range(2)]
    assert made[0]._client is made[1]._client


def test_a_shard_another_worker_is_downloading_is_waited_for(remote, tmp_path):
    """Two workers whose parts share a shard: the one that finds the other's download lock returns once that download
    has ended, with the file there (LitData's returned at once without it, and its reader looked again a second
    later: the stalls of up to 1 s at epoch starts on 4 ranks)."""
    import threading

    from filelock import FileLock
    from litdata.streaming.downloader import _DOWNLOADERS

    from common.litdata_private import use_s3_downloader
    from loaders.stream_checks import check_download, explain_download

    use_s3_downloader(check_download, explain_download)
    target = tmp_path / "chunk-0-0.bin"
    downloader = _DOWNLOADERS["s3://"](f"{remote}/stream", str(tmp_path), [], {})
    other = FileLock(str(target) + ".lock")
    other.acquire()  # the other worker, downloading
    done = []
    thread = threading.Thread(target=lambda: done.append(downloader.download_file(f"{remote}/stream/x", str(target))))
    thread.start()
    thread.join(0.5)
    waited = thread.is_alive()
    target.write_bytes(b"the shard")  # the other worker's download ends
    other.release()
    thread.join(30)
    assert waited and done == [None] and target.read_bytes() == b"the shard"


def _downloader_after_worker_init(queue) -> None:
    from litdata.streaming.downloader import _DOWNLOADERS

    from loaders.stream_checks import stream_worker_init

    stream_worker_init(0)
    queue.put(_DOWNLOADERS["s3://"].__name__)


def test_a_worker_not_forked_checks_shards_too():
    """A stream worker started by a fork server or spawn (a fresh interpreter: nothing registered by the loader's
    process) registers the downloader that checks every shard's sha256 before LitData reads it."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    worker = ctx.Process(target=_downloader_after_worker_init, args=(queue,))
    worker.start()
    name = queue.get(timeout=120)
    worker.join(30)
    assert name == "CheckingS3Downloader"


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_mid_epoch_is_exact(remote, workers):
    """start_at(p) continues epoch e at batch p with exactly the batches an uninterrupted epoch has from p on,
    without reading the ones before it."""
    kw = dict(batch_size=32, workers=workers, augment=True, drop_last=True, seed=2)
    with build_loader("stream", remote, **kw) as a:
        batches(a, 0)
        whole = batches(a, 1)
    with build_loader("stream", remote, **kw) as b:
        b.set_epoch(1)
        b.start_at(7)
        rest = [x.x for x in b]
    assert len(rest) == len(whole) - 7
    assert all(torch.equal(p, q) for p, q in zip(rest, whole[7:]))


@pytest.mark.slow
def test_train_resume_from_s3_matches_an_uninterrupted_run(remote, tmp_path):
    """train --data s3://... --loader stream: stopped at a checkpoint mid-epoch and resumed, the losses are the
    uninterrupted run's (the data position is restored through the loader, not by reading and dropping batches)."""
    cfg = dict(loader="stream", batch_size=16, steps=12, ckpt_every=5, log_every=4, cache_limit="50MB")
    whole = main(tiny_cfg(remote, tmp_path / "whole", **cfg))
    main(tiny_cfg(remote, tmp_path / "part", **(cfg | {"steps": 5})))
    resumed = main(TrainConfig(**(tiny_cfg(remote, tmp_path / "part", **cfg).__dict__ | {"resume": True})))
    assert resumed.start_step == 5 and resumed.losses == whole.losses[5:]


def _bytes_in(cache: Path) -> int:
    """The size of the shards in the cache now; LitData evicts shards while this runs, so one may vanish mid-count."""
    total = 0
    for p in cache.rglob("*.bin"):
        try:
            total += p.stat().st_size
        except FileNotFoundError:
            pass
    return total


def test_cache_is_bounded_and_removed(remote, tmp_path, monkeypatch):
    """The shards of an epoch pass through a cache folder of the loader's own: never above cache_limit (plus the
    shards being read), gone after close(); a folder left by a killed loader is removed by the next one."""
    monkeypatch.setenv("GPUFEED_STREAM_CACHE", str(tmp_path / "caches"))
    stale = tmp_path / "caches" / "cache-999999999-dead"
    stale.mkdir(parents=True)
    peak = 0
    loader = build_loader("stream", remote, batch_size=16, workers=0, shuffle=True, cache_limit=300_000)
    assert not stale.exists()
    cache = loader.cache
    loader.set_epoch(0)
    for _ in loader:
        peak = max(peak, _bytes_in(cache))
    total = _bytes_in(cache)
    loader.close()
    assert 0 < peak <= 300_000 + 3 * (128 << 10) and total < 1.8e6
    assert not cache.exists()


RANK_SCRIPT = """
import hashlib, json, os, sys
import torch
torch.distributed.init_process_group("gloo")
from loaders import build_loader
rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
out = {}
with build_loader("stream", sys.argv[1], batch_size=32, workers=1, shuffle=True, augment=False, drop_last=True,
                  seed=4, rank=rank, world_size=world) as loader:
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        seen = [hashlib.sha1(x.numpy().tobytes()).hexdigest() for b in loader for x in b.x]
        out[epoch] = {"batches": len(seen) // 32, "len": len(loader), "seen": seen}
torch.distributed.barrier()
json.dump(out, open(os.path.join(sys.argv[2], f"rank{rank}.json"), "w"))
torch.distributed.destroy_process_group()
"""


@pytest.mark.slow
def test_ddp_ranks_get_equal_batches_and_disjoint_samples(remote, tmp_path):
    """Two ranks under torchrun over gloo (CPU), each its own loader on the same s3:// dataset: per epoch the same
    number of full batches on both, no sample on two ranks, and less than one batch per rank left out."""
    import os
    import subprocess
    import sys

    script = tmp_path / "ranks.py"
    script.write_text(RANK_SCRIPT)
    repo = Path(__file__).resolve().parents[2]
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(repo)}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            str(script),
            remote,
            str(tmp_path),
        ],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{k}.json").read_text()) for k in (0, 1)]
    for epoch in ("0", "1"):
        a, b = (ranks[k][epoch] for k in (0, 1))
        assert a["batches"] == b["batches"] == a["len"] == b["len"] == N // 32 // 2
        assert not set(a["seen"]) & set(b["seen"]) and len(set(a["seen"])) == len(a["seen"])
        assert N - len(a["seen"]) - len(b["seen"]) < 2 * 32


def test_bench_and_fastest_consider_the_stream_backend():
    """`bench loaders` expands stream configurations, and `--loader fastest`'s probe lists stream candidates for data
    that has the stream format (and none for data without it)."""
    from bench.fastest.probe_plan import ProbeConfig, candidates
    from bench.grid.job import BACKEND_NAMES, collapse

    assert "stream" in BACKEND_NAMES and collapse("stream", 2, True, "cuda") == (2, True)
    with_stream = [c for group in candidates({"stream": {}, "hdf5": {}}, "cpu", 2, ProbeConfig()) for c in group]
    without = [c for group in candidates({"hdf5": {}}, "cpu", 2, ProbeConfig()) for c in group]
    assert {("stream", 0, None), ("stream", 2, None)} <= set(with_stream)
    assert not any(b == "stream" for b, _, _ in without)


@pytest.mark.slow
def test_bench_loaders_measures_s3_data_with_the_stream_backend(remote, tmp_path):
    """bench loaders --data s3://...: the grid reads the manifest from the store, runs the stream backend in the
    real training loop, and its record names the URL as given."""
    from bench.cli import cli as bench_cli

    out = tmp_path / "results"
    args = ["loaders", "--data", remote, "--device", "cpu", "--model", "tiny", "--backends", "stream"]
    args += ["--workers", "0", "--steps", "2", "--timing-warmup", "1", "--batch-size", "16", "--out", str(out)]
    r = CliRunner().invoke(bench_cli, [*args, "--no-progress"])
    assert r.exit_code == 0, r.output
    records = [json.loads(p.read_text()) for p in out.glob("*.json") if p.name != "summary.json"]
    streamed = [rec for rec in records if rec.get("job", {}).get("backend") == "stream"]
    assert streamed and "error" not in streamed[0], records
    assert streamed[0]["data"]["path"] == remote and streamed[0]["data"]["count"] == N


def test_bench_loaders_on_s3_data_refuses_other_backends():
    """Only the stream backend reads object storage: asking bench for hdf5 on s3:// data fails at once (no server
    needed), naming the backends that can run."""
    from bench.cli import cli as bench_cli

    r = CliRunner().invoke(bench_cli, ["loaders", "--data", "s3://bucket/images", "--backends", "hdf5", "--out", "x"])
    assert r.exit_code == 2 and "valid: stream, none" in r.output, r.output


def test_bench_fastest_on_s3_data_answers_the_stream_loader(remote, seaweed):
    """bench fastest --data s3://...: the stream loader, the only one that reads it, and no traceback; a prefix with
    no dataset is named in one line."""
    from bench.cli import cli as bench_cli

    args = ["fastest", "--model", "tiny", "--device", "cpu", "--json"]
    r = CliRunner().invoke(bench_cli, [*args, "--data", remote])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) | {"reason": ""} == {
        "backend": "stream",
        "workers": 1,
        "pin_memory": False,
        "batch_size": 32,
        "reason": "",
    }
    missing = CliRunner().invoke(bench_cli, [*args, "--data", f"s3://{seaweed.bucket()}/none"])
    assert missing.exit_code == 1 and "Traceback" not in missing.output and "manifest" in missing.output
