"""The stream loader's in-shard shuffle, with its blocks aligned to the shard's decode windows.

LitData decodes a shard's items a window of `batch_decode` rows at a time, windows counted from the shard's first item,
and keeps one decoded window. Its block shuffle (`item_shuffle_window`) counts blocks from the first item of the part
a worker reads instead. Where a shard is split between two workers or ranks (every epoch, at each boundary of their
parts), that part's blocks straddle two windows and its shuffled items alternate between them: each item read
decodes a whole window again (18,591 items decoded for an epoch of 1,200 in the test). Counting blocks from the shard's
first item, as the windows are, decodes each window a worker reads once."""

from __future__ import annotations

import numpy as np
from litdata import StreamingDataset
from litdata.streaming.shuffle import FullShuffle


class AlignedShuffle(FullShuffle):
    """FullShuffle's shard order and dealing; within a shard, blocks of `item_window` items counted from the shard's
    first item, the blocks in random order and the items within each (a function of seed, epoch and shard)."""

    def __call__(self, array: np.ndarray, num_chunks: int, current_epoch: int, chunk_index: int) -> list[int]:
        rng = np.random.RandomState([self.seed, num_chunks, current_epoch, chunk_index])
        items = np.asarray(array, dtype=np.int64)
        if len(items) < 2:
            return items.tolist()
        first = int(self.cache.get_chunk_intervals()[chunk_index][0])
        window = max(1, self.item_window)
        keys = (items - first) // window
        blocks = [items[keys == k] for k in np.unique(keys)]
        for block in blocks:
            rng.shuffle(block)
        rng.shuffle(blocks)
        return np.concatenate(blocks).tolist()


class AlignedStreamingDataset(StreamingDataset):
    """LitData's StreamingDataset with the aligned in-shard shuffle where it would use FullShuffle."""

    def _create_shuffler(self, cache):
        shuffler = super()._create_shuffler(cache)
        if type(shuffler) is FullShuffle:
            return AlignedShuffle(cache, shuffler.seed, shuffler.drop_last, item_window=shuffler.item_window)
        return shuffler
