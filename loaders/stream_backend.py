"""Streaming shards through LitData, from a local folder or from S3-compatible object storage (`s3://BUCKET/PREFIX`,
reached through AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY as any S3 client is).

LitData does the work a streaming loader exists for: it downloads shards ahead of the reader (`max_pre_download`),
keeps them in a local cache bounded by `cache_limit` (evicting what was read), shuffles (the order of shards, then
every sample within its shard: a function of seed and epoch), deals shards to ranks and workers so that with
drop_last every rank gets the same number of full batches, and resumes mid-epoch from a count of samples
(`start_at`). gpufeed adds three things around it: the cache is a folder of this loader's own, removed by close(),
at exit, or by the next loader once its lock is free (loaders.stream_cache); every downloaded shard is checked
against the manifest's sha256 before LitData reads it (a damaged shard fails naming its hash: loaders.stream_checks),
and so is the table of cached caption embeddings (`text/`), downloaded whole into the cache folder as the loader
opens (it holds each distinct caption once; batches look their captions up there, as from a local directory);
and a worker that waits longer than `STALL_S` for a batch (a server gone for good) stops the run with the endpoint
named instead of hanging.

Knobs: workers -> LitData's DataLoader workers, each reading its own shards and kept from one epoch to the next
(unshuffled, one reader keeps the manifest's order: LitData hands each worker a contiguous part of it);
pin_memory -> pin_memory; prefetch -> prefetch_factor, shards downloaded ahead per worker (at least 2), and the
batches read ahead across an epoch's end, prefetch x workers (loaders.stream_ahead);
cache_limit -> max_cache_size."""

from __future__ import annotations

import atexit
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from common.litdata_private import fetch_with_boto3, read_for_ranks, unprinted_crashes, use_s3_downloader
from common.text import printable
from common.torch_private import shutdown_workers, workers_running
from dataprep.formats.stream import DIRNAME, INDEX, TEXT, X, Y, read_failure

from .base import Batch, Loader
from .errors import LoaderError
from .stream_ahead import Ahead
from .stream_cache import CacheFolder, parse_size
from .stream_checks import (
    STALL_S,
    check_download,
    crash_message,
    download_text,
    explain_download,
    store_timeout,
    stream_worker_init,
)
from .workers import dataloader_workers, worker_errors

# LitData's own S3 client retries 1000 times (adaptive backoff, up to 20 s a wait): against a server that is gone, a
# download never ends. This many attempts (boto3's standard mode: exponential backoff with jitter, at most 20 s a
# wait) ride out a restart of a minute or two, then fail with the endpoint named
ATTEMPTS = 10
CONNECT_S, READ_S = 3.0, 60.0  # a live server connects in milliseconds; a 16 MiB shard at 1 MB/s arrives in pieces
TORCH_DTYPES = {"uint8": torch.uint8, "float32": torch.float32, "float16": torch.float16}
DECODE_ROWS = 256  # LitData's rows per decoded block (its _DEFAULT_BATCH_ROWS: Arrow record batches in a shard)


def plain_http_through_boto3() -> None:
    """LitData fetches shards with obstore when it is installed, and builds obstore's S3 store without `allow_http`:
    against a plain-http endpoint (SeaweedFS or MinIO on a private network) every GET fails ("BadScheme"). LitData
    falls back to boto3 in a process it believes forked after obstore started (its `_OBSTORE_INIT_PID`); marking
    this process so takes that path. Run at import, so DataLoader workers started by spawn or forkserver, which import
    this module for `collate`, take it too. Without that attribute (another LitData) nothing changes: https works."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or ""
    if endpoint.startswith("http://"):
        fetch_with_boto3()


def client_config():
    """boto3's Config for LitData's S3 client: bounded retries with backoff and timeouts (see ATTEMPTS)."""
    from botocore.config import Config

    return Config(
        connect_timeout=CONNECT_S, read_timeout=READ_S, retries={"mode": "standard", "max_attempts": ATTEMPTS}
    )


def collate(items: list[dict]) -> tuple[torch.Tensor, int, list[str] | None]:
    """LitData's items -> (one uint8 tensor: the labels as int64, then the sample bytes; the item count; the captions).
    One tensor, not two: a worker hands every tensor to the training process through a file descriptor of its own,
    a socket handshake each, in the process that trains."""
    n, size = len(items), len(items[0][X])
    buf = np.empty(n * 8 + n * size, np.uint8)
    buf[: n * 8].view(np.int64)[:] = [it[Y] for it in items]
    np.stack([np.frombuffer(it[X], np.uint8) for it in items], out=buf[n * 8 :].reshape(n, size))
    return torch.from_numpy(buf), n, [it[TEXT] for it in items] if TEXT in items[0] else None


def split(buf: torch.Tensor, n: int, dtype: torch.dtype, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """collate's one tensor (on any device) -> (the n samples as `dtype` of `shape`, their labels)."""
    return buf[n * 8 :].view(dtype).reshape(n, *shape), buf[: n * 8].view(torch.int64)


plain_http_through_boto3()
unprinted_crashes(LoaderError)  # the errors gpufeed words itself: their one line is not buried under a traceback


class StreamLoader(Loader):
    def __init__(self, data_dir, manifest, opts, location: str | None = None, files: str | None = None) -> None:
        super().__init__(data_dir, manifest, opts)
        self.location = location or str(self.data_dir)  # s3://BUCKET/PREFIX, or the local directory
        self.files = files or self.location  # where the files are: s3://BUCKET/PREFIX/GENERATION (dataprep.remote)
        self.remote = self.location.startswith("s3://")
        self.shape = (*manifest["sample_shape"],)
        self.dtype = np.dtype(manifest["dtype"])
        self.cache = None
        self._dl, self._start = None, 0
        self._ahead: Ahead | None = None  # reads the batches, the next epoch's ahead of the training loop
        try:
            self._open()
            self._length = self._guarded(len, self._dl)  # LitData reads the index here; kept for after close()
        except BaseException:
            self.close()  # a failed open leaves no cache folder behind
            raise

    def _open(self) -> None:
        o = self.opts
        plain_http_through_boto3()  # again: the endpoint may have been set after this module was imported
        try:
            self._limit = None if o.cache_limit is None else parse_size(o.cache_limit)
        except ValueError as e:
            raise LoaderError(f"cache_limit: {e}") from None
        files = self.manifest["formats"]["stream"].get("files", [])
        self._folder = CacheFolder({Path(f["path"]).name: f["sha256"] for f in files})
        self.cache = self._folder.path
        atexit.register(self._folder.close)  # also when close() is never called
        if self.remote and "text" in self.manifest:
            # the caption embeddings: downloaded whole once, before workers fork; batches look captions up here
            from dataprep.textcache import TextTable

            download_text(self.files, self.manifest, self.cache)
            self._table = TextTable(self.cache, self.manifest)
        use_s3_downloader(check_download, explain_download)
        self.workers = o.workers if o.shuffle else min(o.workers, 1)  # see the module docstring
        self._dl = self._loader()

    def _loader(self):
        """A StreamingDataLoader over the shards whose workers persist across epochs, with a torch generator of its
        own for their seeds (drawn from the global RNG otherwise, which would change the noise a resumed run trains
        on)."""
        from litdata import StreamingDataLoader

        from common.litdata_private import AlignedStreamingDataset

        o = self.opts
        source = f"{self.files.rstrip('/')}/{DIRNAME}" if self.remote else str(self.data_dir / DIRNAME)
        dataset = self._guarded(
            AlignedStreamingDataset,
            source,
            cache_dir=str(self.cache),
            shuffle=o.shuffle,
            drop_last=o.drop_last,
            seed=o.seed,
            max_cache_size=self._limit,
            max_pre_download=max(2, o.prefetch),
            # a shard's items in blocks of DECODE_ROWS, the blocks in random order and the items within each: every
            # block is decoded once, as the shard stores it (Arrow record batches of that many rows where pyarrow wrote
            # it), where a full in-shard shuffle decoded a whole block for each item read (litdata_private's
            # AlignedStreamingDataset)
            item_shuffle_window=DECODE_ROWS,
            batch_decode=DECODE_ROWS,
            storage_options={"config": client_config()} if self.remote else None,
        )
        # the ranks are the options' (as for every backend), not whatever process group is or is not initialised
        read_for_ranks(dataset, o.world_size, o.rank)
        return StreamingDataLoader(
            dataset,
            batch_size=o.batch_size,
            collate_fn=collate,
            drop_last=o.drop_last,
            worker_init_fn=stream_worker_init,
            # persistent: an epoch start waited ~0.1-0.3 s for new workers (each a fork of the training process,
            # stopping it) and their first shards; LitData's workers move on to the next epoch themselves when one ends
            **dataloader_workers(self.workers, self.pin, o, persistent=True),
            timeout=STALL_S if self.workers else 0,
            generator=torch.Generator(),
        )

    def _guarded(self, fn, *args, **kwargs):
        """LitData reads the shards' index as the dataset is built: its S3 errors, and what a damaged index makes it
        raise (a KeyError or ValueError from deep inside), as one line naming the index and the fix."""
        from dataprep.remote import S3Url, explain, from_s3_client

        try:
            return fn(*args, **kwargs)
        except LoaderError:  # worded already (the checking downloader's)
            raise
        except Exception as e:
            if self.remote and from_s3_client(e):
                raise LoaderError(str(explain(e, S3Url.parse(self.files), f"{DIRNAME}/{INDEX}"))) from None
            if isinstance(e, (KeyError, ValueError, TypeError, IndexError)):
                index = f"{self.files.rstrip('/')}/{DIRNAME}/{INDEX}"
                why = f"{type(e).__name__}: {printable(str(e))}"
                raise LoaderError(
                    f"{index}: damaged ({why}); `dataprep verify {self.location}` checks every file"
                ) from None
            raise

    def __len__(self) -> int:
        if self._dl is not None:
            self._length = len(self._dl)
        return self._length

    def start_at(self, position: int) -> None:
        """Begin the next iteration (of the epoch set_epoch chose) at batch `position`, without reading the batches
        before it: LitData skips the samples a count says were consumed, shard by shard."""
        self._start = position

    def _prepare(self, dl, epoch: int, start: int) -> None:
        """Set `dl` to iterate epoch `epoch` from batch `start`."""
        o, dataset = self.opts, dl.dataset
        dataset.reset_state_dict()
        dataset.set_epoch(epoch + 1)
        dl.current_epoch = epoch  # LitData counts epochs from 1 and adds one as an iteration starts
        dl.generator.manual_seed(o.seed * 1_000_003 + epoch)
        if start == 0:
            return
        n = start * o.batch_size
        state = {
            "dataset": dataset.state_dict(n, self.workers, o.batch_size),
            "current_epoch": epoch + 1,
            "num_samples_yielded": n,
            "latest_worker_idx": (start - 1) % max(1, self.workers),
        }
        dl.load_state_dict(state)

    def __iter__(self) -> Iterator[Batch]:
        first, self._start = self._start, 0
        if self._ahead is None or self._ahead.key != (self.epoch, first):  # reading another epoch or position
            if self._stop_reading():
                self._dl = self._loader()
            depth = max(2, self.opts.prefetch) * max(1, self.workers)  # as many again as the workers have in hand
            self._ahead = Ahead(self._epoch, (self.epoch, first), depth)
        return self._batches(self._ahead, first)

    def _epoch(self, epoch: int, first: int):
        """The DataLoader set to read epoch `epoch` from batch `first` (in the read-ahead thread)."""
        self._prepare(self._dl, epoch, first)
        return self._dl

    def _stop_reading(self) -> bool:
        """Stop the read-ahead and the workers it kept; whether there were workers."""
        if self._ahead is not None:
            self._ahead.stop()
            self._ahead = None
        running = self._dl is not None and workers_running(self._dl)
        if running:
            shutdown_workers(self._dl)
        return running

    def _batches(self, ahead: Ahead, first: int) -> Iterator[Batch]:
        o = self.opts
        with worker_errors("stream", self.location), store_timeout(self.location), self._reported():
            for i, (buf, n, captions) in enumerate(ahead.epoch(), start=first):
                buf = buf.to(o.device, non_blocking=self.pin)  # one copy to the device, split there
                x, y = split(buf, n, TORCH_DTYPES[self.dtype.name], self.shape)
                yield self.finish(x, y, i, captions)

    @contextmanager
    def _reported(self) -> Iterator[None]:
        """A read's failure that gpufeed can word as one line: its own error inside LitData's report of a crashed
        prefetch thread (a damaged or unreachable shard), or a local shard that does not match the manifest."""
        try:
            yield
        except Exception as e:
            message = crash_message(e)
            if message is None and not self.remote:
                message = read_failure(e, self.data_dir, self.manifest)
            if message is None:
                raise
            raise LoaderError(message) from None

    def close(self) -> None:
        self._stop_reading()
        self._dl = None
        if self.cache is not None:
            self._folder.close()
            self.cache = None
