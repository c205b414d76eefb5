"""What `dataprep convert --output s3://...` may delete, against the real SeaweedFS server (conftest's `seaweed`): only
the objects an old dataset's manifest lists, after the new dataset is complete; never a prefix or a bucket of other
objects. An upload killed part-way leaves the old dataset readable plus a named leftover, which the next --overwrite
removes. URLs that S3 servers answer with "400 Bad Request" are refused before any request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dataprep.cli import cli

REPO = Path(__file__).resolve().parents[1]


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
