"""The training loop's view of the data: the loader to use, and an endless stream over its epochs.

The stream's position (epoch, batches consumed in the epoch) is what a checkpoint stores: the loader contract
makes an epoch's order a function of (seed, epoch), so `set_epoch` plus skipping reproduces the exact next batch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from common.paths import OutsideError, inside
from dataprep.features import TRAIN_HOP as HOP
from dataprep.features import TRAIN_N_MELS as N_MELS

from .config import KIND_MODELS, TrainConfig
from .ddp import Dist
from .dit import DiTConfig


class DataError(ValueError):
    """The data side cannot start: no prepared directory, or no way to pick the loader."""


def read_manifest(data: Path | str) -> dict:
    from dataprep.remote import RemoteError, is_remote, load_remote_manifest

    if is_remote(data):
        try:
            return load_remote_manifest(data)
        except RemoteError as e:
            raise DataError(str(e)) from None
    try:
        path = inside(data, "manifest.json", source=data)  # one linking elsewhere would be read from there
    except OutsideError as e:
        raise DataError(str(e)) from None
    if not path.is_file():
        raise DataError(f"{path}: not found; --data must be a directory written by `dataprep convert`")
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: unreadable manifest ({e}); rerun `dataprep convert`") from None


@dataclass
class DataSpec:
    kind: str  # what the loader delivers: "image", "audio" (log-mel, or the wave under --vae) or "latent"
    model: str  # the model preset
    shape: tuple[int, int, int] | None  # the loader's samples (C, H, W); None: a loader given without prepared data
    classes: int  # labels in the data (DiT is class-conditional from 2)
    manifest: dict | None


def data_spec(cfg: TrainConfig, injected: bool = False) -> DataSpec:
    """What the data is and which preset trains on it. An injected loader may come without a prepared directory:
    then the shape is the preset's (None)."""
    from dataprep.remote import is_remote

    if injected and not is_remote(cfg.data) and not (Path(cfg.data) / "manifest.json").is_file():
        kind = "audio" if cfg.model == "ddpm_audio_mel" else "image"
        return DataSpec(kind, cfg.model or KIND_MODELS[kind], None, 0, None)
    manifest = read_manifest(cfg.data)
    kind = manifest.get("kind", "image")
    if kind == "latent":
        if cfg.vae:
            raise DataError(
                f"{cfg.data} holds latents, already encoded by {manifest['latent']['vae']['name']}; drop "
                "--vae (it encodes pixel or clip data inside the training step)"
            )
        shape = tuple(manifest["latent"]["shape"])
    elif kind == "audio":
        audio = manifest.get("audio") or {}
        shape = (audio.get("channels", 1), N_MELS, manifest["sample_shape"][-1] // HOP)
    else:
        height, width, channels = manifest["sample_shape"]
        shape = (channels, height, width)
    default = KIND_MODELS["latent" if cfg.vae else kind]
    return DataSpec(kind, cfg.model or default, shape, len(manifest["classes"]), manifest)


def check_fits(model, shape: tuple[int, ...], data: Path, model_name: str, kind: str) -> None:
    """Refuse a sample shape the model cannot take, before its first step fails deep inside it."""
    if isinstance(model, DiTConfig):
        if shape[-3:] == (model.in_channels, *model.input_size):
            return
        built = "x".join(map(str, (model.in_channels, *model.input_size)))
        raise DataError(
            f"{data}: samples are {'x'.join(map(str, shape[-3:]))} (channels x height x width), but "
            f"--model {model_name} was built for {built}"
        )
    down = 2 ** (len(model.ch_mult) - 1)  # each level halves height and width, and the up path must meet its skips
    channels, height, width = shape[-3:]
    if channels == model.in_channels and height % down == 0 and width % down == 0:
        return
    audio = ""
    if kind == "audio":
        audio = (
            f"; for audio the width is the log-mel frames, samples per clip // {HOP}: convert with a --clip-seconds "
            f"that gives a multiple of {down} frames (1.024 s at 16 kHz gives 64)"
        )
    takes = f"{model.in_channels} channels and a height and width divisible by {down}"
    raise DataError(
        f"{data}: samples are {channels}x{height}x{width} (channels x height x width), but --model "
        f"{model_name} takes {takes}{audio}"
    )


@dataclass
class LoaderChoice:
    backend: str
    workers: int
    pin_memory: bool
    reason: str


def choose_loader(cfg: TrainConfig, model: str, device: str, world: Dist) -> LoaderChoice:
    """The backend and its settings; for "fastest", bench's answer. Under torchrun every rank asks in a child process
    of its own, and the children form a group of their own on a port rank 0 chose: with no results for this rank count
    they measure together, as the training will run (bench.fastest.together). Every rank takes rank 0's answer."""
    from loaders.errors import too_small

    problem = too_small(read_manifest(cfg.data).get("count", 0), cfg.batch_size, world.world_size)
    if problem:  # before `bench fastest` measures, or a loader starts its workers, on data that gives no batch
        raise DataError(f"{cfg.data}: {problem}")
    if cfg.loader != "fastest":
        return LoaderChoice(cfg.loader, cfg.workers, cfg.pin_memory, "chosen with --loader")
    if str(cfg.data).startswith("s3://"):  # nothing to compare: no other loader reads object storage
        return LoaderChoice("stream", cfg.workers, cfg.pin_memory, "the only loader that reads s3:// data")
    if not world.enabled:
        return ask_bench(cfg, model, device)
    port = [_free_port() if world.main else None]
    torch.distributed.broadcast_object_list(port, src=0)
    # the children's own group: rank 0's child holds its store on rank 0's host (MASTER_ADDR), not torchrun's
    env = {"MASTER_PORT": str(port[0]), "TORCHELASTIC_USE_AGENT_STORE": "False"}
    picked = [ask_bench(cfg, model, device, world.world_size, env)]
    torch.distributed.broadcast_object_list(picked, src=0)
    return picked[0]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def ask_bench(cfg: TrainConfig, model: str, device: str, world_size: int = 1, env: dict | None = None) -> LoaderChoice:
    """`bench fastest --json` in a child process, as a user would run it: bench runs training loops to measure
    loaders, so training talks to bench through its command line, never by importing it (no import cycle). The
    child's progress (a short bench when there are no results) goes to this process's stderr; `env` is added to its
    environment."""
    import os
    import signal
    import subprocess
    import sys

    from common.stopping import Stopped

    cmd = [
        sys.executable,
        "-m",
        "bench",
        "fastest",
        "--json",
        "--data",
        str(cfg.data),
        "--model",
        model,
        "--batch-size",
        str(cfg.batch_size),
        "--nproc",
        str(world_size),
        "--device",
        device,
        "--precision",
        cfg.precision,
        "--compile" if cfg.compile else "--no-compile",
    ]
    child_env = {k: v for k, v in os.environ.items() if k != "TORCHELASTIC_ERROR_FILE"} | (env or {})
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=child_env)
    signum = {130: signal.SIGINT, -signal.SIGINT: signal.SIGINT, 143: signal.SIGTERM, -signal.SIGTERM: signal.SIGTERM}
    if out.returncode in signum:  # Ctrl-C reached bench too (one process group): the user stopped both
        raise Stopped(signum[out.returncode])
    if out.returncode != 0:
        raise DataError(
            f"`{' '.join(cmd[2:])}` failed (exit {out.returncode}, its error is above); pass --loader "
            f"with a backend name to train without it"
        )
    c = json.loads(out.stdout.strip().splitlines()[-1])
    return LoaderChoice(c["backend"], c["workers"], c["pin_memory"], c["reason"])


def open_loader(cfg: TrainConfig, choice: LoaderChoice, device: str, world: Dist, kind: str):
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
        rank=world.rank,
        world_size=world.world_size,
        representation="wave" if cfg.vae and kind == "audio" else "mel",  # --vae computes AudioLDM's own mel
        **({"cache_limit": cfg.cache_limit} if choice.backend == "stream" else {}),
    )


class EpochStream:
    """Endless iterator over a Loader: calls set_epoch at each epoch start and counts the position."""

    def __init__(self, loader, epoch: int = 0, position: int = 0) -> None:
        if len(loader) == 0:
            from loaders.errors import too_small

            count, opts = getattr(loader, "manifest", {}).get("count"), getattr(loader, "opts", None)
            said = opts and count is not None and too_small(count, opts.batch_size, opts.world_size)
            raise DataError(f"the loader yields no batches: {said or 'the dataset is smaller than one batch per rank'}")
        self.loader, self.epoch, self.position = loader, epoch, position
        self._it = None

    def start(self) -> None:
        """Begin the current epoch and skip the batches a checkpoint says were already consumed."""
        if hasattr(self.loader, "start_at") and self.position >= len(self.loader):  # saved after an epoch's last batch
            self.epoch, self.position = self.epoch + 1, 0
        self.loader.set_epoch(self.epoch)
        if self.position and hasattr(self.loader, "start_at"):  # a streaming loader skips without reading
            self.loader.start_at(self.position)
            self._it = iter(self.loader)
            return
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
