"""What conversions killed outright (SIGKILL, a power cut) left beside an output, and what the next conversion into
that output does with it before it starts.

A conversion writes `.<name>.tmp-<pid>` and publishes it in two renames: an existing output to `.<name>.old-<pid>`,
then the temporary output to `<name>`; then it removes the old one. Whether the process that left them is gone is
asked of a lock, not of its pid alone: it holds an exclusive `flock` on `.lock` in its temporary output until just
before the second rename, the kernel drops it however the process dies, and a pid that a new process has reused
still reads as gone. Per ended process, the rules (docs/RELIABILITY.md):

1. a temporary output and no old one: the conversion ended before its publish began; the temporary output is
   removed (complete or not: the output it would have replaced is still in place, or there was none);
2. an old output, no output, and a complete temporary output (it holds its manifest.json): killed between the two
   renames; the publish is completed: the temporary output becomes the output, then the old one is removed;
3. an old output, no output, and no complete temporary output: the publish is rolled back: the old output is renamed
   back into place (and an incomplete temporary output removed);
4. an old output beside the output and no temporary output: killed while removing the old one; it is removed.

An old output is removed only where dataprep wrote it (dataprep.overwrite); anything else, and any leftover that is,
holds or lies inside the input, is left alone and said so. Nothing of a live conversion is touched."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from common.atomic import LOCK, owner_alive
from common.text import printable

from .overwrite import MANIFEST, not_ours, real, relation


def _ended(out: Path) -> list[int]:
    """Pids of the leftovers beside `out`, this process's own left out."""
    pids = set()
    for name in os.listdir(out.parent):  # not a glob: the output's name may hold [, * or ?
        kind, _, pid = name.rpartition("-")
        if kind in (f".{out.name}.tmp", f".{out.name}.old") and pid.isdigit() and int(pid) != os.getpid():
            pids.add(int(pid))
    return sorted(pids)


def recover(out: Path, inputs: list[str]) -> list[str]:
    """Apply the rules above to every ended conversion into `out` (a resolved path); return what was done."""
    said = []
    for pid in _ended(out):
        tmp, old = out.parent / f".{out.name}.tmp-{pid}", out.parent / f".{out.name}.old-{pid}"
        if owner_alive(tmp, pid):
            continue
        touching = [p for p in (tmp, old) if p.exists() and any(relation(real(p), i) for i in inputs)]
        if touching:
            said.append(f"left {printable(touching[0])} alone: it is part of the input (--input)")
            continue
        said += _recover_one(out, tmp, old, pid)
    return said


def _recover_one(out: Path, tmp: Path, old: Path, pid: int) -> list[str]:
    who = f"a conversion (process {pid}) that has ended"
    if not old.exists():
        _remove(tmp)
        return [f"removed {printable(tmp)}: left by {who}"]
    complete = (tmp / MANIFEST).is_file()
    if out.exists() or os.path.islink(out):
        if tmp.exists():
            return [
                f"left {printable(tmp)} and {printable(old)} alone: {printable(out)} exists too, which one "
                "conversion never leaves; keep the one you want as the output and remove the others"
            ]
        return [_remove_old(old, f"the output it replaced, left by {who} that had published {printable(out)}")]
    if complete:
        (tmp / LOCK).unlink(missing_ok=True)
        os.replace(tmp, out)
        said = [f"completed the publish of {printable(out)}, interrupted in {who}"]
        return said + [_remove_old(old, "the output it replaced")]
    os.replace(old, out)
    if tmp.exists():
        _remove(tmp)
    return [f"rolled back the publish of {printable(out)}, interrupted in {who}: the previous output is back"]


def _remove_old(old: Path, what: str) -> str:
    why = not_ours(str(old)) if any(os.scandir(old)) else None
    if why is not None:
        return f"left {printable(old)} alone ({what}): {printable(why)}; remove it yourself if it is not needed"
    _remove(old)
    return f"removed {printable(old)}: {what}"


def _remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
