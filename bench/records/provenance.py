"""Reading where a raw result came from: the provenance a result file carries (the record env.run_record writes, at its
top or under "run", "environment" or "record"), completed by a `provenance.json` sidecar in its folder (or a folder
above, up to bench/results) for files written before a field was recorded. A field nobody recorded is named in the
sidecar's "unrecorded" list with a null value, never guessed, so a figure built on it can say so.

Sidecar: {"about": "...", "entries": [{"files": ["glob", ...], "source": "...", "record": {FIELD: value},
"unrecorded": [FIELD, ...]}]}; globs match the path relative to the sidecar's folder (a member of an archive as
"raw.tar.xz:member"), and the first entry that matches applies."""

from __future__ import annotations

import fnmatch
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path

SIDECAR = "provenance.json"
# what every raw result must say: when, the exact command, the commit, the host and the versions
ALWAYS = ("when", "command", "commit", "gpu", "cpus", "memory_gib", "torch")
ON_GPU = ("gpu_uuid", "cuda", "nccl")  # only where a GPU ran ("gpu": "none" for a CPU run)
EMBEDDED_UNDER = ("run", "environment", "record")


def embedded(obj: object) -> dict:
    """The provenance fields a result holds itself, flattened (an empty dict when it holds none)."""
    if not isinstance(obj, dict):
        return {}
    nested = [obj[k] for k in EMBEDDED_UNDER if isinstance(obj.get(k), dict)]
    # a full record wherever it sits, else what the top says alone (a command, a date)
    rec = next((r for r in [obj, *nested] if {"commit", "hardware"} & r.keys()), obj)
    hw, ver = rec.get("hardware") or {}, rec.get("versions") or {}
    out = {k: rec.get(k) for k in ("when", "command", "commit", "diff")}
    if out["commit"] == "unknown":  # run_record found no checkout and no GPUFEED_COMMIT: not a commit
        out["commit"] = None
    # hardware() names a GPU whenever one ran, so a record of it without one is a CPU run
    out["gpu"] = hw.get("gpu", "none" if hw else None)
    out |= {"gpu_uuid": hw.get("gpu_uuid"), "cpus": hw.get("cpus_allowed"), "memory_gib": hw.get("memory_gib")}
    out |= {"torch": ver.get("torch"), "cuda": ver.get("torch_cuda", hw.get("cuda")), "nccl": ver.get("nccl")}
    return {k: v for k, v in out.items() if v is not None}


def sidecar_entry(path: str, root: Path) -> dict:
    """The first sidecar entry that covers `path` (relative to root; "a/raw.tar.xz:member" for an archive member),
    looking in its folder, then each folder above up to root."""
    folder = Path(path.split(":", 1)[0]).parent
    while True:
        side = root / folder / SIDECAR
        if side.is_file():
            rel = Path(path).relative_to(folder).as_posix() if folder != Path(".") else path
            for entry in json.loads(side.read_text())["entries"]:
                if any(fnmatch.fnmatch(rel, g) for g in entry["files"]):
                    return entry
        if folder == Path("."):
            return {}
        folder = folder.parent


def missing(fields: dict, unrecorded: list[str]) -> list[str]:
    """The fields a result lacks that nobody declared unrecorded; a `+dirty` commit needs its diff."""
    need = list(ALWAYS) + (list(ON_GPU) if fields.get("gpu") not in (None, "none") else [])
    if str(fields.get("commit", "")).endswith("+dirty"):
        need.append("diff")
    return [k for k in need if fields.get(k) is None and k not in unrecorded]


def check(obj: object, path: str, root: Path) -> list[str]:
    """What a result at `path` (relative to root) fails to say about where it came from, with the sidecar's help."""
    entry = sidecar_entry(path, root)
    fields = (entry.get("record") or {}) | embedded(obj)
    return missing(fields, entry.get("unrecorded", []))


def results(root: Path) -> Iterator[tuple[str, object]]:
    """Every raw JSON result under root, plain or inside a .tar.xz archive, as (path relative to root, object)."""
    for p in sorted(root.rglob("*.json")):
        if p.name != SIDECAR:
            yield p.relative_to(root).as_posix(), json.loads(p.read_text())
    for p in sorted(root.rglob("*.tar.xz")):
        with tarfile.open(p) as tar:
            for m in tar.getmembers():
                if m.isfile() and m.name.endswith(".json"):
                    yield f"{p.relative_to(root).as_posix()}:{m.name}", json.load(tar.extractfile(m))
