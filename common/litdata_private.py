"""Every part of LitData that gpufeed uses beyond `litdata.StreamingDataset` and `StreamingDataLoader`, here and nowhere
else, each listed in USED and pinned by a test to the LitData versions setup.cfg names
(tests/integration/test_private_apis.py): the shard writer, the S3 downloader's registry and its publish step (where
each shard's sha256 is checked before the reader sees it), the ranks a dataset reads for, the flag that makes it fetch
with boto3, the prefetch thread's crash report, and the in-shard shuffle (a subclass of LitData's:
`AlignedStreamingDataset`, built on first use so that importing this module does not import LitData). Imported only
where LitData is installed (the 'stream' extra)."""

from __future__ import annotations

import os
from collections.abc import Callable

from . import torch_private

USED = (
    "litdata.streaming.writer.BinaryWriter",
    "litdata.streaming.downloader.S3Downloader.download_file",
    "litdata.streaming.downloader.S3Downloader._publish_file",
    "litdata.streaming.client.S3Client",
    "litdata.streaming.downloader.register_downloader",
    "litdata.streaming.downloader._OBSTORE_INIT_PID",
    "litdata.utilities.env._DistributedEnv",
    "litdata.streaming.reader.PrepareChunksThread._report_crash",
    "litdata.streaming.shuffle.FullShuffle",
    "litdata.streaming.dataset.StreamingDataset._create_shuffler",
)


def missing() -> list[str]:
    """The names of USED this LitData lacks."""
    return torch_private.missing(USED)


def binary_writer(root: str, chunk_size: int):
    """LitData's shard writer into `root`, `chunk_size` samples a shard."""
    from litdata.streaming.writer import BinaryWriter

    return BinaryWriter(root, chunk_size=chunk_size)


def fetch_with_boto3() -> None:
    """LitData fetches with obstore where it is installed, and falls back to boto3 in a process it believes forked
    after obstore started (its `_OBSTORE_INIT_PID`): mark this process so. A LitData without it: nothing changes."""
    import litdata.streaming.downloader as downloader

    if hasattr(downloader, "_OBSTORE_INIT_PID"):
        downloader._OBSTORE_INIT_PID = -1


def read_for_ranks(dataset, world_size: int, rank: int) -> None:
    """The ranks `dataset` splits its shards over, set outright (one node): LitData otherwise reads them from
    whatever process group is or is not initialised."""
    from litdata.utilities.env import _DistributedEnv

    dataset.distributed_env = _DistributedEnv(world_size, rank, 1)


def wait_for_other_download(local_filepath: str, timeout: float = 300.0) -> bool:
    """Wait until no other worker holds `local_filepath`'s download lock; whether one did.

    LitData's downloader returns at once, without the file, when another worker holds that lock (two workers whose
    parts share a shard); the returning worker's reader is then told of the file by no one and looks again after a
    second (a 0.2-1 s stall at an epoch start). Waiting for the lock here lets its prefetch thread find the file
    when the other's download ends."""
    from filelock import FileLock, Timeout

    lock = FileLock(local_filepath + ".lock", timeout=0)
    try:
        lock.acquire()
    except Timeout:
        with FileLock(local_filepath + ".lock", timeout=timeout):
            return True
    lock.release()
    return False


def use_s3_downloader(check: Callable[[str, str, str], None], explain: Callable[[Exception, str], None]) -> None:
    """Fetch s3:// files with LitData's S3 downloader, calling `explain(error, remote path)` on a failed download (it
    raises gpufeed's own error, or returns to let LitData's through) and `check(downloaded, local path, remote
    folder)` before each file is published to the reader (it raises to refuse the file)."""
    from litdata.streaming.downloader import S3Downloader, register_downloader

    class CheckingS3Downloader(S3Downloader):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self._client = one_client(self._client)

        def download_file(self, remote_filepath: str, local_filepath: str) -> None:
            for _ in range(2):  # a second time where the worker that held the lock failed
                try:
                    super().download_file(remote_filepath, local_filepath)
                except Exception as e:
                    explain(e, remote_filepath)
                    raise
                if os.path.exists(local_filepath) or not wait_for_other_download(local_filepath):
                    return

        def _publish_file(self, tmp_path: str, local_filepath: str) -> None:
            check(tmp_path, local_filepath, self._remote_dir)
            super()._publish_file(tmp_path, local_filepath)

    register_downloader("s3://", CheckingS3Downloader, overwrite=True)


_CLIENTS: dict[tuple, object] = {}


def one_client(fresh):
    """The S3 client a process already made for this endpoint and key, else `fresh` (kept for the next call).

    LitData builds a reader, and with it a downloader and a new S3 client, for every epoch of every worker; the client
    makes its boto3 client on its first download, 65-240 ms of one core each (12-17 ms is the 3 MB shard itself),
    so at each epoch start every worker's first shard waited that long. LitData's client renews its own credentials,
    so one can serve a whole run."""
    env = os.environ
    key = (os.getpid(), env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL"), env.get("AWS_ACCESS_KEY_ID"))
    return _CLIENTS.setdefault(key, fresh)


def unprinted_crashes(kind: type[BaseException]) -> None:
    """LitData prints the whole traceback of a prefetch thread that died (PrepareChunksThread._report_crash) before
    the reader raises the error again: leave those of `kind` unprinted. Without LitData: nothing to do."""
    try:
        from litdata.streaming.reader import PrepareChunksThread
    except ImportError:
        return
    report = getattr(PrepareChunksThread, "_report_crash", None)
    if report is None or getattr(report, "gpufeed", False):
        return

    def _report_crash(thread, exc: BaseException) -> None:
        if not isinstance(exc, kind):
            report(thread, exc)

    _report_crash.gpufeed = True
    PrepareChunksThread._report_crash = _report_crash


def _aligned_classes() -> dict:
    """LitData's StreamingDataset with its in-shard block shuffle counted from the shard's first item.

    LitData decodes a shard's items a window of `batch_decode` rows at a time, windows counted from the shard's first
    item, and keeps one decoded window. Its block shuffle (`item_shuffle_window`) counts blocks from the first item of
    the part a worker reads instead: where a shard is split between two workers or ranks (at each boundary of their
    parts, every epoch), that part's blocks straddle two windows and its items alternate between them, each item
    decoding a whole window again. Counting blocks from the shard's first item decodes each window once."""
    import numpy as np
    from litdata import StreamingDataset
    from litdata.streaming.shuffle import FullShuffle

    class AlignedShuffle(FullShuffle):
        def __call__(self, array, num_chunks: int, current_epoch: int, chunk_index: int) -> list[int]:
            rng = np.random.RandomState([self.seed, num_chunks, current_epoch, chunk_index])
            items = np.asarray(array, dtype=np.int64)
            if len(items) < 2:
                return items.tolist()
            first = int(self.cache.get_chunk_intervals()[chunk_index][0])
            keys = (items - first) // max(1, self.item_window)
            blocks = [items[keys == k] for k in np.unique(keys)]
            for block in blocks:
                rng.shuffle(block)
            rng.shuffle(blocks)
            return np.concatenate(blocks).tolist()

    class AlignedStreamingDataset(StreamingDataset):
        def _create_shuffler(self, cache):
            shuffler = super()._create_shuffler(cache)
            if type(shuffler) is FullShuffle:
                return AlignedShuffle(cache, shuffler.seed, shuffler.drop_last, item_window=shuffler.item_window)
            return shuffler

    for cls in (AlignedShuffle, AlignedStreamingDataset):
        cls.__qualname__ = cls.__name__  # found by name here when a worker unpickles the dataset
    return {"AlignedShuffle": AlignedShuffle, "AlignedStreamingDataset": AlignedStreamingDataset}


def __getattr__(name: str):
    if name in ("AlignedShuffle", "AlignedStreamingDataset"):
        globals().update(_aligned_classes())
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
