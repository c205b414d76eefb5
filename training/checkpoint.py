"""RUN_DIR/ckpt.pt: everything needed to continue a run exactly where it stopped.

The data position is (epoch, batches consumed in that epoch): on resume the loader is rebuilt, `set_epoch(epoch)`
reproduces that epoch's order (a function of seed and epoch), the consumed batches are skipped, and the RNG
states saved here are restored after the skip, so the next batch and every noise draw match an uninterrupted run.
Not with the `dali` loader, whose reader draws its own order: a resumed DALI run says so and goes on with a different
(equally shuffled) order.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
import torch

from dataprep.paths import OutsideError, inside

CKPT_NAME = "ckpt.pt"
RUN_FIX = "restore a good copy or start a new --out"
FORMAT = "gpufeed-train-ckpt-1"  # bump when the layout changes; older files then fail with a clear message
# resuming with a different value is refused: it would not take effect, or not cleanly
MUST_MATCH = {
    "batch_size": "it fixes the data order",
    "seed": "it fixes the data order",
    "world_size": "it fixes the data order",
    "lr": "the optimizer and schedule restore the saved one",
    "precision": "fp16 saves a loss scaler that bf16 and fp32 do not have",
}


class CheckpointError(Exception):
    pass


def capture_rng() -> dict:
    """torch (CPU and every CUDA device), numpy and python RNG states, in types `weights_only` loading accepts."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached],
        "python": random.getstate(),
    }


def restore_rng(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    random.setstate(state["python"])


def _plain(obj: dict) -> dict:
    """JSON round trip, so tuples and lists (or Paths and strings) compare equal."""
    return json.loads(json.dumps(obj, default=str))


def save_checkpoint(path: Path, state: dict) -> None:
    """Write `state` to `path` atomically: a crash mid-write leaves the previous checkpoint intact."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        torch.save({"format": FORMAT, **state}, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def load_checkpoint(path: Path, *, model_config: dict, train_config: dict) -> dict:
    """Read and validate a checkpoint; any problem is a CheckpointError saying what is wrong and what to do."""
    path = Path(path)
    try:  # a run directory can be copied too: a ckpt.pt linking elsewhere would load someone else's file
        inside(path.parent, path.name, source=path.parent, what="run directory", fix=RUN_FIX)
    except OutsideError as e:
        raise CheckpointError(str(e)) from None
    if not path.is_file():
        raise CheckpointError(f"{path}: no checkpoint to resume from; run without --resume to start a new run")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated zip, garbage bytes, unpickling refusal: all mean "not a usable file"
        raise CheckpointError(
            f"{path}: not a readable checkpoint ({type(e).__name__}: {str(e)[:200]}); "
            "it may be truncated or from another program — restore a good copy or start a new --out"
        ) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(f"{path}: checkpoint format {found!r}, expected {FORMAT!r}")
    saved, wanted = _plain(state["model_config"]), _plain(model_config)
    if saved != wanted:
        diff = {
            k: (saved.get(k), wanted.get(k)) for k in sorted(set(saved) | set(wanted)) if saved.get(k) != wanted.get(k)
        }
        raise CheckpointError(
            f"{path}: saved for a different model (field: saved vs requested) {diff}; "
            f"pass --model {state['train_config'].get('model')} or start a new --out"
        )
    for key, why in MUST_MATCH.items():
        if state["train_config"].get(key) != train_config.get(key):
            raise CheckpointError(
                f"{path}: saved with {key}={state['train_config'].get(key)}, now {train_config.get(key)}; "
                f"resume with the same {key} ({why}) or start a new --out"
            )
    return state


class StopOnSignal:
    """Turns SIGINT/SIGTERM into a flag the loop polls, so it can checkpoint and exit between steps.

    A second signal restores the default behaviour, so a stuck run can still be killed."""

    SIGNALS = ("SIGINT", "SIGTERM")

    def __init__(self) -> None:
        self.received: str | None = None
        self._previous: dict = {}

    def _handle(self, signum, frame) -> None:
        import signal

        self.received = signal.Signals(signum).name
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def __enter__(self) -> StopOnSignal:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():  # signal.signal only works there
            for name in self.SIGNALS:
                sig = getattr(signal, name)
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        import signal

        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
