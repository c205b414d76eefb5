"""What `train --out` may be: a new or empty folder, or a run folder (one that train wrote); never the data directory,
a folder inside it or one holding it.

A run folder holds only what train writes, each file in train's own shape: ckpt.pt (a torch.save archive),
metrics.jsonl (JSON lines of `step` and `loss`), summary.json (train's record: `config`, `steps`, `files`),
samples/step*.png, tensorboard/ (TensorBoard's event files), profile/ (the profiler's trace and tables, per rank under
torchrun), and the temporary names of its atomic writes (.NAME.tmp-PID). Train overwrites summary.json and appends to
metrics.jsonl, so a folder holding anything else is someone else's and is refused with the reason and the fix, as
`dataprep convert --overwrite` refuses a folder it did not write. Paths are compared resolved (links followed)."""

from __future__ import annotations

import json
import os
import zipfile
from fnmatch import fnmatch
from pathlib import Path

from common.paths import NotRegularError, open_regular
from common.text import printable
from dataprep.overwrite import not_written, relation

_TMP = ".*.tmp-*"
_PROFILE = ("trace.json", "ops.txt", "ops.md", "ops.png")
# the names train writes, per folder of a run (relative to it)
_NAMES = {
    ".": ("ckpt.pt", "metrics.jsonl", "summary.json", _TMP),
    "samples": ("step*.png", _TMP),
    "tensorboard": ("events.out.tfevents.*",),
    "profile": _PROFILE,
    "profile/rank*": _PROFILE,
}
_READ = 64 << 20  # a metrics line or a summary is a few kB; far more is not train's


class RunDirError(ValueError):
    """--out cannot hold this run."""


def check_out(out: Path, data: Path | str) -> None:
    """RunDirError unless `out` may hold a run on `data` (a local directory or an s3:// URL)."""
    where, shown = os.path.realpath(out), printable(out)
    if not str(data).startswith("s3://"):
        how = relation(where, os.path.realpath(data))
        if how is not None:
            raise RunDirError(
                f"{shown}: --out {how} the data directory ({printable(data)}); a run never writes into, over or "
                "around its data: choose an --out outside it"
            )
    if not os.path.lexists(where):
        return
    if not os.path.isdir(where):
        raise RunDirError(f"{shown}: exists and is not a folder; choose another --out")
    why = not_a_run(where)
    if why is not None:
        rule, fix = "train adds to a folder it wrote or an empty one", "Choose another --out, or move the files away"
        raise RunDirError(not_written(f"{shown}: not a run folder", why, "train", rule, fix))


def not_a_run(folder: str) -> str | None:
    """Why the existing `folder` is not one that train wrote (or an empty one), or None when it is."""
    unreadable: list[OSError] = []
    for here, dirs, files in os.walk(folder, onerror=unreadable.append):
        rel = os.path.relpath(here, folder)
        patterns = next((names for where, names in _NAMES.items() if fnmatch(rel, where)), ())
        for name in dirs:
            if os.path.islink(os.path.join(here, name)):  # a file's link is read through, refused where it leads out
                return f"it holds a symbolic link to a folder, {_rel(rel, name)}, which train never makes"
            if _rel(rel, name) not in _NAMES and not fnmatch(_rel(rel, name), "profile/rank*"):
                return f"it holds {_rel(rel, name)}/, which train does not write"
        for name in files:
            if not any(fnmatch(name, p) for p in patterns):
                return f"it holds {_rel(rel, name)}, which train does not write"
            if rel == "." and not _shaped(os.path.join(here, name)):
                return f"its {name} is not one that train wrote"
    if unreadable:
        return f"{unreadable[0].filename} cannot be listed ({unreadable[0].strerror})"
    return None


def _shaped(path: str) -> bool:
    """Whether a file at the top of a run folder has the shape train writes it in (temporary files pass)."""
    name = os.path.basename(path)
    if name not in ("ckpt.pt", "metrics.jsonl", "summary.json"):
        return True
    try:
        with open_regular(path, "rb", what=name) as f:  # a FIFO in its place is not waited on
            if name == "ckpt.pt":  # torch.save's archive: its pickle is .../data.pkl
                return any(n.endswith("/data.pkl") for n in zipfile.ZipFile(f).namelist())
            head = f.readline(_READ) if name == "metrics.jsonl" else f.read(_READ)
        if not head.strip():
            return name == "metrics.jsonl"  # opened by a run that logged nothing yet
        rec = json.loads(head)
    except (OSError, NotRegularError, ValueError, RecursionError, zipfile.BadZipFile):
        return False
    keys = {"step", "loss"} if name == "metrics.jsonl" else {"config", "steps", "files"}
    return isinstance(rec, dict) and keys <= rec.keys()


def _rel(folder: str, name: str) -> str:
    return name if folder == "." else f"{folder}/{name}"
