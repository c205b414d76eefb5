"""What `dataprep convert --output s3://...` may delete, against the real SeaweedFS server (conftest's `seaweed`): only
the objects an old dataset's manifest lists, after the new dataset is complete; never a prefix or a bucket of other
objects. An upload killed part-way leaves the old dataset readable plus a named leftover, which the next --overwrite
removes. URLs that S3 servers answer with "400 Bad Request" are refused before any request."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from objectstore_helpers import convert_synthetic

from dataprep.cli import cli
from loaders import build_loader

REPO = Path(__file__).resolve().parents[2]


def objects(s3, bucket: str, prefix: str = "") -> dict[str, bytes]:
    """Every object of the bucket below `prefix` with its bytes: what a refused command must leave unchanged."""
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
    return {k: s3.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys}


def convert(output: str, *more: str, limit: int = 20, fmt: str = "stream"):
    args = ["--source", "synthetic-images", "--limit", str(limit), "--format", fmt, "--output", output]
    return CliRunner().invoke(cli, ["convert", *args, "--quiet", "--workers", "1", *more])


def dataset_keys(s3, bucket: str, prefix: str) -> set[str]:
    """The keys a dataset at s3://bucket/prefix consists of, as its manifest says."""
    manifest = json.loads(s3.get_object(Bucket=bucket, Key=f"{prefix}/manifest.json")["Body"].read())
    under = f"{prefix}/{manifest['generation']}/" if "generation" in manifest else f"{prefix}/"
    files = {under + f["path"] for fmt in manifest["formats"].values() for f in fmt["files"]}
    return files | {f"{prefix}/manifest.json"}


def test_overwrite_leaves_a_prefix_of_other_objects_alone(seaweed):
    """--overwrite into a prefix holding someone's files and no dataset: refused, naming an object; nothing deleted."""
    s3, bucket = seaweed.client(), seaweed.bucket()
    s3.put_object(Bucket=bucket, Key="userdata/thesis.tex", Body=b"\\documentclass{article}")
    s3.put_object(Bucket=bucket, Key="userdata/photos/a.jpg", Body=b"\xff\xd8")
    before = objects(s3, bucket)
    r = convert(f"s3://{bucket}/userdata", "--overwrite")
    assert r.exit_code == 1 and "not replaced" in r.output and "photos/a.jpg" in r.output, r.output
    assert "Traceback" not in r.output and objects(s3, bucket) == before


def test_a_bucket_root_is_refused_as_an_output(seaweed):
    """--output s3://BUCKET (with or without a slash, with or without --overwrite): refused before converting; the
    bucket's backup, README and other dataset all stay."""
    s3, bucket = seaweed.client(), seaweed.bucket()
    convert_synthetic(f"s3://{bucket}/other", 10, "stream")
    s3.put_object(Bucket=bucket, Key="db-backup.sql", Body=b"CREATE TABLE t (x int);")
    s3.put_object(Bucket=bucket, Key="README", Body=b"do not delete")
    before = objects(s3, bucket)
    for output, more in [(f"s3://{bucket}", "--overwrite"), (f"s3://{bucket}/", "--overwrite"), (f"s3://{bucket}", "")]:
        r = convert(output, *([more] if more else []))
        assert r.exit_code == 1 and "a bucket's top level is not an output" in r.output, r.output
    assert objects(s3, bucket) == before


def test_without_overwrite_a_non_empty_prefix_is_refused(seaweed):
    """A prefix holding any object, dataset or not, is refused without --overwrite, as a non-empty folder is."""
    s3, bucket = seaweed.client(), seaweed.bucket()
    s3.put_object(Bucket=bucket, Key="mine/notes.txt", Body=b"mine")
    r = convert(f"s3://{bucket}/mine")
    assert r.exit_code == 1 and "notes.txt" in r.output, r.output
    assert objects(s3, bucket) == {"mine/notes.txt": b"mine"}


def test_overwrite_deletes_only_what_the_old_manifest_lists(seaweed):
    """A dataset with a file of the user's added to its prefix: --overwrite refuses it and deletes nothing; with the
    file gone, --overwrite replaces the dataset and deletes exactly the old manifest's objects, never the neighbours
    (`ds2/`, `ds.txt`) that share the prefix's first letters."""
    s3, bucket = seaweed.client(), seaweed.bucket()
    convert_synthetic(f"s3://{bucket}/ds", 30, "stream")
    old = dataset_keys(s3, bucket, "ds")
    s3.put_object(Bucket=bucket, Key="ds/notes.txt", Body=b"mine")
    s3.put_object(Bucket=bucket, Key="ds2/x", Body=b"neighbour")
    s3.put_object(Bucket=bucket, Key="ds.txt", Body=b"neighbour")
    before = objects(s3, bucket)
    r = convert(f"s3://{bucket}/ds", "--overwrite")
    assert r.exit_code == 1 and "notes.txt, which its manifest does not list" in r.output, r.output
    assert objects(s3, bucket) == before
    s3.delete_object(Bucket=bucket, Key="ds/notes.txt")
    r = convert(f"s3://{bucket}/ds", "--overwrite", limit=50)
    assert r.exit_code == 0, r.output
    new = dataset_keys(s3, bucket, "ds")
    assert set(objects(s3, bucket)) == new | {"ds2/x", "ds.txt"} and not new & (old - {"ds/manifest.json"})
    assert CliRunner().invoke(cli, ["verify", f"s3://{bucket}/ds"]).exit_code == 0


def test_upload_checks_the_prefix_again_before_writing(seaweed, tmp_path):
    """upload_dir (what convert runs after the conversion) checks the prefix itself: objects that arrived after the
    first check are not deleted, and no object is written."""
    from dataprep.remote import RemoteError
    from dataprep.remote_write import upload_dir

    s3, bucket = seaweed.client(), seaweed.bucket()
    local = Path(convert_synthetic(str(tmp_path / "ds"), 10, "stream"))
    s3.put_object(Bucket=bucket, Key="late/report.pdf", Body=b"%PDF")
    with pytest.raises(RemoteError, match="not replaced: it holds report.pdf"):
        upload_dir(local, f"s3://{bucket}/late", overwrite=True)
    assert objects(s3, bucket) == {"late/report.pdf": b"%PDF"}


def interrupted_upload(s3, url: str, sig: int, tmp_path: Path) -> None:
    """A real `dataprep convert --overwrite` of 1,500 images (one object each) into `url`, sent `sig` once 20 objects
    that are not the old dataset's have arrived."""
    bucket, prefix = url[len("s3://") :].split("/", 1)
    old = set(objects(s3, bucket, prefix + "/"))
    args = ["--source", "synthetic-images", "--limit", "1500", "--format", "files", "--output", url, "--overwrite"]
    env = os.environ | {"PYTHONPATH": str(REPO), "GPUFEED_STAGE": str(tmp_path)}
    cmd = [sys.executable, "-m", "dataprep", "convert", *args, "--quiet", "--workers", "1"]
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
        if len({o["Key"] for page in pages for o in page.get("Contents", [])} - old) >= 20:
            proc.send_signal(sig)
            break
        time.sleep(0.05)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == (-sig if sig == signal.SIGKILL else 128 + sig), (out, err[-2000:])


def test_killed_upload_keeps_the_old_dataset_and_the_next_overwrite_removes_the_leftover(seaweed, tmp_path):
    """SIGKILL mid-upload: the old dataset still loads and verifies with its old digest, verify and info name the
    interrupted upload's leftover; the next --overwrite completes and removes the leftover and the old objects."""
    s3, bucket = seaweed.client(), seaweed.bucket()
    url = convert_synthetic(f"s3://{bucket}/ds", 64, "stream")
    old_manifest = s3.get_object(Bucket=bucket, Key="ds/manifest.json")["Body"].read()
    interrupted_upload(s3, url, signal.SIGKILL, tmp_path)
    assert s3.get_object(Bucket=bucket, Key="ds/manifest.json")["Body"].read() == old_manifest
    digest = json.loads(old_manifest)["digest"]["total"]
    leftover = rf"leftover of an interrupted upload: {url}/v-[0-9TZ]+-[0-9a-f]+/ \(\d+ objects\); the next convert "
    leftover += "--overwrite to this prefix removes it"
    for command in ("verify", "info"):
        r = CliRunner().invoke(cli, [command, url])
        assert r.exit_code == 0 and re.search(leftover, r.output), r.output
    assert digest in CliRunner().invoke(cli, ["info", url]).output
    with build_loader("stream", url, batch_size=16, workers=0, shuffle=False, augment=False) as loader:
        assert sum(len(b.y) for b in loader) == 64
    r = convert(url, "--overwrite", limit=30)
    assert r.exit_code == 0 and "removed" in r.output and "leftover of an interrupted upload" in r.output, r.output
    assert set(objects(s3, bucket)) == dataset_keys(s3, bucket, "ds")
    r = CliRunner().invoke(cli, ["verify", url])
    assert r.exit_code == 0 and "leftover" not in r.output, r.output


def test_stopped_upload_keeps_the_old_dataset_and_leaves_nothing(seaweed, tmp_path):
    """SIGTERM mid-upload: the command exits 143, having removed what it uploaded; the prefix holds exactly the old
    dataset, which verifies."""
    s3, bucket = seaweed.client(), seaweed.bucket()
    url = convert_synthetic(f"s3://{bucket}/ds", 64, "stream")
    before = objects(s3, bucket)
    interrupted_upload(s3, url, signal.SIGTERM, tmp_path)
    assert objects(s3, bucket) == before
    r = CliRunner().invoke(cli, ["verify", url])
    assert r.exit_code == 0 and "leftover" not in r.output, r.output


def test_a_dataset_in_the_old_layout_is_read_and_replaced(seaweed, tmp_path):
    """A dataset uploaded with its files beside manifest.json (no generation) and a stale shard the manifest does not
    list: it loads and verifies, verify names the stale object, --overwrite refuses it; once it is removed,
    --overwrite deletes exactly the old manifest's objects."""
    s3, bucket = seaweed.client(), seaweed.bucket()
    local = Path(convert_synthetic(str(tmp_path / "ds"), 40, "stream"))
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        s3.put_object(Bucket=bucket, Key=f"old/{path.relative_to(local).as_posix()}", Body=path.read_bytes())
    s3.put_object(Bucket=bucket, Key="old/stream/chunk-9-9.bin", Body=b"stale")
    url = f"s3://{bucket}/old"
    r = CliRunner().invoke(cli, ["verify", url])
    assert r.exit_code == 0 and f"{url}/stream/chunk-9-9.bin" in r.output, r.output
    with build_loader("stream", url, batch_size=8, workers=0, shuffle=False, augment=False) as loader:
        assert sum(len(b.y) for b in loader) == 40
    r = convert(url, "--overwrite")
    assert r.exit_code == 1 and "stream/chunk-9-9.bin, which its manifest does not list" in r.output, r.output
    s3.delete_object(Bucket=bucket, Key="old/stream/chunk-9-9.bin")
    assert convert(url, "--overwrite").exit_code == 0
    assert set(objects(s3, bucket)) == dataset_keys(s3, bucket, "old")


@pytest.mark.parametrize(
    "tail, why",
    [
        ("a/../syn", "a '..' segment"),
        ("a/./syn", "a '.' segment"),
        ("a//syn", "an empty segment"),
        ("a\\syn", "a backslash"),
        ("k" * 1100, "1100 bytes"),
    ],
    ids=["dotdot", "dot", "empty", "backslash", "too-long"],
)
def test_urls_a_server_refuses_are_refused_up_front(seaweed, tail, why):
    """s3://BUCKET/KEY with a '..', '.' or empty segment, a backslash or over 1024 bytes: one line naming the URL and
    what is wrong, before any request; convert exits 1 with it and writes nothing."""
    from dataprep.remote import RemoteError, S3Url

    bucket = seaweed.bucket()
    with pytest.raises(RemoteError, match=f"s3://{bucket}/.*{why}"):
        S3Url.parse(f"s3://{bucket}/{tail}")
    r = convert(f"s3://{bucket}/{tail}")
    assert r.exit_code == 1 and why in r.output and "Traceback" not in r.output, r.output
    assert objects(seaweed.client(), bucket) == {}


def test_a_prefix_too_long_for_the_dataset_keys_is_refused_before_converting(seaweed):
    """A 1,000-byte prefix is a valid key, but the dataset's keys below it would pass S3's 1,024: refused at once."""
    bucket = seaweed.bucket()
    r = convert(f"s3://{bucket}/{'k' * 1000}")
    assert r.exit_code == 1 and "the prefix is 1000 bytes" in r.output and "Traceback" not in r.output, r.output
    assert objects(seaweed.client(), bucket) == {}
