"""The caption writer under torchrun: how the ranks' batches of caption embeddings reach the table's files, over the
ranks' gloo group (common.ranks.host_group).

Where every rank sees rank 0's output folder (one host, or a shared file system), each rank writes its own batches
into the table's files at their places, and the ranks exchange only each caption's row count (`turn_lengths`).
Elsewhere the batches travel to rank 0, which writes them (`to_rank0`): three tensors a batch, a header of int64 (the
caption count, the row count, each caption's rows, padded to the batch size), the rows one after another and the
pooled vectors, so rank 0 allocates each before it arrives. Pickled (`gather_object`), 4 GPUs encoded T5-XL-sized
captions (4 KiB a token) 1.73× as fast as one; sent raw, 2.95×; and rank 0 still received 0.9 GB of 1.2 GB alone."""

from __future__ import annotations

import secrets
from pathlib import Path

import numpy as np

Batch = tuple[list[np.ndarray], np.ndarray]  # (each caption's valid token rows (n_i, D), pooled (B, P)): <i2


def shared_folder(root: Path | None) -> Path | None:
    """Rank 0's `root` (the other ranks pass None) where every rank can write into it, else None. Every rank calls
    this at the same point: rank 0 leaves a mark with a name of its own there, and every rank looks for it."""
    import torch
    import torch.distributed as dist

    from common.ranks import host_group

    group, rank = host_group(), dist.get_rank()
    box = [None]
    if rank == 0:
        mark = Path(root).resolve() / f".rank0-{secrets.token_hex(8)}"
        mark.touch()
        box = [str(mark)]
    dist.broadcast_object_list(box, src=0, group=group)
    mark = Path(box[0])
    seen = torch.tensor([int(mark.is_file())])
    dist.all_reduce(seen, dist.ReduceOp.MIN, group=group)  # returns once every rank has looked
    if rank == 0:
        mark.unlink()
    return mark.parent if seen.item() else None


def turn_lengths(mine: list[Batch], count: int, batch_size: int) -> list[np.ndarray]:
    """Each caption's row count for every one of a turn's `count` batches, in order, at every rank (rank r holds
    batches r, r + world, ...)."""
    import torch
    import torch.distributed as dist

    from common.ranks import host_group

    world = dist.get_world_size()
    per = -(-count // world)
    table = np.zeros((per, 1 + batch_size), np.int64)  # a row per batch: its caption count, then each one's rows
    for k, (rows, _) in enumerate(mine):
        table[k, 0], table[k, 1 : 1 + len(rows)] = len(rows), [len(r) for r in rows]
    parts = [torch.empty(per, 1 + batch_size, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(parts, torch.from_numpy(table), group=host_group())
    return [(t := parts[k % world][k // world].numpy())[1 : 1 + t[0]] for k in range(count)]


def to_rank0(mine: list[Batch], count: int, batch_size: int, dims: tuple[int, int]) -> list[Batch]:
    """A turn's `count` batches, rank r's being batches r, r + world, ..., in order at rank 0 ([] on the others)."""
    import torch.distributed as dist

    from common.ranks import host_group

    rank, world, group = dist.get_rank(), dist.get_world_size(), host_group()
    if rank > 0:
        send(mine, batch_size, group)
        return []
    parts = [mine] + [receive(r, len(range(r, count, world)), batch_size, dims, group) for r in range(1, world)]
    return [parts[k % world][k // world] for k in range(count)]


def send(batches: list[Batch], batch_size: int, group) -> None:
    """This rank's batches of a turn to rank 0, in order; returns once rank 0 has taken them."""
    import torch
    import torch.distributed as dist

    for rows, pooled in batches:
        lengths = [len(r) for r in rows]
        header = np.zeros(2 + batch_size, np.int64)
        header[:2], header[2 : 2 + len(lengths)] = (len(rows), sum(lengths)), lengths
        for a in (header, np.concatenate(rows), pooled):
            dist.send(torch.from_numpy(np.ascontiguousarray(a)), 0, group=group)


def receive(src: int, count: int, batch_size: int, dims: tuple[int, int], group) -> list[Batch]:
    """`count` batches sent by rank `src` with `send`."""
    import torch
    import torch.distributed as dist

    dim, pooled_dim = dims
    got = []
    for _ in range(count):
        header = torch.empty(2 + batch_size, dtype=torch.int64)
        dist.recv(header, src, group=group)
        n, total, lengths = int(header[0]), int(header[1]), header[2:].tolist()
        flat = torch.empty(total, dim, dtype=torch.int16)
        pooled = torch.empty(n, pooled_dim, dtype=torch.int16)
        for t in (flat, pooled):
            dist.recv(t, src, group=group)
        got.append((np.split(flat.numpy(), np.cumsum(lengths[:n])[:-1]), pooled.numpy()))
    return got


def barrier() -> None:
    """Every rank's writes done before rank 0 closes the table and hashes its files."""
    import torch.distributed as dist

    from common.ranks import host_group

    dist.barrier(group=host_group())
