"""Compiled kernels kept between runs and machines: torch's portable compile cache, one file per run shape.

A fresh machine compiles the model from nothing: Dynamo traces it, AOTAutograd derives the backward graph, Inductor
generates the kernels and a compiler builds them (Triton on a GPU, a C++ compiler on the CPU), then autotuning picks
among variants. `torch.compiler.save_cache_artifacts()` gathers what AOTAutograd, Inductor and the autotuner produced
in this process, found in the local caches or made anew, into one blob; `load_cache_artifacts()` in a new process,
on any machine, puts them back into its local caches, so its compile finds them there instead of generating and
building them again. The artifacts hold for one torch build and one kind of device, so a file records both, is named by
them, and a file made elsewhere is left alone with a message: the run compiles anew and saves its own beside it. On
request the file holds Dynamo's traced program too (training.compile_cache). A GPU's Triton kernels also look for
their autotuning results in the local Inductor cache folder they were compiled in: the file records it, and a run
under another folder is told how to keep it.

The directory (`train --compile-cache`) defaults to $GPUFEED_COMPILE_CACHE, else ~/.cache/gpufeed/compile. What it
holds is code that runs when it is loaded (torch's artifacts are pickles): copy it to a new machine of the same GPU
and torch only from a machine you trust, as you would the program itself, never inside a data directory that travels.
It is read as an SSH key is (training.trusted): only this user's files, in folders no one else can write; anything
else is skipped with the reason, never handed to torch (whose loading copies the artifacts into its own local cache,
where later runs would find them), and the run compiles anew. Folders it creates are private (0700), files 0600.
"""

from __future__ import annotations

import hashlib
import json
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from common.atomic import remove_stale, written
from common.torch_private import inductor_dir

from .trusted import Untrusted, check_folder, make_private_dirs, open_trusted

FORMAT = "gpufeed-compile-cache-1"  # the first line of every file; bump when the layout changes
TRUST = "its files are code that runs when loaded, so only yours, in folders no one else can write, are read"


def environment(device: str) -> dict:
    """What the artifacts are valid for: the torch build and the device kind (their cache keys contain both)."""
    env = {"torch": torch.__version__, "python": platform.python_version()}
    if device.startswith("cuda"):
        index = torch.device(device).index or 0
        major, minor = torch.cuda.get_device_capability(index)
        env |= {
            "device": torch.cuda.get_device_name(index),
            "capability": f"{major}.{minor}",
            "cuda": torch.version.cuda,
        }
    else:
        env |= {"device": f"cpu ({platform.machine()})"}
    return env


def _digest(obj: dict) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _describe(env: dict) -> str:
    return f"torch {env.get('torch')} on {env.get('device')}"


@dataclass
class CompileCache:
    """One run shape's artifacts in `directory`: `load()` before the first compiled step, `save()` after it (and at
    the end, where more was compiled). `note` says what was found, for the run's log and summary."""

    directory: Path
    shape: dict  # what the compiled graphs depend on: model config, batch size, precision, compile mode, ranks
    device: str
    note: str = ""
    loaded: dict = field(default_factory=dict)  # artifact kind -> how many were loaded
    load_s: float = 0.0
    held: set = field(default_factory=set)  # (kind, key) of every artifact the file holds, as loaded or saved
    refused: str | None = None  # why the folder cannot be trusted: then nothing is read from it or written to it

    def __post_init__(self) -> None:
        self.env = environment(self.device)
        self.stem = f"{self.shape.get('model', 'model')}-{_digest(self.shape)}"
        self.path = self.directory / f"{self.stem}-{_digest(self.env)}.bin"

    def load(self) -> bool:
        """Put this shape's artifacts into the local caches; False (and `note` says why) where there are none here,
        or none this user can trust (training.trusted): a refused file never reaches torch."""
        t0 = time.perf_counter()
        try:
            check_folder(self.directory)
        except FileNotFoundError:
            self.note = f"none yet for this run shape in {self.directory}: compiling, then saving them there"
            return False
        except (Untrusted, OSError) as e:
            self.refused = str(e) if isinstance(e, Untrusted) else f"{self.directory}: {e.strerror or e}"
            self.note = f"not used: {self.refused}; {TRUST}; compiling anew, and saving nothing there"
            return False
        removed = remove_stale(self.directory, ".*.bin.tmp-*", "compile cache file")
        self.note = "".join(f"{line}; " for line in removed)
        try:
            header, payload = _read(self.directory, self.path.name)
        except FileNotFoundError:
            self.note += self._nothing_here()
            return False
        except Untrusted as e:
            self.note += f"{self.path} not loaded: {e}; {TRUST}; compiling anew, and replacing it"
            return False
        except (OSError, ValueError) as e:
            self.note += f"{self.path}: unreadable ({e}); compiling anew, and replacing it"
            return False
        if header["environment"] != self.env:
            self.note += (
                f"{self.path} was made with {_describe(header['environment'])}; this is "
                f"{_describe(self.env)}: compiling anew, and replacing it"
            )
            return False
        try:
            info = torch.compiler.load_cache_artifacts(payload)
        except Exception as e:  # a cache must never stop a run: the compile it would have saved is still possible
            info, why = None, f" ({type(e).__name__}: {e})"
        else:
            why = ""
        if info is None:
            self.note += f"{self.path}: torch could not load its artifacts{why}; compiling anew, and replacing it"
            return False
        self.loaded = {kind: len(keys) for kind, keys in info.artifacts.items() if keys}
        self.load_s = time.perf_counter() - t0
        self.held = _keys(info)
        kinds = ", ".join(f"{n} {kind}" for kind, n in self.loaded.items())
        self.note += f"loaded {kinds} artifacts from {self.path} in {self.load_s:.1f} s" + _moved(header)
        return True

    def _nothing_here(self) -> str:
        others = []
        for path in sorted(self.directory.glob(f"{self.stem}-*.bin")):
            try:
                others.append(_describe(_read(self.directory, path.name, header_only=True)[0]["environment"]))
            except (Untrusted, OSError, ValueError):
                continue
        if others:
            return (
                f"{self.directory} holds this model's kernels for {'; '.join(others)} only; this is "
                f"{_describe(self.env)}: compiling anew, saved beside them"
            )
        return f"none yet for this run shape in {self.directory}: compiling, then saving them there"

    def save(self) -> Path | None:
        """Write everything compiled or found in this process so far; None where it holds nothing new."""
        if self.refused:
            return None
        artifacts = torch.compiler.save_cache_artifacts()
        if artifacts is None or _keys(artifacts[1]) <= self.held:
            return None
        payload = artifacts[0]
        sha = hashlib.sha256(payload).hexdigest()
        header = {
            "format": FORMAT,
            "environment": self.env,
            "shape": self.shape,
            "sha256": sha,
            "bytes": len(payload),
            "saved": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "inductor_cache_dir": inductor_dir(),
        }
        make_private_dirs(self.directory)
        with written(self.path, mode=0o600) as tmp, open(tmp, "wb") as f:  # 0600: code only this user may write
            f.write(json.dumps(header).encode() + b"\n" + payload)
        self.held = _keys(artifacts[1])
        return self.path

    def to_dict(self) -> dict:
        return {
            "file": str(self.path),
            "note": self.note,
            "loaded": self.loaded,
            "load_s": round(self.load_s, 3),
            "refused": self.refused,
        }


def _moved(header: dict) -> str:
    """A warning where the artifacts were saved under another local Inductor cache than this process's, on a GPU. A
    Triton kernel restored from them looks for its autotuning results in the folder it was compiled in, so under
    another path it benchmarks every configuration again, a large part of a warm start (docs/BENCHMARKS.md, "Cold
    start")."""
    saved, here = header.get("inductor_cache_dir"), inductor_dir()
    if not saved or not here or saved == here or "capability" not in header["environment"]:
        return ""
    return (
        f"; they were compiled under {saved}, this run's Inductor cache is {here}, so Triton will benchmark its "
        f"kernels again: set TORCHINDUCTOR_CACHE_DIR={saved} to spare it"
    )


def _keys(info) -> set[tuple[str, str]]:
    return {(kind, key) for kind, keys in info.artifacts.items() for key in keys}


def _read(directory: Path, name: str, header_only: bool = False) -> tuple[dict, bytes]:
    """(header, payload) of a cache file; Untrusted where another user could have written it (nothing is read),
    ValueError naming what is wrong with it."""
    with open_trusted(directory, name) as f:
        first = f.readline(1 << 16)
        payload = b"" if header_only else f.read()
    try:
        header = json.loads(first)
    except ValueError:
        raise ValueError("not a gpufeed compile cache (no JSON header)") from None
    ours = isinstance(header, dict) and header.get("format") == FORMAT
    if not ours or not isinstance(header.get("environment"), dict):
        raise ValueError(f"not a {FORMAT} file")
    if not header_only and hashlib.sha256(payload).hexdigest() != header.get("sha256"):
        raise ValueError("its artifacts do not match their checksum (truncated or damaged)")
    return header, payload
