"""The eager encoder's forward, with the preparation of its input (AudioLDM's mel, or the images' scaling and mirrors),
replayed as one CUDA graph per input shape, for `dataprep convert --vae`.

Eager, a batch is hundreds of kernel launches, and each one releases and retakes the GIL. In a converting process the
GIL is busy: the decoding pool's threads receive decoded samples, the writers and the digest work on the chunk
before. The encoding thread then waits for the GIL more than for the GPU: an AudioLDM-shaped encoder ran at under half
its own rate inside the conversion, nearly all of its time spent queuing work (docs/BENCHMARKS.md, finding 6). A replay
is one launch: the thread needs the GIL a few times per batch, and the GPU stays ahead of it. Where a capture fails
(an operation this GPU or driver cannot capture), that shape runs eagerly, with a message.

The outputs are the graph's own tensors, overwritten by the next replay: use them (copy, stack, cast) before the
next call, as the encoder does."""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch

Moments = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
Captured = tuple[torch.Tensor, torch.cuda.CUDAGraph, tuple[torch.Tensor, torch.Tensor]]  # input, graph, outputs


class GraphedMoments:
    """`moments(x)` for CUDA inputs under bf16 autocast (or none), captured once per shape, dtype and layout; `moments`
    may prepare its input first."""

    def __init__(self, moments: Moments, autocast_dtype: torch.dtype | None) -> None:
        self.moments, self.dtype = moments, autocast_dtype
        self.graphs: dict[tuple, Captured | None] = {}  # None: the capture failed, that shape runs eagerly

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.cuda.device(x.device):  # the capture's stream and pool on x's GPU, whatever this thread's device is
            return self._call(x)

    def _call(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        key = (tuple(x.shape), x.dtype, x.stride())
        if key not in self.graphs:
            try:
                self.graphs[key] = self._capture(x)
            except torch.OutOfMemoryError:
                raise  # the caller retries with smaller batches
            except RuntimeError as e:
                print(
                    f"encode: no CUDA graph for inputs of shape {key[0]} ({e}); encoding them eagerly", file=sys.stderr
                )
                self.graphs[key] = None
        if self.graphs[key] is None:
            return self.moments(x)
        static_in, graph, out = self.graphs[key]
        static_in.copy_(x)
        graph.replay()
        return out

    def reset(self) -> None:
        """Drop every graph and the memory it holds (before trying a smaller batch after running out of memory)."""
        self.graphs.clear()

    def _capture(self, x: torch.Tensor):
        static_in = x.clone()
        # autocast's cache of cast weights would be freed after capture while the graph still reads it
        autocast = torch.autocast(
            "cuda", self.dtype or torch.bfloat16, enabled=self.dtype is not None, cache_enabled=False
        )
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), autocast:
            self.moments(static_in)  # warm-up outside the graph: cuDNN chooses its algorithms, the allocator its blocks
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.empty_cache()  # the warm-up's blocks back to the GPU: the graph's own pool needs as much again
        graph = torch.cuda.CUDAGraph()
        # thread-local: the converting process's other threads never touch this GPU, but must not break the capture
        with torch.cuda.graph(graph, capture_error_mode="thread_local"), autocast:
            out = self.moments(static_in)
        return static_in, graph, out
