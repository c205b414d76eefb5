"""Faults of a dataset in object storage, each against the real SeaweedFS server (conftest's `seaweed`): no server,
wrong credentials, a missing bucket or prefix, a damaged shard, the server killed mid-epoch and started again, the
cache's disk full. Each ends in a clear error (or the run continuing) within bounded time: none hangs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from objectstore_helpers import convert_synthetic
from training_helpers import tiny_cfg

from bench.objectstore.seaweed import free_port
from dataprep.cli import cli
from loaders import LoaderError, build_loader
from training.config import TrainConfig
from training.loop import main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def remote(seaweed, small_shards) -> str:
    url = f"s3://{seaweed.bucket()}/faults"
    convert_synthetic(url, 600, "stream")
    return url


def kw(**more) -> dict:
    return dict(batch_size=32, workers=0, shuffle=False, augment=False, drop_last=False) | more


def test_no_server_names_the_endpoint_within_10_s(monkeypatch, tmp_path):
    """Nothing listens at AWS_ENDPOINT_URL: building the loader, `train` and `dataprep info` fail in seconds,
    naming the endpoint."""
    endpoint = f"http://127.0.0.1:{free_port()}"
    for name, value in {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}.items():
        monkeypatch.setenv(name, value)
    t0 = time.monotonic()
    with pytest.raises(LoaderError, match=f"cannot reach the object store at {endpoint}.*is the server running"):
        build_loader("stream", "s3://data/set", **kw())
    assert time.monotonic() - t0 < 10
    env = os.environ | {"AWS_ENDPOINT_URL": endpoint}
    t0 = time.monotonic()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "training",
            "--data",
            "s3://data/set",
            "--loader",
            "stream",
            "--device",
            "cpu",
            "--out",
            str(tmp_path / "run"),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    assert r.returncode != 0 and endpoint in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert time.monotonic() - t0 < 60  # the interpreter's start (torch) included; the failure itself took seconds
    r = CliRunner().invoke(cli, ["info", "s3://data/set"])
    assert r.exit_code == 1 and endpoint in r.output


def test_wrong_credentials_are_named(remote, monkeypatch):
    """A wrong secret key: refused by the server, and the error says which variables to check."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(LoaderError, match="refused the credentials.*AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"):
        build_loader("stream", remote, **kw())
    r = CliRunner().invoke(cli, ["verify", remote])
    assert r.exit_code == 1 and "refused the credentials" in r.output


def test_missing_bucket_and_prefix_are_named(seaweed, remote):
    """A bucket that does not exist, and a prefix that holds no dataset, each say so and what to do."""
    with pytest.raises(LoaderError, match="bucket 'no-such-bucket' does not exist"):
        build_loader("stream", "s3://no-such-bucket/faults", **kw())
    bucket = remote.split("/")[2]
    with pytest.raises(LoaderError, match=rf"s3://{bucket}/elsewhere: no dataset there \(no manifest.json"):
        build_loader("stream", f"s3://{bucket}/elsewhere", **kw())
    r = CliRunner().invoke(
        cli,
        [
            "convert",
            "--source",
            "synthetic-images",
            "--limit",
            "10",
            "--format",
            "stream",
            "--output",
            "s3://no-such-bucket/x",
            "--quiet",
        ],
    )
    assert r.exit_code == 1 and "bucket 'no-such-bucket' does not exist" in r.output


@pytest.fixture()
def damaged(seaweed, small_shards) -> tuple[str, str]:
    """A dataset of its own whose fourth shard has one byte changed in the store (same size): (url, shard key)."""
    bucket = seaweed.bucket()
    url = f"s3://{bucket}/damaged"
    convert_synthetic(url, 300, "stream")
    s3 = seaweed.client()
    manifest = json.loads(s3.get_object(Bucket=bucket, Key="damaged/manifest.json")["Body"].read())
    key = f"damaged/{manifest['generation']}/stream/chunk-0-3.bin"
    blob = bytearray(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    blob[len(blob) // 2] ^= 0x40
    s3.put_object(Bucket=bucket, Key=key, Body=bytes(blob))
    return url, key


def test_damaged_shard_is_named_by_its_hash(damaged):
    """The loader stops at the damaged shard, naming it and its sha256 against the manifest's; verify names it too."""
    url, key = damaged
    with pytest.raises(Exception, match=r"chunk-0-3.bin: damaged shard: sha256 [0-9a-f]{64}, the manifest says"):
        with build_loader("stream", url, **kw()) as loader:
            for _ in loader:
                pass
    r = CliRunner().invoke(cli, ["verify", url])
    assert r.exit_code == 1 and "stream/chunk-0-3.bin sha256 differs from the manifest" in r.output


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_server_killed_mid_epoch_and_restarted(seaweed, remote, workers):
    """SIGKILL the server after a few batches, start it again 3 s later: the loader retries with backoff and the epoch
    ends with exactly the samples of an undisturbed one, in bounded time."""
    with build_loader("stream", remote, **kw(workers=workers, cache_limit=200_000)) as loader:
        loader.set_epoch(0)
        expected = torch.cat([b.x for b in loader])
    got = []
    with build_loader("stream", remote, **kw(workers=workers, cache_limit=200_000)) as loader:
        loader.set_epoch(0)
        it = iter(loader)
        got += [next(it).x for _ in range(3)]
        seaweed.server.stop(kill=True)
        restart = threading.Timer(3.0, seaweed.restart)
        restart.start()
        t0 = time.monotonic()
        got += [b.x for b in it]
        restart.join()
    assert torch.equal(torch.cat(got), expected) and time.monotonic() - t0 < 120


@pytest.mark.slow
def test_train_survives_a_store_outage_and_resume_loses_nothing(seaweed, remote, tmp_path):
    """A store gone for longer than the retries: train stops with a clear error naming the endpoint (no hang, no
    traceback wall), and --resume from its last checkpoint, once the store is back, gives the losses of a run that was
    never interrupted."""
    cfg = dict(loader="stream", batch_size=16, steps=10, ckpt_every=3, log_every=2, workers=0)
    whole = main(tiny_cfg(remote, tmp_path / "whole", **cfg))
    main(tiny_cfg(remote, tmp_path / "cut", **(cfg | {"steps": 3})))  # the checkpoint a failed run leaves behind
    seaweed.server.stop(kill=True)
    try:
        with pytest.raises(Exception, match="cannot reach the object store|Could not connect|EndpointConnectionError"):
            main(TrainConfig(**(tiny_cfg(remote, tmp_path / "cut", **cfg).__dict__ | {"resume": True})))
    finally:
        seaweed.restart()
    resumed = main(TrainConfig(**(tiny_cfg(remote, tmp_path / "cut", **cfg).__dict__ | {"resume": True})))
    assert resumed.start_step == 3 and resumed.losses == whole.losses[3:]


def full_tmpfs(tmp_path: Path, size_kib: int) -> Path | None:
    """A small tmpfs of its own (root here), or None where mounting is not allowed."""
    mount = tmp_path / "tiny-disk"
    mount.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(mount)], capture_output=True)
    return mount if r.returncode == 0 else None


def test_cache_disk_full_fails_clearly(remote, tmp_path, monkeypatch):
    """The cache's file system fills up (a 256 KiB tmpfs, smaller than the shards an epoch needs): the loader stops
    with an error saying the disk is full, instead of hanging or serving a truncated shard."""
    mount = full_tmpfs(tmp_path, 256)
    if mount is None:
        pytest.skip("cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)")
    try:
        monkeypatch.setenv("GPUFEED_STREAM_CACHE", str(mount))
        t0 = time.monotonic()
        with pytest.raises(Exception, match="No space left on device|disk is full|ENOSPC"):
            with build_loader("stream", remote, **kw(shuffle=True)) as loader:
                for _ in loader:
                    pass
        assert time.monotonic() - t0 < 120
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)
        shutil.rmtree(mount, ignore_errors=True)


@pytest.mark.slow  # the test server's own behaviour: make test-slow, for CI's budget
def test_the_server_takes_uploads_in_many_buckets(seaweed):
    """Every bucket claims 7 volume slots at its first write; the server must not run out after a few buckets
    because the disk it runs on is nearly full (weed's default sizes the slots by free space: 39 for 10 GB)."""
    s3 = seaweed.client()
    for _ in range(25):
        bucket = seaweed.bucket()
        s3.put_object(Bucket=bucket, Key="x", Body=b"gpufeed")
        assert s3.get_object(Bucket=bucket, Key="x")["Body"].read() == b"gpufeed"


@pytest.mark.slow  # the test server's own behaviour: make test-slow, for CI's budget
def test_a_restarted_server_serves_its_old_objects_at_once(seaweed):
    """After a kill and restart(), the objects written before are readable on the first try: a server that answers
    while its volumes are still unknown to its master fails those reads with InternalError for seconds."""
    s3 = seaweed.client(attempts=1)
    buckets = [seaweed.bucket() for _ in range(3)]
    for bucket in buckets:
        s3.put_object(Bucket=bucket, Key="x", Body=bucket.encode())
    seaweed.server.stop(kill=True)
    seaweed.restart()
    assert [s3.get_object(Bucket=b, Key="x")["Body"].read() for b in buckets] == [b.encode() for b in buckets]


def test_a_dataloader_timeout_names_the_store(monkeypatch):
    """DataLoader's timeout becomes one LoaderError naming the data and the endpoint; other errors pass unchanged."""
    from loaders.errors import LoaderError
    from loaders.stream_checks import store_timeout

    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    with pytest.raises(LoaderError, match=r"s3://b/d from http://127\.0\.0\.1:9: the store stopped answering"):
        with store_timeout("s3://b/d"):
            raise RuntimeError("DataLoader timed out after 300 seconds")
    with pytest.raises(RuntimeError, match="something else"), store_timeout("s3://b/d"):
        raise RuntimeError("something else")
