"""Damage one prepared directory per trial and report what the loader and `dataprep verify` do with it, one JSON
line per trial. Run as a script by tests/loaders/test_damaged_data.py, in a process of its own, so that a crash (a
signal) or a hang is seen by the test as that, not as a dead test runner.

    python tests/loaders/damage_trials.py \
        '{"data": DIR, "work": DIR, "backend": "ffcv", "trials": [[REL, BYTE, BIT], ...]}'
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path


def copy_with_damage(data: Path, work: Path, rel: str, byte: int, bit: int) -> Path:
    """A copy of `data` (hard links, cheap) in which `rel` has bit `bit` of byte `byte` flipped."""
    out = work / f"{rel.replace('/', '_')}-{byte}-{bit}"
    shutil.copytree(data, out, copy_function=os.link)
    target = out / rel
    raw = bytearray(target.read_bytes())
    raw[byte] ^= 1 << bit
    target.unlink()  # break the hard link: the original stays intact
    target.write_bytes(raw)
    return out


def open_loader(backend: str, data: Path):
    from loaders import build_loader

    workers = 2 if backend in ("torch", "hdf5") else 1
    return build_loader(
        backend,
        data,
        batch_size=50,
        workers=workers,
        pin_memory=False,
        device="cpu",
        shuffle=False,
        augment=False,
        drop_last=False,
    )


def epoch(loader):
    import torch

    with loader:
        batches = list(loader)
    return torch.cat([b.x for b in batches]), torch.cat([b.y for b in batches])


def trial(backend: str, data: Path, reference, rel: str) -> dict:
    """The loader's outcome (refused at open, error while reading, delivered same or different samples, or an
    unclear exception) and what verify says."""
    from dataprep.verify import verify
    from loaders import LoaderError

    out, stage = {}, "open"
    try:
        loader = open_loader(backend, data)
        stage = "read"
        x, y = epoch(loader)
        same = x.shape == reference[0].shape and bool((x == reference[0]).all()) and bool((y == reference[1]).all())
        out["loader"] = "delivered the same samples" if same else "delivered different samples"
    except LoaderError as e:
        out["loader"] = "refused at open" if stage == "open" else "error while reading"
        out["message"] = str(e)
    except Exception as e:  # anything else is an unclear message: the test fails on it
        out["loader"] = f"unclear {type(e).__name__} at {stage}"
        out["message"] = str(e)[:2000]
    try:
        problems = verify(data)
    except Exception as e:
        problems = [f"{type(e).__name__}: {e}"]
    out["verify"] = problems
    out["verify_names_file"] = any(rel in p or Path(rel).name in p for p in problems)
    return out


def main() -> None:
    args = json.loads(sys.argv[1])
    data, work, backend = Path(args["data"]), Path(args["work"]), args["backend"]
    reference = epoch(open_loader(backend, data))
    for rel, byte, bit in args["trials"]:
        damaged = copy_with_damage(data, work, rel, byte, bit)
        print(json.dumps({"file": rel, "byte": byte, "bit": bit, "status": "started"}), flush=True)
        result = trial(backend, damaged, reference, rel)
        print(json.dumps({"file": rel, "byte": byte, "bit": bit} | result), flush=True)
        shutil.rmtree(damaged)


if __name__ == "__main__":
    main()
