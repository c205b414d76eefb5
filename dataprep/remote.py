"""Datasets in S3-compatible object storage: `s3://BUCKET/PREFIX` holds manifest.json, and the format's files (under
the same relative names as in a prepared directory) in a generation folder the manifest names, `PREFIX/v-DATE-HEX/`
(an older manifest without one: the files beside it). A new upload goes to a fresh generation folder and puts
manifest.json last, so a prefix with a manifest is complete and stays so while a replacement uploads
(dataprep.remote_write).

One client for every S3 service: boto3 with the standard variables (AWS_ENDPOINT_URL for anything but AWS itself,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION, or any other way boto3 finds credentials), so the same
command reaches AWS S3, GCS's S3 API, MinIO or SeaweedFS. Every failure becomes a RemoteError naming the endpoint and
the object, and what to do: a server that does not answer fails in seconds (short connect timeout, few retries)
rather than after boto3's default minutes."""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from common.paths import SCHEME
from common.text import printable

MANIFEST = "manifest.json"
CONNECT_S = 2.0  # a server on the same network answers a connect in milliseconds; a dead one must fail fast
READ_S = 30.0  # one read of a response: a 16 MiB shard at 1 MB/s still arrives in pieces well within this
ATTEMPTS = 3  # boto3's standard retry mode: backoff with jitter between attempts
MAX_KEY = 1024  # bytes of UTF-8 in an object's key, S3's limit
GENERATION = "generation"  # the manifest's field naming the folder below the prefix that holds the dataset's files
GENERATION_NAME = re.compile(r"v-\d{8}T\d{6}Z-[0-9a-f]{8}")  # what dataprep names a generation folder, and only that


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
        """The bucket and key prefix of `location`; one trailing slash is allowed. A key that S3 servers refuse (400
        Bad Request) or read otherwise than written is refused here, naming the URL."""
        text = str(location)
        rest = text[len(SCHEME) :] if text.startswith(SCHEME) else text[len("s3:/") :]
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise RemoteError(f"{printable(text)}: no bucket; write s3://BUCKET/PREFIX")
        prefix = prefix[:-1] if prefix.endswith("/") else prefix
        problem = _key_problem(prefix) if prefix else None
        if problem:
            raise RemoteError(f"{printable(text)}: the key {problem}")
        return cls(bucket, prefix)

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def child(self, name: str) -> S3Url:
        """The URL of folder `name` below this one."""
        return S3Url(self.bucket, self.key(name))

    def __str__(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.prefix}" if self.prefix else f"{SCHEME}{self.bucket}"


def _key_problem(key: str) -> str | None:
    """Why S3 servers refuse `key` or store it under another name, or None."""
    if "\\" in key:
        return "holds a backslash, which some S3 servers read as a separator; separate folders with /"
    for segment in key.split("/"):
        if segment in (".", ".."):
            return f"has a {segment!r} segment, which S3 servers refuse (400 Bad Request); write the prefix without it"
        if not segment:
            return "has an empty segment (//), which S3 servers refuse or drop; write each / once"
    size = len(key.encode("utf-8", "surrogateescape"))
    if size > MAX_KEY:
        return f"is {size} bytes; S3 allows {MAX_KEY}, the dataset's file names included: choose a shorter prefix"
    return None


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


def list_names(s3, url: S3Url) -> Iterator[str]:
    """Every object below the prefix, by its name relative to the prefix."""
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=url.bucket, Prefix=url.key(""))
    try:
        for page in pages:
            for obj in page.get("Contents", []):
                yield obj["Key"][len(url.key("")) :]
    except Exception as e:
        raise explain(e, url) from None


def fetch(location, name: str, target: Path, s3=None) -> Path:
    """Download one object to `target`; `s3`: a client to reuse (one is made otherwise)."""
    url, s3 = S3Url.parse(location), s3 or client()
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


def files_url(location, manifest: dict) -> S3Url:
    """Where the files of the dataset at `location` are: the generation folder its manifest names, or (a manifest
    from before generations) the prefix itself. Every reader of a remote dataset's files resolves them here."""
    url = S3Url.parse(location)
    generation = manifest.get(GENERATION)
    if generation is None:
        return url
    if not isinstance(generation, str) or not GENERATION_NAME.fullmatch(generation):
        raise RemoteError(
            f"{url}/{MANIFEST}: {GENERATION} {printable(json.dumps(generation)[:80])} is not a folder dataprep "
            "writes (v-DATE-HEX); convert the data again"
        )
    return url.child(generation)


def dataset_of(files_location: str) -> str:
    """The dataset's URL from a URL below its generation folder (`.../v-DATE-HEX/stream` -> `...`)."""
    parts = files_location.rstrip("/").split("/")
    for i in range(len(parts) - 1, 2, -1):
        if GENERATION_NAME.fullmatch(parts[i]):
            return "/".join(parts[:i])
    return files_location


def download_dataset(location, target: Path, progress: bool = False) -> dict:
    """Every file the manifest lists, into `target` (for verify) under the names it lists; returns the manifest."""
    from .manifest import file_lists

    manifest = load_remote_manifest(location)
    (target / MANIFEST).write_text(json.dumps({k: v for k, v in manifest.items() if k != GENERATION}))
    names = [f["path"] for fmt in file_lists(manifest).values() for f in fmt.get("files", [])]
    fetch_all(files_url(location, manifest), names, target, f"{location}/{MANIFEST}", progress)
    return manifest


def fetch_all(files, names: list[str], target: Path, source: str, progress: bool = False) -> None:
    """The objects `names` (as the manifest at `source` lists them) below `files` into `target` under those names,
    over one client (a new one costs ~0.1 s)."""
    from tqdm import tqdm

    from common.paths import all_inside

    all_inside(target, names, source=source)
    s3 = client()
    for name in tqdm(names, unit="file", desc="download", disable=not progress):
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        fetch(files, name, target / name, s3)


def verify_remote(location, progress: bool = False) -> list[str]:
    """`dataprep verify` of a dataset in object storage: every file downloaded (to a temporary folder, removed
    afterwards) and checked as a local dataset is: each file's size and sha256 against the manifest, every sample.
    Each problem names the folder in the store that holds the files."""
    from .verify import verify

    with tempfile.TemporaryDirectory(prefix="gpufeed-verify-") as tmp:
        manifest = download_dataset(location, Path(tmp), progress)
        return [f"{files_url(location, manifest)}: {p}" for p in verify(Path(tmp))]
