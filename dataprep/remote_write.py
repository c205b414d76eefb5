"""Writing a dataset to `s3://BUCKET/PREFIX`, and what `--overwrite` may delete there: only what dataprep wrote.

A prefix may be written when it holds nothing, or (with `overwrite`) a dataset that `dataprep convert` wrote: a
manifest.json that says so, the objects it lists, and leftovers of interrupted uploads (generation folders, named
`v-DATE-HEX/` as only dataprep names them, that no manifest names). Any other object, or a bucket's top level, is
refused with the reason and the fix, before converting and again before uploading and before publishing; nothing is
deleted then. An upload puts every file under a fresh generation folder, then manifest.json (naming that folder)
last: that PUT replaces the old dataset at once. Only then are the objects the old manifest lists, and the
leftovers, deleted. Until then the old dataset stays readable; a failed or stopped upload removes what it put, and
one killed outright leaves a leftover that `dataprep verify` and `info` name and the next `--overwrite` removes.
Two conversions into one prefix at the same time are not supported: each would take the other's folder for a
leftover."""

from __future__ import annotations

import json
import secrets
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from common.text import printable

from .overwrite import MANIFEST_BYTES, listed_paths
from .remote import (
    GENERATION,
    GENERATION_NAME,
    MANIFEST,
    MAX_KEY,
    RemoteError,
    S3Url,
    _call,
    client,
    list_names,
    require_bucket,
)

DELETE_BATCH = 1000  # keys per DeleteObjects request, S3's limit
LEFTOVER = "leftover of an interrupted upload"
NAMES_RESERVE = 100  # bytes of key below the prefix: the generation folder (28) and the longest file names (~40)


@dataclass
class Survey:
    """What a prefix holds, sorted by who wrote it (names relative to the prefix)."""

    ours: list[str] = field(default_factory=list)  # manifest.json and the objects it lists
    leftovers: Counter = field(default_factory=Counter)  # generation folder -> its objects, for those no manifest names
    strangers: list[str] = field(default_factory=list)  # everything else
    why_not: str | None = None  # why the prefix is not replaceable, or None
    generation: str | None = None  # the folder the manifest names ("": its files lie beside it); None: no manifest

    @property
    def empty(self) -> bool:
        return not (self.ours or self.leftovers or self.strangers)


def survey(s3, url: S3Url, own: str = "") -> Survey:
    """Every object below the prefix, sorted into the dataset's, leftovers and others; the objects of this upload's
    own generation folder `own` left out."""
    # "": the prefix's own folder marker (what consoles' "create folder" writes), which is no one's data
    names = sorted(n for n in list_names(s3, url) if n and not (own and n.startswith(f"{own}/")))
    found = Survey()
    listed: set[str] | str = set()
    if MANIFEST in names:
        listed = _manifest_listing(s3, url, found)
    for name in names:
        first = name.split("/", 1)[0]
        if name == MANIFEST or (isinstance(listed, set) and name in listed):
            found.ours.append(name)
        elif "/" in name and GENERATION_NAME.fullmatch(first) and first != found.generation:
            found.leftovers[first] += 1
        else:
            found.strangers.append(name)
    found.why_not = _why_not(found, listed)
    return found


def _manifest_listing(s3, url: S3Url, found: Survey) -> set[str] | str:
    """The keys (relative to the prefix) the manifest lists, or why it is not a manifest dataprep wrote."""
    body = _call(url, MANIFEST, s3.get_object, Bucket=url.bucket, Key=url.key(MANIFEST))["Body"]
    try:
        manifest = json.loads(body.read(MANIFEST_BYTES + 1)[:MANIFEST_BYTES])
    except (ValueError, RecursionError) as e:
        return f"its {MANIFEST} is not one dataprep wrote ({type(e).__name__}: {e})"
    listed = listed_paths(manifest)
    if isinstance(listed, str):
        return listed
    generation = manifest.get(GENERATION, "")
    if not isinstance(generation, str) or (generation and not GENERATION_NAME.fullmatch(generation)):
        return f"its {MANIFEST} names {GENERATION} {json.dumps(generation)[:80]}, which dataprep never writes"
    found.generation = generation
    return {f"{generation}/{p}" if generation else p for p in listed}


def _why_not(found: Survey, listed: set[str] | str) -> str | None:
    if isinstance(listed, str):
        return listed
    if not found.strangers:
        return None
    count = len(found.strangers)
    more = f" and {count - 1} more object(s)" if count > 1 else ""
    first = found.strangers[0]
    if found.generation is None:
        return f"it holds {first}{more} and no {MANIFEST}"
    return f"it holds {first}{more}, which its manifest does not list"


def check_target(url: S3Url, overwrite: bool, s3=None, own: str = "") -> Survey:
    """RemoteError unless a dataset may be written at `url`: a prefix (not a bucket's top level) of an existing bucket
    that holds nothing, or (with `overwrite`) only what dataprep wrote; this upload's own generation folder `own`
    aside. Returns what it holds."""
    if not url.prefix:
        raise RemoteError(
            f"{url}: a bucket's top level is not an output (it holds whatever else the bucket holds); write "
            f"--output {url}/PREFIX, a prefix of the dataset's own"
        )
    size = len(url.prefix.encode("utf-8", "surrogateescape"))
    if size + NAMES_RESERVE > MAX_KEY:
        raise RemoteError(
            f"{printable(url)}: the prefix is {size} bytes, and the dataset's keys add up to {NAMES_RESERVE} more "
            f"below it; S3 allows {MAX_KEY}: choose a shorter prefix"
        )
    s3 = s3 or client()
    require_bucket(s3, url)
    found = survey(s3, url, own)
    if found.why_not is not None:
        raise RemoteError(
            f"{url}: not replaced: {printable(found.why_not)}, so dataprep did not write it (--overwrite replaces "
            "only a dataset that `dataprep convert` wrote, nothing else). Choose another --output prefix, or move "
            "or remove those objects yourself if you mean to"
        )
    if not overwrite and not found.empty:
        what = "a dataset (manifest.json)" if found.generation is not None else "leftovers of an interrupted upload"
        raise RemoteError(f"{url}: already holds {what}; pass --overwrite to replace it")
    return found


def new_generation() -> str:
    return f"v-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{secrets.token_hex(4)}"


def upload_dir(local: Path, location, overwrite: bool, progress: bool = False) -> list[str]:
    """Every file of a finished prepared directory to a fresh generation folder below `location`, then its
    manifest.json naming that folder, then the old dataset's objects and leftovers deleted (module docstring).
    Returns what was removed, as lines to print."""
    from tqdm import tqdm

    url, s3 = S3Url.parse(location), client()
    check_target(url, overwrite, s3)
    generation = new_generation()
    target = url.child(generation)
    files = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file() and p.name != MANIFEST)
    _check_key_sizes(target, files)
    manifest = json.loads((local / MANIFEST).read_text())
    manifest[GENERATION] = generation
    try:
        for name in tqdm(files, unit="file", desc="upload", disable=not progress):
            _call(target, name, s3.upload_file, str(local / name), url.bucket, target.key(name))
        old = check_target(url, overwrite, s3, generation)  # again: objects may have come while this converted
        body = (json.dumps(manifest, indent=1) + "\n").encode()
        _call(url, MANIFEST, s3.put_object, Bucket=url.bucket, Key=url.key(MANIFEST), Body=body)
    except BaseException:  # a failure or a stop signal: what this upload put goes, the old dataset stays as it was
        if not _maybe_published(s3, url, generation):
            _remove_quietly(s3, target)
        raise
    replaced = [n for n in old.ours if n != MANIFEST]
    _delete(s3, url, replaced)
    said = [f"removed the {len(replaced)} objects the replaced dataset's manifest listed"] if replaced else []
    for name, count in sorted(old.leftovers.items()):
        _delete(s3, url.child(name), list(list_names(s3, url.child(name))))
        said.append(f"removed {printable(url.child(name))}/ ({count} objects): {LEFTOVER}")
    return said


def _maybe_published(s3, url: S3Url, generation: str) -> bool:
    """Whether the manifest at `url` names `generation` (its PUT may have landed before the error), or cannot be read:
    then the folder stays, a dataset's or a leftover that verify names."""
    try:
        body = s3.get_object(Bucket=url.bucket, Key=url.key(MANIFEST))["Body"].read(MANIFEST_BYTES)
    except Exception as e:
        return "NoSuchKey" not in str(e)
    try:
        manifest = json.loads(body)
    except (ValueError, RecursionError):
        return False
    return isinstance(manifest, dict) and manifest.get(GENERATION) == generation


def _remove_quietly(s3, folder: S3Url) -> None:
    """Every object below `folder`, as far as the store lets: the error being handled is the one to report, and what
    stays is named by `dataprep verify` as a leftover."""
    try:
        _delete(s3, folder, list(list_names(s3, folder)))
    except Exception:
        pass


def _check_key_sizes(target: S3Url, files: list[str]) -> None:
    longest = max((target.key(name) for name in files), key=lambda k: len(k.encode()), default="")
    if len(longest.encode()) > MAX_KEY:
        raise RemoteError(
            f"s3://{target.bucket}/{printable(longest)}: {len(longest.encode())} bytes of key; S3 allows {MAX_KEY}: "
            "choose a shorter --output prefix"
        )


def _delete(s3, url: S3Url, names: list[str]) -> None:
    """Delete objects (names relative to `url`), a thousand a request; RemoteError naming the first that failed."""
    for i in range(0, len(names), DELETE_BATCH):
        keys = [{"Key": url.key(n)} for n in names[i : i + DELETE_BATCH]]
        answer = _call(url, "", s3.delete_objects, Bucket=url.bucket, Delete={"Objects": keys, "Quiet": True})
        if answer.get("Errors"):
            error = answer["Errors"][0]
            raise RemoteError(
                f"s3://{url.bucket}/{printable(error.get('Key'))}: not deleted ({error.get('Code')}: "
                f"{error.get('Message')}); `dataprep verify` of the dataset names what is left"
            )


def leftover_lines(location) -> list[str]:
    """What below a dataset's prefix is not part of it, as lines for `dataprep verify` and `info`."""
    url = S3Url.parse(location)
    found = survey(client(), url)
    lines = [
        f"{LEFTOVER}: {printable(url.child(g))}/ ({n} objects); the next convert --overwrite to this prefix removes it"
        for g, n in sorted(found.leftovers.items())
    ]
    if found.strangers:
        lines.append(
            f"{len(found.strangers)} object(s) that the manifest does not list, e.g. {printable(url)}/"
            f"{printable(found.strangers[0])}: not part of the dataset; convert --overwrite to this prefix refuses "
            "them until they are moved or removed"
        )
    return lines
