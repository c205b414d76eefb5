"""`dataprep verify`: re-hash every file and re-read every sample of every format against the manifest."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from common.paths import NotRegularError, OutsideError, all_inside, open_regular

from .digest import SampleDigest, stream_sha256
from .fields import changed_fields
from .finite import first_non_finite
from .formats import module
from .formats.base import has_captions
from .manifest import NAME, file_lists, load_manifest, require_verifiable
from .textcache import check_table


def _check_files(data_dir: Path, name: str, files: list[dict]) -> str | None:
    """The first listed file that is missing, not a regular file, or not the bytes the manifest records. Each is
    opened once (non-blocking, so a FIFO in its place is refused, not waited on) and sized and hashed from there."""
    prefix = os.path.join(data_dir, "")
    for f in files:
        try:
            with open_regular(prefix + f["path"]) as opened:
                size = os.fstat(opened.fileno()).st_size
                if size != f["bytes"]:
                    return f"{name}: {f['path']} has {size} bytes, the manifest says {f['bytes']}"
                if stream_sha256(opened) != f["sha256"]:
                    return f"{name}: {f['path']} sha256 differs from the manifest (the file changed after conversion)"
        except (FileNotFoundError, NotADirectoryError):
            return f"{name}: {f['path']} is missing"
        except NotRegularError as e:
            return f"{name}: {f['path']} {e.problem}; replace it with the real file"
        except OSError as e:
            return f"{name}: {f['path']} cannot be read ({e.strerror or e})"
    return None


def _chunk(data_dir: Path, manifest: dict, name: str, index: int):
    size = manifest["digest"]["chunk_size"]
    for i, chunk in enumerate(module(name).read_chunks(data_dir, manifest, size)):
        if i == index:
            return chunk
    return None


def _locate(data_dir: Path, manifest: dict, name: str, bad_chunk: int, good: list[str]) -> str:
    """Name the first differing sample by comparing with a format whose digest of that chunk is right."""
    size = manifest["digest"]["chunk_size"]
    first, last = bad_chunk * size, min(manifest["count"], (bad_chunk + 1) * size) - 1
    if not good:
        return f"samples {first}..{last} differ from the manifest digest"
    ours, ref = _chunk(data_dir, manifest, name, bad_chunk), _chunk(data_dir, manifest, good[0], bad_chunk)
    if ours is None:
        return f"ends before sample {first}"
    for k in range(min(len(ours), len(ref))):
        same = np.array_equal(ours.x[k], ref.x[k]) and ours.y[k] == ref.y[k]
        if ours.length is not None and ref.length is not None:
            same = same and ours.length[k] == ref.length[k]
        if not same:
            return f"sample {first + k} differs (checked against {good[0]}, which matches the manifest)"
    return f"samples {first}..{last} differ from the manifest digest"


def _digest(data_dir: Path, manifest: dict, name: str) -> dict:
    """The sample digest of format `name` as read back, and the index of its first sample holding a NaN or an
    infinity ("non_finite", None when none does)."""
    digest = SampleDigest(manifest["digest"]["chunk_size"])
    bad = None
    for chunk in module(name).read_chunks(data_dir, manifest, digest.chunk_size):
        if bad is None and chunk.x.dtype.kind == "f":  # pixels are uint8: nothing to look at
            k = first_non_finite(chunk.x)
            bad = None if k is None else digest.count + k
        digest.update(chunk)
    return digest.result() | {"non_finite": bad}


def _first_differing(got: list[str], expected: list[str]) -> int:
    """The index of the first per-chunk digest that differs (or is missing on one side)."""
    return next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))


def _caption_problems(manifest: dict, digests: dict[str, dict]) -> list[str]:
    """Per format whose captions read back differ from the conversion's: the first chunk of samples that differs."""
    if not has_captions(manifest):
        return []
    expected = manifest["digest"].get("text")
    if not isinstance(expected, dict) or not isinstance(expected.get("chunks"), list):
        return [f"{NAME}: digest.text is missing, so the captions cannot be checked; convert the data again"]
    problems, size = [], manifest["digest"]["chunk_size"]
    for name, got in digests.items():
        text = got.get("text")
        if text is None:
            problems.append(f"{name}: no captions read back, the manifest says every sample has one")
        elif text["total"] != expected.get("total"):
            bad = _first_differing(text["chunks"], expected["chunks"])
            first, last = bad * size, min(manifest["count"], (bad + 1) * size) - 1
            problems.append(f"{name}: captions of samples {first}..{last} differ from the manifest digest")
    return problems


def verify(data_dir: Path | str) -> list[str]:
    """Problems found, most useful first; an empty list means every format matches the manifest exactly."""
    data_dir = Path(data_dir)
    manifest = load_manifest(data_dir)
    require_verifiable(manifest, data_dir / "manifest.json")
    expected = manifest["digest"]
    for info in file_lists(manifest).values():  # before any file is opened: a path leading out stops it all
        all_inside(data_dir, (f["path"] for f in info["files"]), source=data_dir / NAME)
    problems, digests = [f"{NAME}: {p}" for p in changed_fields(manifest) or []], {}
    if "text" in manifest:
        problem = _check_files(data_dir, "text", manifest["text"]["files"]) or check_table(data_dir, manifest)
        problems += [problem] if problem else []
    for name, info in manifest["formats"].items():
        problem = _check_files(data_dir, name, info["files"])
        if problem:
            problems.append(problem)
        try:
            digests[name] = _digest(data_dir, manifest, name)
        except OutsideError:  # a name the format's reader found (an index row): refused, not a damaged file
            raise
        except Exception as e:  # a damaged file can break a reader anywhere; report it, go on with the rest
            problems.append(f"{name}: cannot read back ({type(e).__name__}: {e})")
    problems += _caption_problems(manifest, digests)
    for name, got in digests.items():
        if got["non_finite"] is not None:
            where = f"{name}: sample {got['non_finite']}"
            problems.append(f"{where} holds NaN or Inf, which the loaders would deliver (a NaN loss); convert again")
    good = [n for n, d in digests.items() if d["total"] == expected["total"]]
    for name, got in digests.items():
        if got["total"] == expected["total"]:
            continue
        if got["count"] != manifest["count"]:
            problems.append(f"{name}: {got['count']} samples read back, the manifest says {manifest['count']}")
        bad = _first_differing(got["chunks"], expected["chunks"])
        problems.append(f"{name}: first mismatch: {_locate(data_dir, manifest, name, bad, good)}")
    return problems
