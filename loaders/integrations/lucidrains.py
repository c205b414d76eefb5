"""lucidrains' denoising-diffusion-pytorch `Trainer`, fed by a gpufeed backend instead of its folder DataLoader:

    trainer = Trainer(diffusion, "cifar10-jpg/train", train_batch_size=128, amp=True, calculate_fid=False)
    loader = use_gpufeed(trainer, "data/cifar10", backend="ffcv", workers=4)
    trainer.train()
    loader.close()

The Trainer draws batches with `next(trainer.dl).to(device)`, images in [0, 1] (its Dataset's ToTensor; the
diffusion model maps them to [-1, 1] itself), so the replacement is an endless generator of gpufeed batches mapped
back to [0, 1], already on the device. Each accelerate process reads its own shard (rank = process_index), and the
horizontal flips follow the Trainer's `augment_horizontal_flip`. Convert the Trainer's folder once with
`dataprep convert --input FOLDER --size IMAGE_SIZE --output DIR` (its Dataset resizes and centre-crops the same way).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch

from .. import LoaderError, build_loader


def use_gpufeed(trainer, data_dir: str | Path, backend: str = "hdf5", workers: int = 4, **options):
    """Replace `trainer.dl` with batches from gpufeed's `backend` over `data_dir`; returns the loader (close it)."""
    from dataprep.manifest import load_manifest

    shape = load_manifest(data_dir)["sample_shape"]  # (H, W, C) for images
    size = trainer.image_size if isinstance(trainer.image_size, (tuple, list)) else (trainer.image_size,) * 2
    want = (*size, trainer.channels)
    if tuple(shape) != want:
        raise LoaderError(
            f"{data_dir} holds {shape[0]}x{shape[1]} images with {shape[2]} channels, the Trainer wants "
            f"{want[0]}x{want[1]} with {want[2]}: convert its folder again with --size {size[0]}"
        )
    acc = trainer.accelerator
    flips = [t for t in getattr(trainer.ds.transform, "transforms", []) if type(t).__name__ == "RandomHorizontalFlip"]
    opts = dict(
        batch_size=trainer.batch_size,
        workers=workers,
        device=str(acc.device),
        shuffle=True,
        augment=bool(flips),
        drop_last=True,
        rank=acc.process_index,
        world_size=acc.num_processes,
    )
    loader = build_loader(backend, data_dir, **(opts | options))
    trainer.dl = _in_unit_range(loader)
    return loader


def _in_unit_range(loader) -> Iterator[torch.Tensor]:
    epoch = 0
    while True:
        loader.set_epoch(epoch)
        for batch in loader:
            yield batch.x.add(1.0).mul_(0.5)  # gpufeed's [-1, 1] back to the [0, 1] the Trainer's Dataset gives
        epoch += 1
