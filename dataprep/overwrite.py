"""What `--output` may be: never the input, inside it or holding it; and what `--overwrite` may replace: only a
directory that `dataprep convert` wrote, as its manifest says.

Paths are compared resolved (symbolic links followed), so a link to the input, or an input reached through a link,
is still the input. A directory is gpufeed's when its `manifest.json` is a regular file holding a JSON object with
`gpufeed_version` and each format's file list, and every file below the directory is `manifest.json` or one of
those listed files: a folder of photos, a folder with a copied manifest beside the user's own files, a directory
holding a symbolic link (which gpufeed never writes) are all someone else's, and refused with the reason and the
fix; nothing is deleted. A `.gpufeed-bench/` in it that bench wrote (dataprep.benchdir) is gpufeed's too. What was
tried: docs/RELIABILITY.md."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable

from common.paths import NotRegularError, open_regular
from common.text import printable

from .benchdir import BENCH_DIR, not_bench

MANIFEST = "manifest.json"
MANIFEST_BYTES = 256 << 20  # a manifest lists ~170 bytes per file: 1.5 million files; more is not one of ours


class OutputError(Exception):
    """The output cannot be created or replaced."""


def real(path: os.PathLike | str) -> str:
    return os.path.realpath(path)


def relation(out: str, other: str) -> str | None:
    """How resolved path `out` stands to resolved path `other`: 'is', 'holds', 'lies inside', or None (apart)."""
    if out == other:
        return "is"
    if other.startswith(out.rstrip(os.sep) + os.sep):
        return "holds"
    if out.startswith(other.rstrip(os.sep) + os.sep):
        return "lies inside"
    return None


def check_apart(out: str, inputs: Iterable[str], what: str = "--output") -> None:
    """OutputError unless resolved path `out` is apart from every resolved input path."""
    for other in inputs:
        how = relation(out, other)
        if how is not None:
            raise OutputError(
                f"{printable(out)}: {what} {how} the input ({printable(other)}); a conversion never writes into, "
                "over or around its input: choose an --output outside it"
            )


def not_ours(out: str) -> str | None:
    """Why the existing directory `out` is not one that `dataprep convert` wrote, or None when it is."""
    listed = _listed(out)
    if isinstance(listed, str):
        return listed
    unreadable: list[OSError] = []
    for here, dirs, files in os.walk(out, onerror=unreadable.append):
        rel = os.path.relpath(here, out)
        if rel == "." and BENCH_DIR in dirs:
            # bench's results go with the data they measured: a re-conversion may change it, so they are replaced too
            why = not_bench(os.path.join(here, BENCH_DIR))
            if why is not None:
                return why
            dirs.remove(BENCH_DIR)
        for name in dirs:
            if os.path.islink(os.path.join(here, name)):
                return f"it holds a symbolic link, {_rel(rel, name)}, which dataprep never writes"
        for name in files:
            entry = _rel(rel, name)
            if entry != MANIFEST and entry not in listed:
                return f"it holds {entry}, which its manifest does not list"
    if unreadable:
        return f"{unreadable[0].filename} cannot be listed ({unreadable[0].strerror})"
    return None


def _rel(folder: str, name: str) -> str:
    return name if folder == "." else f"{folder}/{name}"


def _listed(out: str) -> set[str] | str:
    """The files the manifest of `out` lists, or why there is no manifest that dataprep wrote."""
    path = os.path.join(out, MANIFEST)
    try:
        with open_regular(path, "rb", what="manifest") as f:
            manifest = json.loads(f.read(MANIFEST_BYTES + 1)[:MANIFEST_BYTES])
    except FileNotFoundError:
        return f"it has no {MANIFEST}"
    except (OSError, NotRegularError, ValueError, RecursionError) as e:
        return f"its {MANIFEST} is not one dataprep wrote ({type(e).__name__}: {e})"
    return listed_paths(manifest)


def listed_paths(manifest: object) -> set[str] | str:
    """The file paths a parsed manifest lists, or why it is not a manifest that dataprep wrote."""
    formats = manifest.get("formats") if isinstance(manifest, dict) else None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("gpufeed_version"), str):
        return f"its {MANIFEST} does not say dataprep wrote it (no gpufeed_version)"
    if not isinstance(formats, dict) or not all(
        isinstance(f, dict) and isinstance(f.get("files"), list) for f in formats.values()
    ):
        return f"its {MANIFEST} lists no files per format"
    text = manifest.get("text")  # the cached caption embeddings, beside the formats
    lists = [fmt["files"] for fmt in formats.values()]
    lists += [text["files"]] if isinstance(text, dict) and isinstance(text.get("files"), list) else []
    return {f["path"] for files in lists for f in files if isinstance(f, dict) and isinstance(f.get("path"), str)}


def check_replaceable(out: str, overwrite: bool) -> None:
    """OutputError unless the existing `out` may be written: missing, an empty directory, or (with `overwrite`) a
    directory that dataprep wrote."""
    if not os.path.lexists(out):
        return
    shown = printable(out)
    if not os.path.isdir(out):
        raise OutputError(f"{shown}: exists and is not a directory; choose another --output")
    if not any(os.scandir(out)):
        return
    if not overwrite:
        raise OutputError(f"{shown}: already exists and is not empty; pass --overwrite to replace it")
    why = not_ours(out)
    if why is not None:
        rule = "--overwrite replaces only a directory that `dataprep convert` wrote"
        fix = "Choose another --output, or move or remove it yourself"
        raise OutputError(not_written(f"{shown}: not replaced", why, "dataprep", rule, fix))


def not_written(shown: str, why: str, tool: str, rule: str, fix: str) -> str:
    """The refusal of a folder that `tool` did not write, in one line: what in it says so (`why`), the rule the tool
    keeps and the fix."""
    return f"{shown}: {printable(why)}, so {tool} did not write it ({rule}, nothing else). {fix} if you mean to"


def still_replaceable(out: str, overwrite: bool) -> str | None:
    """At the publish: why what stands at `out` now may not be replaced, or None. The check made at the start, made
    again: something may have appeared there while the conversion ran."""
    if not os.path.lexists(out) or (os.path.isdir(out) and not os.path.islink(out) and not any(os.scandir(out))):
        return None
    if not overwrite:
        return "it appeared while this conversion ran, and --overwrite was not given"
    if os.path.islink(out) or not os.path.isdir(out):
        return "it is not a directory now"
    why = not_ours(out)
    return None if why is None else f"{printable(why)}, so dataprep did not write it"
