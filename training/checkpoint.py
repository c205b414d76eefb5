"""RUN_DIR/ckpt.pt: everything needed to continue a run exactly where it stopped.

The data position is (epoch, batches consumed in that epoch): on resume the loader is rebuilt, `set_epoch(epoch)`
reproduces that epoch's order (a function of seed and epoch), the consumed batches are skipped, and the RNG
states saved here are restored after the skip, so the next batch and every noise draw match an uninterrupted run.
Not with the `dali` loader, whose reader draws its own order: a resumed DALI run says so and goes on with a different
(equally shuffled) order. The file carries the sha256 of its contents, checked as it loads: damage on disk is named,
never trained on.
"""

from __future__ import annotations

import errno
import hashlib
import json
import random
from pathlib import Path

import numpy as np
import torch

from common.atomic import remove_stale, stale_pattern, written
from common.paths import OutsideError, inside

from .config import instead
from .guard import nonfinite

CKPT_NAME = "ckpt.pt"
RUN_FIX = "restore a good copy or start a new --out"
FORMAT = "gpufeed-train-ckpt-1"  # bump when the layout changes; older files then fail with a clear message
# the sha256 of everything else the file holds (contents_digest): torch's zip reader checks no CRC, so bytes damaged on
# disk would otherwise load as changed weights. It costs about what torch.save does (0.3 s for 256 MB on a CPU core)
DIGEST = "sha256"
# why a write fails for want of room, and what frees it; any other OSError gets a generic fix
NO_ROOM = {
    errno.ENOSPC: "free space on that disk",
    errno.EDQUOT: "free space within your disk quota (quota -s shows it)",
    errno.EFBIG: "raise the file size limit (ulimit -f) or write to a filesystem that takes files this large",
}
# resuming with a different value is refused: it would not take effect, or not cleanly
MUST_MATCH = {
    "batch_size": "it fixes the data order",
    "seed": "it fixes the data order",
    "world_size": "it fixes the data order",
    "lr": "the optimizer and schedule restore the saved one",
    "precision": "the losses after a resume are then those of one run",
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
    """Write `state` to `path` atomically, with the digest of its contents: a crash or a full disk mid-write leaves the
    previous checkpoint intact; a failed write is a CheckpointError naming the file, the cause and the fix."""
    path = Path(path)
    state = {"format": FORMAT, **state}
    state[DIGEST] = contents_digest(state)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with written(path) as tmp, open(tmp, "wb") as f:
            sink = _Sink(f)
            try:
                torch.save(state, sink)
            except RuntimeError:
                if sink.error is None:
                    raise
            if sink.error is not None:  # torch reports a failed write as a RuntimeError of its own, or not at all
                raise sink.error
    except OSError as e:
        raise CheckpointError(_not_written(path, state.get("step"), e)) from None


class _Sink:
    """The file torch.save writes to, keeping the OS's error: torch's zip writer swallows it and fails on a position
    mismatch instead, which names neither the file nor the cause."""

    def __init__(self, f) -> None:
        self.f, self.error = f, None

    def write(self, data) -> int:
        try:
            return self.f.write(data)
        except OSError as e:
            self.error = self.error or e
            raise

    def flush(self) -> None:
        self.f.flush()


def _not_written(path: Path, step, error: OSError) -> str:
    code = errno.errorcode.get(error.errno, "no errno")
    fix = NO_ROOM.get(error.errno, f"check that {path.parent} is writable and its disk is healthy")
    kept = f"{path.name} keeps the previous checkpoint" if path.exists() else "no checkpoint is there yet"
    return (
        f"{path}: checkpoint of step {step} not written ({error.strerror or error}, {code}); {kept}: {fix}, then "
        "continue with --resume"
    )


def contents_digest(state: dict) -> str:
    """sha256 of a checkpoint's contents but its digest: every tensor's dtype, shape and bytes, every other value's
    type and repr, in order (a loaded checkpoint keeps its keys' order and its tuples); tensors are read one at a time,
    so no second copy of the state is made."""
    h = hashlib.sha256()
    _feed(h, {k: v for k, v in state.items() if k != DIGEST})
    return h.hexdigest()


def _feed(h, value) -> None:
    if torch.is_tensor(value):
        t = value.detach().to("cpu").contiguous()
        h.update(f"tensor {t.dtype} {tuple(t.shape)}:".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().data)
    elif isinstance(value, dict):
        h.update(f"dict {len(value)}:".encode())
        for k, v in value.items():
            _feed(h, k)
            _feed(h, v)
    elif isinstance(value, (list, tuple)):
        h.update(f"{type(value).__name__} {len(value)}:".encode())
        for v in value:
            _feed(h, v)
    else:
        h.update(f"{type(value).__name__} {value!r};".encode())


def unchecked_note(path: Path, state: dict) -> str | None:
    """A line for the log where the checkpoint carries no digest (written before they were): nothing to check."""
    if DIGEST in state:
        return None
    return f"{path} was written before checkpoints carried a checksum: resuming without checking its contents"


def remove_leftovers(run_dir: Path) -> list[str]:
    """The temporary checkpoints of writers killed mid-write (`.ckpt.pt.tmp-PID`), removed; a line for each."""
    return remove_stale(run_dir, stale_pattern(CKPT_NAME), "checkpoint")


def data_identity(data: Path, manifest: dict | None, vae: dict | None) -> dict | None:
    """What a run trains on, as its checkpoint records it: the data's digest and count, for latents the autoencoder
    that made them, for `--vae` the one that encodes in the step (identified by the hash of its weights). `path` is
    for messages only: a copied directory is the same data. None for a loader given without a prepared directory."""
    if manifest is None:
        return None
    ident = {"path": str(data), "digest": (manifest.get("digest") or {}).get("total"), "count": manifest.get("count")}
    made_by = ((manifest.get("latent") or {}).get("vae")) or None
    for key, source in (("latent_vae", made_by), ("vae", vae)):
        if source:
            ident[key] = {"name": source.get("name"), "sha256": source.get("sha256")}
    return ident


def check_data(path: Path, saved: dict | None, now: dict | None, other_data: bool) -> str | None:
    """CheckpointError where the checkpoint was trained on other data or through another autoencoder than `now`,
    naming both, unless `other_data` (--resume-other-data); a line for the log where that flag applies or the
    checkpoint predates the record; None where they are the same."""
    if now is None:
        return None
    if saved is None:
        return (
            f"{path} was written before checkpoints recorded their data: resuming without checking that --data "
            "(and --vae) are the ones it was trained on"
        )
    differ = []
    if (saved.get("digest"), saved.get("count")) != (now.get("digest"), now.get("count")):
        differ.append(f"it was trained on {_data(saved)}, this run's --data is {_data(now)}")
    for key, what in (("latent_vae", "latents made by the autoencoder"), ("vae", "--vae")):
        before, after = saved.get(key) or {}, now.get(key) or {}
        if before.get("sha256") != after.get("sha256"):
            differ.append(f"{what} {_vae(before)} then, {_vae(after)} now")
    if not differ:
        return None
    if other_data:
        return f"resuming on other data, as --resume-other-data asks: {'; '.join(differ)}"
    raise CheckpointError(
        f"{path}: {'; '.join(differ)}. Resume with the data and autoencoder it was trained on, "
        "or pass --resume-other-data to go on with these"
    )


def _data(ident: dict) -> str:
    count = ident.get("count")
    count = f"{count:,}" if isinstance(count, int) else "?"
    return f"{ident.get('path')} ({count} samples, digest {str(ident.get('digest'))[:16]}...)"


def _vae(ident: dict) -> str:
    if not ident:
        return "none"
    return f"{ident.get('name')} (sha256 {str(ident.get('sha256'))[:16]}...)"


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
    if DIGEST in state and state[DIGEST] != contents_digest(state):
        raise CheckpointError(
            f"{path}: damaged (its contents do not match the checksum written with them): resume from an older copy "
            "of it, or start a new --out"
        )
    saved, wanted = _plain(state["model_config"]), _plain(model_config)
    if saved != wanted:
        diff = {
            k: (saved.get(k), wanted.get(k)) for k in sorted(set(saved) | set(wanted)) if saved.get(k) != wanted.get(k)
        }
        raise CheckpointError(
            f"{path}: saved for a different model (field: saved vs requested) {diff}; "
            f"pass --model {state['train_config'].get('model')} or start a new --out"
        )
    bad = _nonfinite(state)
    if bad:
        names = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise CheckpointError(
            f"{path}: holds non-finite values ({names}): the run that wrote it had diverged, and training on from it "
            "gives only NaN; restore an earlier copy or start a new --out"
        )
    state["replaced"] = _replace_removed(path, state["train_config"])
    for key, why in MUST_MATCH.items():
        if state["train_config"].get(key) != train_config.get(key):
            raise CheckpointError(
                f"{path}: saved with {key}={state['train_config'].get(key)}, now {train_config.get(key)}; "
                f"resume with the same {key} ({why}) or start a new --out"
            )
    return state


def _replace_removed(path: Path, train_config: dict) -> list[str]:
    """Values train no longer offers, in a checkpoint's config, read as what is used instead; a line for each."""
    lines = []
    for key, value in train_config.items():
        train_config[key], line = instead(key, value)
        if line:
            lines.append(f"{path} was saved with {line}")
    return lines


def _nonfinite(state: dict) -> list[str]:
    """The weights, EMA weights and optimizer moments holding a NaN or an infinity (checkpoints written before the
    loop checked them could)."""
    named = [(f"{part} {k}", v) for part in ("model", "ema") for k, v in state.get(part, {}).items()]
    for index, moments in state.get("optimizer", {}).get("state", {}).items():
        named += [(f"optimizer {k} of parameter {index}", v) for k, v in moments.items()]
    return nonfinite([(k, v) for k, v in named if torch.is_tensor(v) and v.is_floating_point()])
