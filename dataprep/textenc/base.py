"""The text encoder contract: what an encoder returns for a list of captions, and the per-batch padding that turns
captions' valid tokens (as a cache stores them) back into one batch of that shape."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch


class TextEncoderError(ValueError):
    """A text encoder cannot be loaded or built as asked; the message names the folder and what to do instead."""


@dataclass
class TextEmbeddings:
    tokens: torch.Tensor  # (n, L, D) the encoder's last hidden states, L the longest caption of this batch
    mask: torch.Tensor  # (n, L) bool: True on a caption's valid tokens (its first `length` positions)
    pooled: torch.Tensor  # (n, P) one vector per caption (CLIP, CLAP: the projected text embedding)

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> TextEmbeddings:
        """On `device`, tokens and pooled as `dtype` (unchanged when None); the mask stays bool."""
        return TextEmbeddings(
            self.tokens.to(device, dtype, non_blocking=True),
            self.mask.to(device, non_blocking=True),
            self.pooled.to(device, dtype, non_blocking=True),
        )

    @property
    def lengths(self) -> torch.Tensor:
        """(n,) int64: each caption's number of valid tokens."""
        return self.mask.sum(1)


def pad(
    valid: Sequence[np.ndarray | torch.Tensor], pooled: np.ndarray | torch.Tensor, pin_memory: bool = False
) -> TextEmbeddings:
    """Captions' valid tokens, each (L_i, D), as one batch padded with zeros to the longest of this batch (per batch,
    not per dataset: a batch of short captions costs short attention); `pooled` (n, P) is stacked as it is. With
    `pin_memory` the batch is built in pinned host memory, so its copy to a GPU waits for nothing queued there."""
    if len(valid) != len(pooled):
        raise ValueError(f"{len(valid)} token arrays but {len(pooled)} pooled vectors: one of each per caption")
    rows = [torch.as_tensor(v) for v in valid]
    dims = {tuple(r.shape[1:]) for r in rows}
    if len(dims) > 1 or any(r.dim() != 2 for r in rows):
        shapes = [tuple(r.shape) for r in rows]
        raise ValueError(f"token arrays must all be (length, D) with one D; got shapes {shapes}")
    dtype = rows[0].dtype if rows else torch.float32
    flat = torch.cat([r.to(dtype) for r in rows]) if rows else torch.zeros(0, 0)
    return pad_flat(flat, [len(r) for r in rows], pooled, pin_memory)


def pad_flat(
    flat: torch.Tensor, lengths: Sequence[int] | np.ndarray, pooled: np.ndarray | torch.Tensor, pin_memory: bool = False
) -> TextEmbeddings:
    """pad() of captions whose valid tokens come one caption after another in `flat` (sum(lengths), D), as a cache
    stores them: a few whole-batch operations, not two per caption, since a loader runs this in the training
    process for every batch."""
    lengths = torch.as_tensor(np.asarray(lengths, np.int64))
    n, longest = len(lengths), int(lengths.max()) if len(lengths) else 0
    valid = torch.arange(longest)[None, :] < lengths[:, None]
    tokens = torch.zeros(n, longest, flat.shape[1], dtype=flat.dtype, pin_memory=pin_memory)
    tokens[valid] = flat
    mask = torch.empty(n, longest, dtype=torch.bool, pin_memory=pin_memory).copy_(valid)
    pooled = torch.as_tensor(pooled)
    return TextEmbeddings(tokens, mask, pooled.pin_memory() if pin_memory else pooled)


class TextEncoder:
    """Captions -> TextEmbeddings. `dim`: D of the tokens; `pooled_dim`: P; `max_tokens`: longer captions are cut."""

    name: str  # the folder it was loaded from, as given
    kind: str  # "clip", "t5" or "clap": the registry's name for it
    dim: int
    pooled_dim: int
    max_tokens: int

    def encode(self, captions: list[str], tokenized=None) -> TextEmbeddings:
        """Embeddings of `captions` on the encoder's device, valid tokens marked by the mask, padded to the longest;
        `tokenized`: what tokenize(captions) gave, where it ran already."""
        raise NotImplementedError(f"{type(self).__name__} must define encode(captions)")

    def tokenize(self, captions: list[str]):
        """The host's share of encode(captions), which a thread may run while the GPU encodes the batch before; its
        result goes back to encode. None: this encoder has no such share."""
        return None

    def use_cuda_graphs(self, batch_size: int | None = None) -> None:
        """Encode as CUDA graph replays from now on, where the encoder can (on a GPU); else stay eager. `batch_size`:
        what the batches will hold, to prepare for them now."""
