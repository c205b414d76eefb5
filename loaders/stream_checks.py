"""What the stream loader adds to LitData's reading of shards from object storage (through common.litdata_private):
each downloaded file checked against the manifest's sha256 before the reader sees it, the S3 client's errors worded
as one line, and gpufeed's own message found in LitData's report of a crashed prefetch thread."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dataprep.digest import file_sha256
from dataprep.formats.stream import INDEX
from dataprep.remote import dataset_of

from .errors import LoaderError
from .stream_cache import expected_hashes

# gpufeed's own message inside LitData's report of a crashed prefetch thread (a worker's, as text)
# a batch slower than this means the store is gone for good: LitData's boto3 retries a dead server for ~1 minute
STALL_S = float(os.environ.get("GPUFEED_STREAM_STALL_S", 300))
CRASH = re.compile(r"Original error: (?:LoaderError|DamagedDataError): (.*)$")


def explain_download(error: Exception, remote_filepath: str) -> None:
    """The S3 client's error in a download as one line naming the endpoint, the object and what to do; any other
    error is left to LitData."""
    from dataprep.remote import S3Url, explain, from_s3_client

    if from_s3_client(error):
        raise LoaderError(str(explain(error, S3Url.parse(remote_filepath)))) from None


def check_download(tmp_path: str, local_filepath: str, remote_dir: str) -> None:
    """A downloaded file's sha256 against the manifest's (kept in the cache folder), before LitData publishes it to
    the reader: LitData itself trusts whatever bytes arrive."""
    name = os.path.basename(local_filepath)
    hashes = expected_hashes(Path(local_filepath))
    if hashes is None and name == INDEX:  # LitData's look at the index's `updated_at`, in a scratch folder:
        return  # the index it reads comes through the cache
    if hashes is None:
        raise LoaderError(
            f"{local_filepath}: not inside a stream loader's cache folder, so it cannot be checked against the "
            "manifest; read the data through loaders.build_loader('stream', ...)"
        )
    expected = hashes.get(name)
    got = file_sha256(Path(tmp_path))
    if got != expected:
        os.remove(tmp_path)
        from .integrity import DamagedDataError

        listed = f"the manifest says {expected}" if expected else "the manifest does not list it"
        dataset = dataset_of(remote_dir.rsplit("/", 1)[0])
        raise DamagedDataError(f"{remote_dir}/{name}: damaged shard: sha256 {got}, {listed}; {restore(dataset)}")


def restore(dataset: str) -> str:
    """The fix for a file of `dataset` that is damaged or missing in the store."""
    return f"restore it or convert the data again (dataprep verify {dataset} checks every file)"


def download_text(files: str, manifest: dict, folder: Path) -> None:
    """The cached caption embeddings (`text/`, listed in manifest["text"]) from the generation folder `files` into
    the loader's own `folder`, each checked against its sha256 (a failure here fails the loader's open, which removes
    the folder): the table is then read there by dataprep.textcache.TextTable, as from a local directory."""
    from dataprep.remote import RemoteError, fetch_all

    from .integrity import DamagedDataError

    entries, dataset = manifest["text"]["files"], dataset_of(files)
    try:
        fetch_all(files, [f["path"] for f in entries], folder, f"{dataset}/manifest.json")
    except RemoteError as e:
        missing = "not found" in str(e)  # remote.explain's words for a missing object
        raise LoaderError(f"{e}; {restore(dataset)}" if missing else str(e)) from None
    for entry in entries:
        if (got := file_sha256(folder / entry["path"])) != entry["sha256"]:
            raise DamagedDataError(
                f"{files}/{entry['path']}: damaged caption embeddings: sha256 {got}, the manifest says "
                f"{entry['sha256']}; {restore(dataset)}"
            )


def crash_message(error: BaseException) -> str | None:
    """gpufeed's own one-line message inside LitData's report of a crashed prefetch thread: the LoaderError it
    chains in this process, or its text in a DataLoader worker's traceback; None when there is none."""
    if isinstance(error.__cause__, LoaderError):
        return str(error.__cause__)
    text = str(error).strip()
    found = CRASH.search(text.splitlines()[-1]) if text else None
    return found.group(1) if found else None


def stream_worker_init(worker_id: int) -> None:
    """DataLoader `worker_init_fn` of the stream loader: loaders.workers.start_worker, and the checking downloader
    registered in the worker too (a worker started by a fork server or spawn has LitData's own)."""
    from common.litdata_private import use_s3_downloader

    from .workers import start_worker

    start_worker(worker_id)
    use_s3_downloader(check_download, explain_download)


@contextmanager
def store_timeout(location: str) -> Iterator[None]:
    """A DataLoader timeout (no batch for STALL_S seconds) as a LoaderError naming the store."""
    try:
        yield
    except RuntimeError as error:
        if "DataLoader timed out" not in str(error):
            raise
        endpoint = os.environ.get("AWS_ENDPOINT_URL") or "the object store"
        raise LoaderError(
            f"the stream loader waited {STALL_S:.0f} s for a batch of {location} from "
            f"{endpoint}: the store stopped answering; continue with --resume once it is back"
        ) from None
