"""One-off A/B of LatentEncoder.stream variants inside the real conversion (`python harness.py VARIANT convert ...`,
run from the repository root): the stream as it was (one chunk encoded at a time in a thread), as it is (chunk k + 1
queued before chunk k is collected), and one chunk ahead only. Kept beside its results as the record of what ran."""

import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from dataprep.latents import encode as E
from dataprep.sources.base import Chunk


def old_encode(self, chunk):
    t0, bs = time.perf_counter(), self.batch_size
    starts = range(0, len(chunk), bs)
    mine = {s: self._encode(chunk.x[s : s + bs]) for k, s in enumerate(starts) if k % self.world == self.rank}
    queued = time.perf_counter() - t0
    mine = {s: v.cpu().numpy() for s, v in mine.items()}
    out = Chunk(np.concatenate([mine[s] for s in starts]), chunk.y, None, chunk.skipped)
    self.chunks.append((len(chunk), time.perf_counter() - t0, queued))
    return out


def old_stream(self, chunks):
    with ThreadPoolExecutor(1, thread_name_prefix="encode") as pool:
        pending = None
        for chunk in chunks:
            ahead = pool.submit(self.encode, chunk)
            if pending is not None:
                yield pending.result()
            pending = ahead
        if pending is not None:
            yield pending.result()


def one_ahead(self, chunks):
    self._last_end = None
    with ThreadPoolExecutor(1, thread_name_prefix="encode") as pool:
        queued = None
        for chunk in chunks:
            ahead = pool.submit(self.queue, chunk)
            if queued is not None:
                yield pool.submit(lambda f: self.collect(f.result()), queued).result()
            queued = ahead
        if queued is not None:
            yield self.collect(queued.result())


if __name__ == "__main__":
    variant = sys.argv.pop(1)
    if variant == "sequential":
        E.LatentEncoder.encode, E.LatentEncoder.stream = old_encode, old_stream
    elif variant == "one_ahead":
        E.LatentEncoder.stream = one_ahead
    else:
        assert variant == "pipelined"
    from dataprep.cli import cli

    t0 = time.perf_counter()
    try:
        cli.main(sys.argv[1:], standalone_mode=False)
    finally:
        print(f"AB {variant}: wall {time.perf_counter() - t0:.2f} s", file=sys.stderr)
