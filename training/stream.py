"""The training loop's view of the data: the loader to use, and an endless stream over its epochs.

The stream's position (epoch, batches consumed in the epoch) is what a checkpoint stores: the loader contract
makes an epoch's order a function of (seed, epoch), so `set_epoch` plus skipping reproduces the exact next batch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from .config import TrainConfig
from .ddp import Dist


class DataError(ValueError):
    """The data side cannot start: no prepared directory, or no way to pick the loader."""


KIND_MODELS = {"image": "ddpm_cifar10", "audio": "ddpm_audio_mel"}  # the default --model per manifest kind


def read_manifest(data: Path) -> dict:
    path = Path(data) / "manifest.json"
    if not path.is_file():
        raise DataError(f"{path}: not found; --data must be a directory written by `dataprep convert`")
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: unreadable manifest ({e}); rerun `dataprep convert`") from None


def data_kind(cfg: TrainConfig, injected: bool = False) -> tuple[str, str]:
    """("image" | "audio", model preset name). An injected loader may come without a prepared directory."""
    if injected and not (Path(cfg.data) / "manifest.json").is_file():
        kind = "audio" if cfg.model == "ddpm_audio_mel" else "image"
    else:
        kind = read_manifest(cfg.data).get("kind", "image")
    return kind, cfg.model or KIND_MODELS[kind]


@dataclass
class LoaderChoice:
    backend: str
    workers: int
    pin_memory: bool
    reason: str


def choose_loader(cfg: TrainConfig, model: str, device: str, info: Dist) -> LoaderChoice:
    """The backend and its settings; for "fastest", rank 0 asks bench and every rank uses its answer."""
    if cfg.loader != "fastest":
        return LoaderChoice(cfg.loader, cfg.workers, cfg.pin_memory, "chosen with --loader")
    picked = [None]
    if info.main:
        from bench.fastest import choose

        c = choose(cfg.data, device=device, model=model, batch_size=cfg.batch_size, precision=cfg.precision,
                   compile=cfg.compile)  # fmt: skip
        picked = [LoaderChoice(c.backend, c.workers, c.pin_memory, c.reason)]
    if info.enabled:
        torch.distributed.broadcast_object_list(picked, src=0)
    return picked[0]


def open_loader(cfg: TrainConfig, choice: LoaderChoice, device: str, info: Dist):
    from loaders import build_loader

    return build_loader(
        choice.backend,
        cfg.data,
        batch_size=cfg.batch_size,
        workers=choice.workers,
        pin_memory=choice.pin_memory,
        device=device,
        augment=cfg.augment,
        seed=cfg.seed,
        rank=info.rank,
        world_size=info.world_size,
        representation=cfg.representation,
    )


class EpochStream:
    """Endless iterator over a Loader: calls set_epoch at each epoch start and counts the position."""

    def __init__(self, loader, epoch: int = 0, position: int = 0) -> None:
        if len(loader) == 0:
            raise DataError("the loader yields no batches: the dataset is smaller than one batch per rank")
        self.loader, self.epoch, self.position = loader, epoch, position
        self._it = None

    def start(self) -> None:
        """Begin the current epoch and skip the batches a checkpoint says were already consumed."""
        self.loader.set_epoch(self.epoch)
        self._it = iter(self.loader)
        for _ in range(self.position):
            next(self._it)

    def __iter__(self) -> EpochStream:
        return self

    def __next__(self):
        if self._it is None:
            self.start()
        try:
            batch = next(self._it)
        except StopIteration:
            self.epoch, self.position = self.epoch + 1, 0
            self.start()
            batch = next(self._it)
        self.position += 1
        return batch
