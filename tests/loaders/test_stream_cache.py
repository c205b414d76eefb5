"""The stream loader's cache and its errors, on real files and the real SeaweedFS server (conftest's `seaweed`): a
cache folder is judged alive by its lock, not by its PID; its hash list gone mid-run stops the run; an unusable cache
root, a bad --cache-limit and a damaged local shard are each one line; LitData's thread tracebacks stay unprinted
where gpufeed says what went wrong itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from objectstore_helpers import convert_synthetic

from loaders import LoaderError, build_loader
from training.cli import train as train_cli

REPO = Path(__file__).resolve().parents[2]
KW = dict(batch_size=16, shuffle=False, augment=False, drop_last=False)


@pytest.fixture(scope="module")
def local(small_shards, tmp_path_factory) -> Path:
    """300 synthetic images in local stream shards of ~128 KiB (8 shards)."""
    return Path(convert_synthetic(str(tmp_path_factory.mktemp("local") / "images"), 300, "stream"))


@pytest.fixture(scope="module")
def remote(seaweed, small_shards) -> str:
    return convert_synthetic(f"s3://{seaweed.bucket()}/images", 300, "stream")


def train_args(data, out: Path, *more: str) -> list[str]:
    """`train` on the stream loader, tiny and on the CPU."""
    args = ["--data", str(data), "--loader", "stream", "--model", "tiny", "--precision", "fp32", "--device", "cpu"]
    args += ["--steps", "40", "--batch-size", "16", "--lr-warmup", "0", "--sample-every", "0", "--ckpt-every", "0"]
    return [*args, "--no-progress", "--out", str(out), *more]


def train(data, out: Path, *more: str, **env: str) -> subprocess.CompletedProcess:
    """`train` as a user runs it: its own process, its stderr as printed."""
    environ = os.environ | {"PYTHONPATH": str(REPO)} | env
    command = [sys.executable, "-m", "training", *train_args(data, out, *more)]
    return subprocess.run(command, capture_output=True, text=True, env=environ, cwd=REPO, timeout=300)


def one_clean_line(r: subprocess.CompletedProcess, *needles: str) -> str:
    """The run failed with one `Error:` line holding every needle, and no traceback of anyone's before it."""
    errors = [line for line in r.stderr.splitlines() if line.startswith("Error: ")]
    assert r.returncode == 1 and len(errors) == 1, r.stderr[-3000:]
    assert "Traceback" not in r.stderr and "CRASHED" not in r.stderr, r.stderr[-3000:]
    assert all(n in errors[0] for n in needles), errors[0]
    return errors[0]


def test_cleanup_spares_a_locked_cache_whose_pid_is_unknown_here(local, tmp_path, monkeypatch):
    """A cache folder named for a PID that does not exist here (a loader in another container sharing the volume)
    survives the next loader's cleanup while another process holds its lock, and is removed once that one ends."""
    monkeypatch.setenv("GPUFEED_STREAM_CACHE", str(tmp_path / "caches"))
    other = tmp_path / "caches" / "cache-999999999-othercontainer"
    other.mkdir(parents=True)
    (other / "chunk-0-0.bin").write_bytes(b"a shard being read")
    (other / ".lock").touch()
    hold = "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR); fcntl.flock(fd, fcntl.LOCK_EX); "
    holder = subprocess.Popen(
        [sys.executable, "-c", hold + "print('held', flush=True); time.sleep(600)", str(other / ".lock")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        with build_loader("stream", local, workers=0, **KW) as loader:
            assert loader.cache.parent == other.parent
        assert (other / "chunk-0-0.bin").read_bytes() == b"a shard being read"
    finally:
        holder.kill()
        holder.wait()
    with build_loader("stream", local, workers=0, **KW):
        assert not other.exists()


@pytest.mark.parametrize("workers", [0, 2])
def test_hash_list_removed_mid_run_stops_the_loader(remote, workers):
    """The cache's list of the manifest's sha256 deleted after the first batch: the next shard is refused, naming the
    list and the fix, instead of being read unchecked. (A small cache_limit keeps shards from all being downloaded
    before the first batch.)"""
    with pytest.raises(LoaderError, match=r"\.gpufeed-sha256\.json: missing, so chunk-0-\d+\.bin cannot be checked"):
        with build_loader("stream", remote, workers=workers, cache_limit=300_000, **KW) as loader:
            loader.set_epoch(0)
            batches = iter(loader)
            next(batches)
            (loader.cache / ".gpufeed-sha256.json").unlink()
            for _ in batches:
                pass


def read_only_mount(path: Path) -> Path | None:
    """An empty read-only tmpfs at `path` (root ignores a folder's permission bits), or None where not allowed."""
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(path)], capture_output=True)
    return path if r.returncode == 0 else None


def test_unusable_cache_root_is_one_line(local, tmp_path, monkeypatch):
    """GPUFEED_STREAM_CACHE naming a file, a folder below a file, or a read-only folder: a LoaderError naming the path,
    what is wrong and the fix; `train` says it in one line."""
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    cases = {a_file: f"{a_file} is a file", a_file / "below": f"{a_file / 'below'} cannot be a folder: {a_file} is"}
    mount = read_only_mount(tmp_path / "read-only")
    if mount is not None:
        cases[mount] = f"{mount}: the stream loader cannot write its shard cache there (Read-only file system)"
    try:
        for root, says in cases.items():
            monkeypatch.setenv("GPUFEED_STREAM_CACHE", str(root))
            with pytest.raises(LoaderError) as e:
                build_loader("stream", local, workers=0, **KW)
            assert str(e.value).startswith(says) and "set GPUFEED_STREAM_CACHE to a writable folder" in str(e.value)
        one_clean_line(train(local, tmp_path / "run", GPUFEED_STREAM_CACHE=str(a_file)), f"{a_file} is a file")
    finally:
        if mount is not None:
            subprocess.run(["umount", str(mount)], capture_output=True)


@pytest.mark.parametrize("value", ["1e400GB", "abc", "-5GB", "0", "1" * 400 + "GB", "20XB"])
def test_bad_cache_limit_is_refused_up_front(local, tmp_path, value):
    """--cache-limit that is not a positive, finite size: a usage error naming the value and the accepted forms (not
    a damaged index.json, an overflow or a run); build_loader refuses it naming cache_limit."""
    r = CliRunner().invoke(train_cli, train_args(local, tmp_path / "run", "--cache-limit", value))
    assert r.exit_code == 2, r.output
    assert "Invalid value for --cache-limit" in r.output and repr(value) in r.output.replace("\n", ""), r.output
    assert "20GB" in r.output and "500MB" in r.output and "LitData warns below 25GB" in r.output
    with pytest.raises(LoaderError, match=r"^cache_limit: .* is not a cache size: give a positive size"):
        build_loader("stream", local, workers=0, cache_limit=value, **KW)


def test_good_cache_limits_reach_litdata_as_bytes(local, tmp_path):
    """20GB, 1.5GB, 500mb and a bare byte count are accepted, and LitData gets their bytes (powers of 1000)."""
    from training.cli_options import cache_size as _cache_size

    assert [_cache_size(None, None, v) for v in ("20GB", "1.5GB", "500mb", "300000")] == [
        20 * 10**9,
        1_500_000_000,
        500 * 10**6,
        300_000,
    ]
    with build_loader("stream", local, workers=0, cache_limit="500MB", **KW) as loader:
        assert loader._dl.dataset.max_cache_size == 500 * 10**6


def damage_count(data: Path, out: Path) -> Path:
    """A copy of `data` whose chunk-0-1.bin says it holds a million items (same size, its offsets intact)."""
    import shutil

    shutil.copytree(data, out)
    shard = out / "stream" / "chunk-0-1.bin"
    blob = bytearray(shard.read_bytes())
    blob[0:4] = (10**6).to_bytes(4, "little")
    shard.write_bytes(bytes(blob))
    return out


@pytest.mark.parametrize("workers", [0, 2])
def test_damaged_local_shard_is_named(local, tmp_path, workers):
    """A local shard whose header is damaged: one line naming the shard, that it is damaged, and `dataprep verify
    DIR` (not LitData's RuntimeError, or a worker's traceback text)."""
    data = damage_count(local, tmp_path / "damaged")
    shard = data / "stream" / "chunk-0-1.bin"
    with pytest.raises(LoaderError, match=rf"^{shard}: damaged shard .*`dataprep verify {data}`"):
        with build_loader("stream", data, workers=workers, **KW) as loader:
            for _ in loader:
                pass
    if workers == 0:
        one_clean_line(train(data, tmp_path / "run", "--workers", "0"), f"{shard}: damaged shard", "dataprep verify")


def test_unpack_error_of_a_damaged_local_shard_is_named(local, tmp_path):
    """LitData's "unpack requires a buffer" on local shards (item offsets past the end: which reading path meets it
    depends on LitData's mmap choices) means the shard whose sha256 differs, named with `dataprep verify DIR`; an
    error of intact shards is left as it is."""
    import struct

    from dataprep.formats.stream import read_failure

    manifest = json.loads((local / "manifest.json").read_text())
    error = struct.error("unpack requires a buffer of 8 bytes")
    assert read_failure(error, local, manifest) is None
    data = damage_count(local, tmp_path / "damaged")
    assert read_failure(error, data, manifest) == (
        f"{data / 'stream' / 'chunk-0-1.bin'}: damaged shard (its sha256 differs from the manifest's); restore it or "
        f"convert the data again (`dataprep verify {data}` checks every file)"
    )


def changed_in_store(seaweed, name: str, change) -> str:
    """A dataset of its own in the store, `change(s3, bucket, shard key)` applied to its chunk-0-3.bin."""
    from dataprep.remote import files_url, load_remote_manifest

    bucket = seaweed.bucket()
    url = convert_synthetic(f"s3://{bucket}/{name}", 300, "stream")
    change(seaweed.client(), bucket, files_url(url, load_remote_manifest(url)).key("stream/chunk-0-3.bin"))
    return url


def flip_a_byte(s3, bucket: str, key: str) -> None:
    blob = bytearray(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    blob[len(blob) // 2] ^= 0x40
    s3.put_object(Bucket=bucket, Key=key, Body=bytes(blob))


@pytest.mark.parametrize("workers", ["0", pytest.param("2", marks=pytest.mark.slow)])  # each starts `train`: 6-12 s
def test_remote_failures_print_only_gpufeeds_line(seaweed, small_shards, tmp_path, workers):
    """A damaged shard from s3:// stops `train` with gpufeed's one line naming it and its sha256: LitData's prefetch
    thread traceback (and a raw traceback of the reader) are not printed before it."""
    url = changed_in_store(seaweed, "damaged", flip_a_byte)
    one_clean_line(train(url, tmp_path / "run", "--workers", workers), "chunk-0-3.bin: damaged shard: sha256")


@pytest.mark.slow  # starts `train`: 8 s
def test_missing_remote_shard_is_one_line(seaweed, small_shards, tmp_path):
    """A shard gone from the store: the S3 client's error as one line naming the object and the endpoint, in the
    loader and in `train`, with no traceback."""
    url = changed_in_store(seaweed, "missing", lambda s3, bucket, key: s3.delete_object(Bucket=bucket, Key=key))
    with pytest.raises(LoaderError, match=r"missing/v-[^/]+/stream/chunk-0-3.bin: not found at http://127.0.0.1:\d+$"):
        with build_loader("stream", url, workers=0, **KW) as loader:
            for _ in loader:
                pass
    one_clean_line(train(url, tmp_path / "run", "--workers", "0"), "chunk-0-3.bin: not found at http://127.0.0.1:")


def test_the_object_storage_docs_work_as_typed():
    """README's and DATAPREP's object-storage commands use the bucket `serve` creates, say how to make another and
    what `shards/` is, ask LitData for a cache it does not warn of, and the stream loader's default workers fit."""
    import re

    from bench.objectstore.__main__ import BUCKET
    from loaders.base import LoaderOptions
    from loaders.stream_cache import LITDATA_MIN, parse_size

    root = Path(__file__).resolve().parents[2]
    for doc in ("README.md", "docs/DATAPREP.md"):
        text = (root / doc).read_text()
        section = text[text.index("## Data in object storage") :]
        section = section[: section.index("\n## ", 5)]
        commands = "".join(re.findall(r"```bash\n(.*?)```", section, re.S))
        assert set(re.findall(r"s3://([\w.-]+)/", commands)) == {BUCKET}, doc
        assert "python -m bench.objectstore serve" in section and "--bucket NAME" in section, doc
        assert "WebDataset" in section or "shards/" not in section, doc
        limits = re.findall(r"--cache-limit (\S+)", section)
        assert limits and all(parse_size(v) >= parse_size(LITDATA_MIN) for v in limits), (doc, limits)
    assert LoaderOptions(batch_size=1).workers <= len(os.sched_getaffinity(0))
