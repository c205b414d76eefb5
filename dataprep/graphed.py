"""An eager encoder's forward replayed as one CUDA graph per input shape: the autoencoder's (with AudioLDM's mel, or
the images' scaling and mirrors) for `dataprep convert --vae`, a text encoder's for `--text-encoder`.

Eager, a batch is hundreds of kernel launches, and each one releases and retakes the GIL. In a converting process the
GIL is busy: the decoding pool's threads receive decoded samples, the writers and the digest work on the chunk
before. The encoding thread then waits for the GIL more than for the GPU: an AudioLDM-shaped encoder ran at under half
its own rate inside the conversion, nearly all of its time spent queuing work (docs/BENCHMARKS.md, finding 6). A replay
is one launch: the thread needs the GIL a few times per batch, and the GPU stays ahead of it. Where a capture fails
(an operation this GPU or driver cannot capture), that shape runs eagerly, with a message.

The outputs are the graph's own tensors, overwritten by the next replay: use them (copy, stack, cast) before the
next call, as the encoders do."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import torch

Forward = Callable[..., tuple[torch.Tensor, ...]]
Captured = tuple[list[torch.Tensor], torch.cuda.CUDAGraph, tuple[torch.Tensor, ...]]  # inputs, graph, outputs


class Graphed:
    """`forward(*inputs)` for CUDA inputs under bf16 autocast (or none), captured once per inputs' shapes, dtypes and
    layouts; `forward` may prepare its inputs first."""

    def __init__(self, forward: Forward, autocast_dtype: torch.dtype | None, warm_each_shape: bool = True) -> None:
        """`warm_each_shape` False: only the first capture runs `forward` eagerly before (the lazy start of cuBLAS and
        the allocator), or `warm_soon` did, for a model with no per-shape tuning (no cuDNN autotuning of convolutions).
        """
        self.forward, self.dtype, self.warm_each_shape = forward, autocast_dtype, warm_each_shape
        self.graphs: dict[tuple, Captured | None] = {}  # None: the capture failed, those shapes run eagerly
        self.warmed, self.warm_s = False, 0.0  # seconds of eager warm-ups
        self._warming = None  # warm_soon's future

    def warm_soon(self, *xs: torch.Tensor) -> None:
        """Run the first eager warm-up on these inputs now, on a thread of its own (while a conversion lists and
        reads its input); the first capture waits for it."""
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(1, thread_name_prefix="graph-warm-up")
        self._warming = pool.submit(self._warm_on, xs)
        pool.shutdown(wait=False)

    def _warm_on(self, xs: tuple[torch.Tensor, ...]) -> None:
        with torch.cuda.device(xs[0].device):
            self._warm(xs, self._autocast())

    def __call__(self, *xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with torch.cuda.device(xs[0].device):  # the capture's stream and pool on the inputs' GPU, whatever this
            return self._call(xs)  # thread's device is

    def _call(self, xs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        key = tuple((tuple(x.shape), x.dtype, x.stride()) for x in xs)
        if key not in self.graphs:
            try:
                self.graphs[key] = self._capture(xs)
            except torch.OutOfMemoryError:
                raise  # the caller retries with smaller batches
            except RuntimeError as e:
                shapes = ", ".join(str(k[0]) for k in key)
                print(f"encode: no CUDA graph for inputs of shape {shapes} ({e}); encoding eagerly", file=sys.stderr)
                self.graphs[key] = None
        if self.graphs[key] is None:
            return self.forward(*xs)
        static_ins, graph, out = self.graphs[key]
        for static, x in zip(static_ins, xs):
            static.copy_(x)
        graph.replay()
        return out

    def reset(self) -> None:
        """Drop every graph and the memory it holds (before trying a smaller batch after running out of memory)."""
        self.graphs.clear()

    def _autocast(self):
        # autocast's cache of cast weights would be freed after capture while the graph still reads it
        return torch.autocast("cuda", self.dtype or torch.bfloat16, enabled=self.dtype is not None, cache_enabled=False)

    def _warm(self, xs: tuple[torch.Tensor, ...], autocast) -> None:
        """`forward` once, eagerly, outside any graph: cuDNN picks its algorithms, cuBLAS and the allocator start.
        Inside a conversion this costs more than the capture: every block it allocates, and empty_cache frees, waits
        for the batches already queued, and each operation retakes the GIL (T5-XL-sized captions: 1.6 of 5.6 s)."""
        t0 = time.perf_counter()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), autocast:
            self.forward(*xs)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.empty_cache()  # the warm-up's blocks back to the GPU: the graph's own pool needs as much again
        self.warmed, self.warm_s = True, self.warm_s + time.perf_counter() - t0

    def _capture(self, xs: tuple[torch.Tensor, ...]) -> Captured:
        static_ins = [x.clone() for x in xs]
        autocast = self._autocast()
        if self._warming is not None:
            self._warming.result()  # its error raised here
            self._warming = None
        if self.warm_each_shape or not self.warmed:
            self._warm(static_ins, autocast)
        graph = torch.cuda.CUDAGraph()
        # thread-local: the converting process's other threads never touch this GPU, but must not break the capture
        with torch.cuda.graph(graph, capture_error_mode="thread_local"), autocast:
            out = self.forward(*static_ins)
        return static_ins, graph, out
