"""The caption table's writer: `dataprep convert --text-encoder` encodes each distinct caption once, in batches, and
writes the files of `text/` (dataprep.textcache describes them and reads them back). On a GPU the encoder replays CUDA
graphs, the next turn's batches are tokenized on a thread of their own, each batch's copy to the host runs behind the
next batch, and a thread writes the files; under torchrun the ranks share the batches (dataprep.textcache_ranks)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import numpy as np

from .sources.base import Chunk
from .textcache import CAPTIONS, DIRNAME, DTYPES, OFFSETS, POOLED, TOKENS, _torch_dtype

FILES = (TOKENS, POOLED)  # written as the batches come; the other two at the end
# turns being written at once, at most: where the encoding holds the GIL (CLIP-L-sized captions are bound by the
# host), the writing thread can wait Python's switch interval (5 ms) for it, longer than a batch takes. With one turn
# in flight, CLIP-L's writer ran at 89-91% of the encoder alone with files, 104% without; with 4, 99-103% with them
WRITES_IN_FLIGHT = 4


def _bits(x, dtype: str):
    """A tensor's values in `dtype` as 16-bit patterns, where it is."""
    import torch

    return x.detach().to(_torch_dtype(dtype)).view(torch.int16)


class TextCacheWriter:
    """Encodes each distinct caption once, `batch_size` at a time, into the files of `text/`. Under torchrun every
    rank sees the same captions and takes every world_size-th batch (the batches one process encodes, so the table is
    the same); the other ranks pass `out_dir=None`, and write their batches into rank 0's files where they see them,
    else send them to rank 0 (dataprep.textcache_ranks)."""

    def __init__(self, out_dir: Path | None, encoder, dtype: str, batch_size: int, identity=None) -> None:
        """`identity`: the encoder's sha256 (textenc.identity.sha256_soon) where it was started already."""
        if dtype not in DTYPES:
            raise ValueError(f"text dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
        self.encoder, self.dtype, self.batch_size = encoder, dtype, batch_size
        self.rank, self.world = _dist()
        self.ids: dict[str, int] = {}
        self.pending: list[str] = []
        self.seconds = 0.0  # encoding and gathering the distinct captions, for the conversion's timings
        self._inflight: tuple[int, list] | None = None  # the last turn's batches, on their way to the host
        self._files, self._written = ThreadPoolExecutor(1, thread_name_prefix="text-cache"), deque()
        # the next turn's batches tokenized while this turn's encode: (captions, future of encoder.tokenize)
        self._tokenizer, self._tokenized = ThreadPoolExecutor(1, thread_name_prefix="text-tokenize"), deque()
        self.offsets = [0]  # every caption's first row in tokens.bin, and the rows so far
        self.root = None if out_dir is None else Path(out_dir) / DIRNAME
        self._fds = None  # (tokens.bin, pooled.bin) where this rank writes its batches
        self._shared = None  # under torchrun: every rank writes into the files (True), or rank 0 alone (False)
        self._identity = None  # the encoder's sha256 for the manifest, once hashed
        self._ahead, self._stop = None, threading.Event()  # encode_ahead's thread; set: abandon its captions
        if self.root is not None:
            from .textenc.identity import sha256_soon

            self.root.mkdir()
            self._fds = tuple(os.open(self.root / n, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644) for n in FILES)
            self._identity = identity or sha256_soon(Path(encoder.name))

    def stream(self, chunks: Iterator[Chunk]) -> Iterator[Chunk]:
        """The chunks unchanged, their captions encoded on the way (a caption seen before is not encoded again);
        after encode_ahead, only passed on."""
        for chunk in chunks:
            if self._ahead is None:
                self.add(chunk.text)
            yield chunk

    def encode_ahead(self, captions: list[str]) -> None:
        """Encode `captions`, every sample's in order, on a thread of its own while the samples are read. Under
        torchrun the ranks then share the encoding at their GPUs' pace: fed from rank 0's samples, the encoding of
        10,000 T5-XL-sized captions waited on its image decoding, 1.41× as fast on 4 GPUs as on one. The table is
        the same: the same captions in the same turns."""
        import torch

        device = torch.cuda.current_device() if torch.cuda.is_initialized() else None

        def encode() -> None:
            if device is not None:
                torch.cuda.set_device(device)  # the current device is per thread
            self.add(captions)

        pool = ThreadPoolExecutor(1, thread_name_prefix="text-encode")
        self._ahead = pool.submit(encode)
        pool.shutdown(wait=False)

    def add(self, captions: list[str]) -> None:
        for caption in captions:
            if caption not in self.ids:
                self.ids[caption] = len(self.ids)
                self.pending.append(caption)
        turn = self.batch_size * self.world  # one batch for every rank
        while len(self.pending) >= turn and not self._stop.is_set():
            ahead = self.pending[turn : 2 * turn] if len(self.pending) >= 2 * turn else []
            self._encode(self.pending[:turn], ahead)
            del self.pending[:turn]

    def _encode(self, captions: list[str], ahead: list[str] = ()) -> None:
        """Start encoding up to one batch per rank (this rank's: its `rank`-th) and tokenizing this rank's batches
        of the turn `ahead`, then write every rank's batches of the turn before, whose copies to the host ran while
        this turn's batches were queued (a copy waited for at once would leave the GPU idle while the next batch is
        tokenized). Tokenizing is most of a CLIP-L-sized batch's host time: on a thread, beside the replays, the
        copies and the writes."""
        t0 = time.perf_counter()
        count, mine = self._mine(captions)
        tokenized = [self._take_tokenized(b) for b in mine]
        for b in self._mine(ahead)[1]:
            self._tokenized.append((b, self._tokenizer.submit(self.encoder.tokenize, b)))
        started = (count, [self._start(b, t) for b, t in zip(mine, tokenized)])
        self._write(self._inflight)
        self._inflight = started
        self.seconds += time.perf_counter() - t0

    def _mine(self, captions: list[str]) -> tuple[int, list[list[str]]]:
        """(the turn's batch count, this rank's batches of it)."""
        bs = self.batch_size
        batches = [captions[k : k + bs] for k in range(0, len(captions), bs)]
        return len(batches), batches[self.rank :: self.world]

    def _take_tokenized(self, captions: list[str]):
        """encoder.tokenize(captions) where it was started ahead, else None (encode tokenizes them)."""
        while self._tokenized:
            done, future = self._tokenized.popleft()
            if done == captions:
                return future.result()
        return None

    def _write(self, turn: tuple[int, list] | None) -> None:
        if turn is None:
            return
        from . import textcache_ranks as ranks

        count, mine = turn[0], [self._collect(started) for started in turn[1]]
        own = range(count)  # the turn's batches that `mine` holds
        if self.world > 1 and self._shared is None:  # here, where every rank is at the same turn
            self._join_files(ranks.shared_folder(self.root))
        if self._shared:  # only the row counts travel
            lengths, own = ranks.turn_lengths(mine, count, self.batch_size), range(self.rank, count, self.world)
        else:
            if self.world > 1:  # to rank 0, which writes them
                mine = ranks.to_rank0(mine, count, self.batch_size, (self.encoder.dim, self.encoder.pooled_dim))
            lengths = [np.asarray([len(r) for r in rows], np.int64) for rows, _ in mine]
        first_row = self.offsets[-1] + np.cumsum([0, *(int(n.sum()) for n in lengths)])
        first_caption = len(self.offsets) - 1 + np.cumsum([0, *map(len, lengths)])
        for n in lengths:
            self.offsets += (self.offsets[-1] + np.cumsum(n)).tolist()
        if self._fds is not None and mine:  # by one thread, while the next batches encode
            while len(self._written) >= WRITES_IN_FLIGHT:
                self._written.popleft().result()  # its error raised here
            placed = [(b, int(first_row[k]), int(first_caption[k])) for k, b in zip(own, mine)]
            self._written.append(self._files.submit(self._place, placed))

    def _join_files(self, folder: Path | None) -> None:
        self._shared = folder is not None
        if self._shared and self._fds is None:
            self._fds = tuple(os.open(folder / n, os.O_WRONLY) for n in FILES)

    def _place(self, batches: list[tuple[tuple[list[np.ndarray], np.ndarray], int, int]]) -> None:
        """Each batch's rows and pooled vectors written where its first row and caption go: one system call each,
        from the arrays themselves (no copy of their bytes)."""
        tokens, pooled = self._fds
        for (rows, vectors), row, caption in batches:
            _write_at(tokens, rows, row * 2 * self.encoder.dim)
            _write_at(pooled, [vectors], caption * 2 * self.encoder.pooled_dim)

    def _start(self, captions: list[str], tokenized=None) -> tuple:
        """The batch encoded and its copy to the host queued: (tokens, lengths, pooled, the copy's event or None)."""
        import torch

        emb = self.encoder.encode(captions, tokenized)
        # as stored: 16-bit patterns; to the host without waiting (into pinned memory), a mask being a prefix
        parts = [_bits(emb.tokens, self.dtype), emb.mask.sum(1), _bits(emb.pooled, self.dtype)]
        if emb.tokens.is_cuda:
            parts = [t.to("cpu", non_blocking=True) for t in parts]
            event = torch.cuda.Event()
            event.record()
            return (*parts, event)
        return (*parts, None)

    @staticmethod
    def _collect(started: tuple) -> tuple[list[np.ndarray], np.ndarray]:
        """(each caption's valid token rows, the pooled vectors) on the host, once the copy is done."""
        tokens, lengths, pooled, event = started
        if event is not None:
            event.synchronize()
        tokens, pooled = tokens.numpy().astype("<i2", copy=False), pooled.numpy().astype("<i2", copy=False)
        return [row[:n] for row, n in zip(tokens, lengths.tolist())], pooled

    def finish(self) -> tuple[list[Path], dict]:
        """Flush and close; (the files written, relative to the output; the manifest's "text" entry but its files)."""
        if self._ahead is not None:
            self._ahead.result()  # its error raised here
        self.add([""])  # the empty caption: every rank adds it, so the ranks' turns stay the same
        if self.pending:
            self._encode(self.pending)
            self.pending = []
        self._write(self._inflight)
        self._inflight = None
        while self._written:
            self._written.popleft().result()
        if self._shared:
            from .textcache_ranks import barrier

            barrier()  # every rank's rows written before rank 0 describes the files
        self.abort()
        if self.root is None:
            return [], {}
        np.asarray(self.offsets, "<i8").tofile(self.root / OFFSETS)
        (self.root / CAPTIONS).write_text(json.dumps(list(self.ids), ensure_ascii=False))
        files = [Path(DIRNAME) / name for name in (CAPTIONS, TOKENS, OFFSETS, POOLED)]
        return files, self.describe()

    def describe(self) -> dict:
        from .textenc.identity import config_sha256

        enc = self.encoder
        return {
            "encoder": {
                "name": Path(enc.name).name,
                "kind": enc.kind,
                "config_sha256": config_sha256(Path(enc.name)),
                "sha256": self._identity.result(),
                "dim": int(enc.dim),
                "pooled_dim": int(enc.pooled_dim),
            },
            "dtype": self.dtype,
            "max_tokens": int(enc.max_tokens),
            "captions": len(self.ids),
            "empty_caption": self.ids.get(""),
            "tokens": int(self.offsets[-1]),
            "processes": self.world,  # the ranks that shared the encoding (torchrun)
            "writing_processes": self.world if self._shared else 1,
        }

    def abort(self) -> None:
        self._stop.set()
        if self._ahead is not None:
            wait([self._ahead])  # the batch it is on, then it stops
        self._files.shutdown(wait=True)
        self._tokenizer.shutdown(wait=True, cancel_futures=True)
        fds, self._fds = self._fds or (), None
        for fd in fds:
            os.close(fd)

    close = abort  # what the conversion's clean-up calls on helpers that are not format writers


def _write_at(fd: int, arrays: list[np.ndarray], offset: int) -> None:
    """The arrays' bytes one after another from `offset` of the file `fd`, with as few pwritev calls as the kernel
    allows."""
    views = [memoryview(np.ascontiguousarray(a)).cast("B") for a in arrays if a.size]
    while views:
        done = os.pwritev(fd, views[:1024], offset)  # IOV_MAX
        offset += done
        while views and done >= len(views[0]):
            done -= len(views.pop(0))
        if views and done:
            views[0] = views[0][done:]


def _dist() -> tuple[int, int]:
    import torch

    d = torch.distributed
    return (d.get_rank(), d.get_world_size()) if d.is_available() and d.is_initialized() else (0, 1)
