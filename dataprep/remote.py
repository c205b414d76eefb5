"""Datasets in S3-compatible object storage: `s3://BUCKET/PREFIX` holds what a prepared directory holds (manifest.json
and the format's files, under the same relative names).

One client for every S3 service: boto3 with the standard variables (AWS_ENDPOINT_URL for anything but AWS itself,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION, or any other way boto3 finds credentials), so the same
command reaches AWS S3, GCS's S3 API, MinIO or SeaweedFS. Every failure becomes a RemoteError naming the endpoint and
the object, and what to do: a server that does not answer fails in seconds (short connect timeout, few retries)
rather than after boto3's default minutes. An upload writes manifest.json last, so a prefix with a manifest is
complete, as a local directory with one is."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SCHEME = "s3://"
MANIFEST = "manifest.json"
CONNECT_S = 2.0  # a server on the same network answers a connect in milliseconds; a dead one must fail fast
READ_S = 30.0  # one read of a response: a 16 MiB shard at 1 MB/s still arrives in pieces well within this
ATTEMPTS = 3  # boto3's standard retry mode: backoff with jitter between attempts


class RemoteError(ValueError):
    """Object storage cannot be used as asked; the message names the endpoint, the object and the fix."""


def is_remote(location) -> bool:
    """An s3:// URL (also as pathlib mangles it, s3:/bucket, when a caller passed it through Path)."""
    text = str(location)
    return text.startswith(SCHEME) or text.startswith("s3:/")


@dataclass(frozen=True)
class S3Url:
    bucket: str
    prefix: str  # without slashes at either end; "" for the bucket's top

    @classmethod
    def parse(cls, location) -> S3Url:
        text = str(location)
        rest = text[len(SCHEME) :] if text.startswith(SCHEME) else text[len("s3:/") :]
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise RemoteError(f"{text}: no bucket; write s3://BUCKET/PREFIX")
        return cls(bucket, prefix.strip("/"))

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def __str__(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.prefix}" if self.prefix else f"{SCHEME}{self.bucket}"


def endpoint() -> str:
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or "AWS S3 (no AWS_ENDPOINT_URL)"


def client():
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise RemoteError("s3:// locations need the 'stream' extra (boto3): pip install -e '.[stream]'") from None
    config = Config(
        connect_timeout=CONNECT_S, read_timeout=READ_S, retries={"mode": "standard", "max_attempts": ATTEMPTS}
    )
    # a session of its own: the default one keeps the credentials it first found, whatever the variables say later
    return boto3.session.Session().client("s3", config=config)


def explain(error: Exception, url: S3Url, name: str = "") -> RemoteError:
    """A boto3/botocore exception as one line naming the endpoint, the object and what to do."""
    where = f"{url}/{name}" if name else str(url)
    code = getattr(error, "response", {}).get("Error", {}).get("Code", "") if hasattr(error, "response") else ""
    kind = type(error).__name__
    if kind in ("EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError", "ReadTimeoutError"):
        return RemoteError(
            f"cannot reach the object store at {endpoint()} for {where} ({kind}): is the server "
            "running, and is AWS_ENDPOINT_URL right?"
        )
    if code in ("SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied", "403", "InvalidToken"):
        return RemoteError(
            f"{where}: the object store at {endpoint()} refused the credentials ({code}); check "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        )
    if code in ("NoSuchBucket",):
        return RemoteError(f"{where}: bucket {url.bucket!r} does not exist at {endpoint()}; create it first")
    if code in ("NoSuchKey", "404", "NotFound"):
        return RemoteError(f"{where}: not found at {endpoint()}")
    if kind == "NoCredentialsError":
        return RemoteError(f"{where}: no credentials; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
    return RemoteError(f"{where}: object store error at {endpoint()} ({kind}: {error})")


def from_s3_client(error: Exception) -> bool:
    return type(error).__module__.split(".")[0] in ("botocore", "boto3", "s3transfer")


def _call(url: S3Url, name: str, fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except Exception as e:
        if not from_s3_client(e):
            raise
        raise explain(e, url, name) from None


def require_bucket(s3, url: S3Url) -> None:
    try:
        s3.head_bucket(Bucket=url.bucket)
    except Exception as e:
        error = explain(e, url)
        if "not found" in str(error):  # head_bucket answers a bare 404 for a missing bucket
            raise RemoteError(f"{url}: bucket {url.bucket!r} does not exist at {endpoint()}; create it first") from None
        raise error from None


def exists(s3, url: S3Url, name: str) -> bool:
    try:
        s3.head_object(Bucket=url.bucket, Key=url.key(name))
        return True
    except Exception as e:
        if "not found" in str(explain(e, url, name)):
            return False
        raise explain(e, url, name) from None


def check_target(url: S3Url, overwrite: bool) -> None:
    """Before converting: the bucket is there and, without `overwrite`, holds no dataset at the prefix yet."""
    s3 = client()
    require_bucket(s3, url)
    if not overwrite and exists(s3, url, MANIFEST):
        raise RemoteError(f"{url}: already holds a dataset (manifest.json); pass --overwrite to replace it")


def upload_dir(local: Path, location, overwrite: bool, progress: bool = False) -> None:
    """Every file of a finished prepared directory to `location`, manifest.json last; with `overwrite`, the old
    dataset's manifest goes first (the prefix reads as incomplete while it changes) and its stale objects after."""
    from tqdm import tqdm

    url, s3 = S3Url.parse(location), client()
    require_bucket(s3, url)
    if exists(s3, url, MANIFEST):
        if not overwrite:
            raise RemoteError(f"{url}: already holds a dataset (manifest.json); pass --overwrite to replace it")
        _call(url, MANIFEST, s3.delete_object, Bucket=url.bucket, Key=url.key(MANIFEST))
    old = set(list_names(s3, url)) if overwrite else set()
    files = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file() and p.name != MANIFEST)
    for name in tqdm(files, unit="file", desc="upload", disable=not progress):
        _call(url, name, s3.upload_file, str(local / name), url.bucket, url.key(name))
    _call(url, MANIFEST, s3.upload_file, str(local / MANIFEST), url.bucket, url.key(MANIFEST))
    for name in sorted(old - set(files) - {MANIFEST}):
        _call(url, name, s3.delete_object, Bucket=url.bucket, Key=url.key(name))


def list_names(s3, url: S3Url) -> Iterator[str]:
    """Every object below the prefix, by its name relative to the prefix."""
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=url.bucket, Prefix=url.key(""))
    try:
        for page in pages:
            for obj in page.get("Contents", []):
                yield obj["Key"][len(url.key("")) :]
    except Exception as e:
        raise explain(e, url) from None


def fetch(location, name: str, target: Path) -> Path:
    """Download one object to `target`."""
    url, s3 = S3Url.parse(location), client()
    if name == MANIFEST and not exists(s3, url, MANIFEST):
        require_bucket(s3, url)
        raise RemoteError(f"{url}: no dataset there (no manifest.json at {endpoint()}); convert with --output {url}")
    _call(url, name, s3.download_file, url.bucket, url.key(name), str(target))
    return target


def load_remote_manifest(location) -> dict:
    """The manifest of a dataset in object storage, checked as a local one is."""
    from .manifest import ManifestError, load_manifest

    with tempfile.TemporaryDirectory(prefix="gpufeed-manifest-") as tmp:
        fetch(location, MANIFEST, Path(tmp) / MANIFEST)
        try:
            return load_manifest(tmp)
        except ManifestError as e:
            raise RemoteError(str(e).replace(tmp, str(S3Url.parse(location)))) from None


def open_object(location, name: str):
    """A streaming body (read in pieces) of one object: tar shards read without a local copy."""
    url, s3 = S3Url.parse(location), client()
    return _call(url, name, s3.get_object, Bucket=url.bucket, Key=url.key(name))["Body"]


def download_dataset(location, target: Path, progress: bool = False) -> dict:
    """Every file the manifest lists, into `target` (for verify); returns the manifest."""
    from tqdm import tqdm

    from .paths import all_inside

    manifest = load_remote_manifest(location)
    (target / MANIFEST).write_text(json.dumps(manifest))
    names = [f["path"] for fmt in manifest["formats"].values() for f in fmt.get("files", [])]
    all_inside(target, names, source=f"{location}/{MANIFEST}")
    for name in tqdm(names, unit="file", desc="download", disable=not progress):
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        fetch(location, name, target / name)
    return manifest


def verify_remote(location, progress: bool = False) -> list[str]:
    """`dataprep verify` of a dataset in object storage: every file downloaded (to a temporary folder, removed
    afterwards) and checked as a local dataset is: each file's size and sha256 against the manifest, every sample."""
    from .verify import verify

    with tempfile.TemporaryDirectory(prefix="gpufeed-verify-") as tmp:
        download_dataset(location, Path(tmp), progress)
        return [f"{S3Url.parse(location)}: {p}" for p in verify(Path(tmp))]
