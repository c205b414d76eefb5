"""The eager encoder's forward replayed as one CUDA graph per input shape, for `dataprep convert --vae`.

Eager, a batch is hundreds of kernel launches, and each one releases and retakes the GIL. In a converting process the
GIL is busy: the decoding pool's threads receive decoded samples, the writers and the digest work on the chunk
before. The encoding thread then waits for the GIL more than for the GPU: an AudioLDM-shaped encoder on an H100 ran at
141 clips/s inside the conversion and at 376 on its own, with 19.1 of its 20.5 seconds spent queuing work. A replay is
one launch: the thread needs the GIL a few times per batch, and the GPU stays ahead of it.

The outputs are the graph's own tensors, overwritten by the next replay: use them (copy, stack, cast) before the
next call, as the encoder does."""

from __future__ import annotations

from collections.abc import Callable

import torch

Moments = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


class GraphedMoments:
    """`moments(x)` for CUDA inputs under bf16 autocast (or none), captured once per shape, dtype and layout."""

    def __init__(self, moments: Moments, autocast_dtype: torch.dtype | None) -> None:
        self.moments, self.dtype = moments, autocast_dtype
        self.graphs: dict[tuple, tuple[torch.Tensor, torch.cuda.CUDAGraph, tuple[torch.Tensor, torch.Tensor]]] = {}

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        key = (tuple(x.shape), x.dtype, x.stride())
        if key not in self.graphs:
            self.graphs[key] = self._capture(x)
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
        autocast = torch.autocast("cuda", self.dtype or torch.bfloat16, enabled=self.dtype is not None,
                                  cache_enabled=False)  # fmt: skip
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
