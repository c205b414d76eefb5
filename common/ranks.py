"""Ranks under torchrun: one process group with each rank on its own GPU, and every rank ended promptly when one fails,
dies or stops answering.

torchrun ends the other ranks of its host once one has exited with an error. Two cases escape it: a rank whose error
leaves it unable to exit (a thread blocked in a collective, an NCCL teardown waiting for peers that already left), and
a rank torchrun cannot see (on another host, or stopped rather than killed): the others then wait in their next
collective until its timeout (NCCL ten minutes, gloo thirty). So here:
- a rank that fails says so, naming itself, tears its group down without waiting for its peers, and exits within
  EXIT_GRACE_S however its threads are stuck (its own error still comes first, as usual);
- every rank adds to a heartbeat counter in the rendezvous store every BEAT_S seconds from a thread, and watches the
  others' counters: a rank whose counter has not moved for GPUFEED_PEER_TIMEOUT seconds (killed, stopped, its host
  gone), or a store that has not answered for as long (the host of rank 0's torchrun gone), ends this rank with a
  message naming it. A rank that leaves normally marks its counter done first, so a slower peer's last work (a
  checkpoint, the compile cache) is never mistaken for a silence.

Collectives wait GPUFEED_DIST_TIMEOUT seconds (default 600) before NCCL's watchdog or gloo gives up on a peer that is
alive but stuck; NCCL's asynchronous error handling then tears the process down (TORCH_NCCL_ASYNC_ERROR_HANDLING=3, the
default set explicitly: the rank exits instead of hanging on its next collective)."""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
from datetime import timedelta

BEAT_S = 2.0  # heartbeat period: a store operation per peer, so a few per second on a host of 8
PEER_TIMEOUT_S = 30.0  # a peer silent this long is gone: well past any pause of a live process's threads
EXIT_GRACE_S = 10.0  # a failing rank exits by then even if a thread or the teardown is stuck
DIST_TIMEOUT_S = 600.0  # a collective waits this long for a live peer (first compiles, `--loader fastest` included)
DONE = 1 << 40  # added to a rank's counter when it leaves normally
FAILED_EXIT = 1


def world() -> tuple[int, int, int]:
    """(rank, world size, local rank) as torchrun set them; (0, 1, 0) in a plain process."""
    env = os.environ
    return int(env.get("RANK", "0")), int(env.get("WORLD_SIZE", "1")), int(env.get("LOCAL_RANK", "0"))


def rank_device(device: str) -> str:
    """The device of this rank: under torchrun `cuda` (or any cuda:N) is cuda:LOCAL_RANK, one GPU per rank."""
    rank, size, local = world()
    return f"cuda:{local}" if device.startswith("cuda") and size > 1 else device


def _seconds(name: str, default: float) -> float:
    value = os.environ.get(name)
    try:
        seconds = float(value) if value else default
    except ValueError:
        raise ValueError(f"${name}={value!r}: a number of seconds, e.g. {default:.0f}") from None
    if seconds <= 0:
        raise ValueError(f"${name}={value!r}: must be positive")
    return seconds


def join(device: str) -> _Watch:
    """Join the process group of torchrun's ranks (NCCL bound to `device` on a GPU, gloo on the CPU), and start
    watching the other ranks. `device` is this rank's own (rank_device); it becomes the current device of the calling
    thread (a thread of its own must set it again: CUDA's current device is per thread)."""
    import torch
    import torch.distributed as dist

    timeout = timedelta(seconds=_seconds("GPUFEED_DIST_TIMEOUT", DIST_TIMEOUT_S))
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.set_device(device)
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")
        # device_id: the communicator is made now, on this rank's GPU, not later on whatever device is current in
        # the thread of the first collective
        dist.init_process_group("nccl", timeout=timeout, device_id=torch.device(device))
    else:
        dist.init_process_group("gloo", timeout=timeout)
    # made here, where every rank passes in the same order (a group made later, beside other collectives, can wait
    # for ranks that are waiting in those)
    _host.append(dist.new_group(backend="gloo", timeout=timeout) if cuda else None)
    watch = _Watch(
        dist.distributed_c10d._get_default_store(),
        dist.get_rank(),
        dist.get_world_size(),
        _seconds("GPUFEED_PEER_TIMEOUT", PEER_TIMEOUT_S),
    )
    watch.start()
    return watch


_host: list = []  # join's gloo group, while joined


def host_group():
    """A gloo group of every rank, for Python objects that live on the host (batches of caption embeddings, the
    steps' messages): an object collective on NCCL copies them through the GPU, behind the work already queued there.
    None, the default group, where that is gloo already."""
    if not _host:
        raise RuntimeError("host_group() is for a process that joined the ranks' group (ranks.join)")
    return _host[0]


def leave(watch: _Watch | None, error: BaseException | None = None) -> None:
    """Leave the group joined by `join`. After an error, say which rank failed and why, tear the group down without
    waiting for peers, and make sure this process exits within EXIT_GRACE_S (its own error is reported first)."""
    import torch.distributed as dist

    _host.clear()
    if watch is not None:
        watch.stop(done=error is None)
    if error is not None:
        rank = dist.get_rank() if dist.is_initialized() else world()[0]
        what = f"{type(error).__name__}: {error}".strip().splitlines()[0][:300] if str(error) else type(error).__name__
        print(f"rank {rank} failed ({what}); stopping every rank", file=sys.stderr, flush=True)
        _exit_soon(EXIT_GRACE_S)
    if not dist.is_initialized():
        return
    gc.collect()  # DDP's wrapper, in a reference cycle, holds the group: freed now, not at the interpreter's shutdown
    if error is not None and dist.get_backend() == "nccl":
        dist.distributed_c10d._abort_process_group()  # no waiting for peers that may be gone
    else:
        dist.destroy_process_group()


def _exit_soon(seconds: float) -> None:
    def end() -> None:
        time.sleep(seconds)
        sys.stderr.flush()
        os._exit(FAILED_EXIT)

    threading.Thread(target=end, name="exit-after-failure", daemon=True).start()


class _Watch:
    """Two threads: one beats this rank's counter and reads the others' (ending the process when one stops), one ends
    it when the store itself stops answering (a store operation on a host that vanished blocks, it does not fail)."""

    def __init__(self, store, rank: int, size: int, silent_s: float) -> None:
        self.store, self.rank, self.size, self.silent_s = store, rank, size, silent_s
        self._stop = threading.Event()
        self._answered = time.monotonic()  # when the store last answered a whole round
        self._threads = [
            threading.Thread(target=f, name=f"rank-{n}", daemon=True)
            for n, f in (("heartbeat", self._beat), ("store-watch", self._watch_store))
        ]

    @staticmethod
    def key(rank: int) -> str:
        return f"gpufeed/heartbeat/{rank}"

    def start(self) -> None:
        self.store.add(self.key(self.rank), 1)
        for t in self._threads:
            t.start()

    def stop(self, done: bool) -> None:
        self._stop.set()
        if done:
            try:
                self.store.add(self.key(self.rank), DONE)
            except Exception:  # the store's host has finished already: nobody is left to watch this rank
                pass

    def _beat(self) -> None:
        seen = {r: (-1, time.monotonic()) for r in range(self.size) if r != self.rank}  # counter, when it last moved
        while not self._stop.wait(BEAT_S):
            try:
                self.store.add(self.key(self.rank), 1)
                counts = {r: self.store.add(self.key(r), 0) for r in seen}
            except Exception:  # judged by _watch_store after silent_s: a store held by a rank that has just finished
                continue  # (a group made without torchrun's agent) goes away while the others leave too
            now = self._answered = time.monotonic()
            for r, count in counts.items():
                if count >= DONE:
                    del seen[r]  # left normally: its last beat is its last
                elif count != seen[r][0]:
                    seen[r] = (count, now)
                elif now - seen[r][1] > self.silent_s:
                    self._fail(
                        f"rank {r} has not answered for {now - seen[r][1]:.0f} s (killed, stopped, or its host is gone)"
                    )

    def _watch_store(self) -> None:
        while not self._stop.wait(BEAT_S):
            if time.monotonic() - self._answered > self.silent_s:
                self._fail(
                    f"the rendezvous store has not answered for {self.silent_s:.0f} s: the host of the "
                    "rendezvous endpoint (rank 0's torchrun) is gone or its network is down"
                )

    def _fail(self, why: str) -> None:
        if self._stop.is_set():  # leaving already: its own way out
            return
        print(
            f"rank {self.rank}: {why}; stopping this rank (GPUFEED_PEER_TIMEOUT={self.silent_s:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
        os._exit(FAILED_EXIT)
