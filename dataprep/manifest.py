"""`DIR/manifest.json`: what a prepared directory holds (schema in docs/DESIGN.md). Written last, atomically."""

from __future__ import annotations

import json
import math
from pathlib import Path

from common.paths import NotRegularError, OutsideError, inside, names_inside, open_regular
from common.text import printable

NAME = "manifest.json"
REQUIRED = ("kind", "sample_shape", "dtype", "count", "classes", "digest", "formats")


class ManifestError(Exception):
    pass


def load_manifest(data_dir: Path | str) -> dict:
    try:
        path = inside(data_dir, NAME, source=data_dir)  # a manifest.json linking out would be read from there
    except OutsideError as e:
        raise ManifestError(str(e)) from None
    try:
        with open_regular(path, what="manifest") as f:  # a FIFO in its place would block a plain open for ever
            raw = f.read()
    except (FileNotFoundError, NotADirectoryError):
        raise ManifestError(f"{path}: missing; is {data_dir} a directory made by `dataprep convert`?") from None
    except NotRegularError as e:
        raise ManifestError(str(e)) from None
    except OSError as e:
        raise ManifestError(f"{path}: unreadable ({e.strerror or e})") from None
    try:
        manifest = json.loads(raw)
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ManifestError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(manifest, dict):
        raise ManifestError(f"{path}: not a manifest (a JSON {type(manifest).__name__}, not an object)")
    missing = [k for k in REQUIRED if k not in manifest]
    if missing:
        raise ManifestError(f"{path}: missing keys {missing}")
    problem = _problem(manifest)
    if problem:
        raise ManifestError(f"{path}: {problem}; convert the data again")
    try:  # checked on the manifest alone, so a dataset in object storage gets it as a local one does
        for fmt in file_lists(manifest).values():
            names_inside(data_dir, (f["path"] for f in fmt.get("files", [])), source=path)
    except OutsideError as e:
        raise ManifestError(str(e)) from None
    return manifest


def file_lists(manifest: dict) -> dict[str, dict]:
    """name -> {"files": [...]} of everything the manifest lists files of: each format, and the text embeddings."""
    text = manifest.get("text")
    return manifest["formats"] | ({"text": text} if isinstance(text, dict) else {})


def require_verifiable(manifest: dict, path: Path) -> None:
    """What `verify` needs beyond what loading checks: the per-chunk digests and every format's file list."""
    digest = manifest["digest"]
    if not _is_int(digest.get("chunk_size"), 1) or not isinstance(digest.get("chunks"), list):
        raise ManifestError(f"{path}: digest must hold chunk_size and chunks; convert the data again")
    missing = [name for name, fmt in manifest["formats"].items() if "files" not in fmt]
    if missing:
        raise ManifestError(f"{path}: formats {missing} list no files; convert the data again")


def _is_int(v, low: int = 0) -> bool:
    return type(v) is int and v >= low


def _problem(m: dict) -> str | None:
    """What is wrong with the manifest's structure, if anything (the readers trust it afterwards)."""
    checks = [
        (m["kind"] in ("image", "audio", "latent"), "kind must be 'image', 'audio' or 'latent'"),
        (m["dtype"] in ("uint8", "float32", "float16"), "dtype must be 'uint8', 'float32' or 'float16'"),
        (
            isinstance(m["sample_shape"], list) and m["sample_shape"] and all(_is_int(d, 1) for d in m["sample_shape"]),
            "sample_shape must be a list of positive ints",
        ),
        (_is_int(m["count"]), "count must be an int >= 0"),
        (isinstance(m["classes"], list) and all(isinstance(c, str) for c in m["classes"]), "classes must be strings"),
        (isinstance(m["digest"], dict) and isinstance(m["digest"].get("total"), str), "digest must hold a total"),
        (
            isinstance(m["formats"], dict) and all(_format_ok(f) for f in m["formats"].values()),
            "each format must be an object listing its files as {path, bytes, sha256}",
        ),
        (
            m.get("audio") is None or isinstance(m["audio"], dict) and _is_int(m["audio"].get("sample_rate"), 1),
            "audio must hold a sample_rate",
        ),
        (m.get("text") is None or _text_ok(m["text"]), "text must hold encoder dims, dtype, counts and its files"),
    ]
    problem = next((message for ok, message in checks if not ok), None)
    return problem or (_latent_problem(m.get("latent"), m["sample_shape"]) if m["kind"] == "latent" else None)


def _latent_problem(latent, sample_shape: list) -> str | None:
    """What the loaders read to turn stored moments into model input (dataprep.latents.encode), checked: a NaN or
    infinite factor would make every delivered value NaN, a zero scaling every value zero."""
    if not isinstance(latent, dict):
        return "latent must be an object (of, views, shape, scaling_factor, shift_factor)"
    factors = [("scaling_factor", "a finite non-zero number"), ("shift_factor", "a finite number")]
    for key, must in factors:
        value = latent.get(key)
        if not _finite(value) or (key == "scaling_factor" and value == 0):
            return f"latent.{key} is {json.dumps(value)[:40]}; must be {must}"
    if latent.get("of") not in ("image", "audio"):
        return "latent.of must be 'image' or 'audio'"
    shape = latent.get("shape")
    if not isinstance(latent.get("views"), list) or not isinstance(shape, list):
        return "latent must hold views and shape as lists"
    if sample_shape != [len(latent["views"]), 2, *shape]:
        return f"latent.views and latent.shape {shape} do not match sample_shape {sample_shape}"
    return None


def _finite(v) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


def _text_ok(text) -> bool:
    enc = text.get("encoder") if isinstance(text, dict) else None
    return (
        isinstance(enc, dict)
        and all(_is_int(enc.get(k), 1) for k in ("dim", "pooled_dim"))
        and text.get("dtype") in ("bf16", "fp16")
        and all(_is_int(text.get(k)) for k in ("captions", "tokens", "max_tokens"))
        and (
            text.get("empty_caption") is None
            or _is_int(text["empty_caption"])
            and text["empty_caption"] < text["captions"]
        )
        and _format_ok(text)
        and "files" in text
    )


def _format_ok(fmt) -> bool:
    if not isinstance(fmt, dict):
        return False
    files = fmt.get("files", [])  # absent: a format described by name only (as bench's tests write them)
    return isinstance(files, list) and all(
        isinstance(f, dict)
        and isinstance(f.get("path"), str)
        and _is_int(f.get("bytes"))
        and isinstance(f.get("sha256"), str)
        for f in files
    )


def resize_line(manifest: dict) -> str:
    r = manifest["resize"]
    return f"to {r.get('size')} x {r.get('size')} at conversion ({r.get('method')})"


def caption_lines(captions) -> list[str]:
    """The captions' lengths (characters and words: min, median, p95, max) and their templates, for `info`."""
    if not isinstance(captions, dict):
        return []

    def spread(key: str) -> str:
        s = captions.get(key) if isinstance(captions.get(key), dict) else {}
        return f"{s.get('min')} / {s.get('median')} / {s.get('p95')} / {s.get('max')} {key}"

    lines = [f"captions: min / median / p95 / max: {spread('chars')}, {spread('words')}; {captions.get('empty')} empty"]
    if isinstance(captions.get("templates"), list):
        lines.append(f"captions: from templates {'; '.join(map(str, captions['templates']))}")
    return lines


def _classes_there(manifest: dict) -> str:
    """How many classes the samples hold: a --limit can leave some of the source's classes out."""
    n, counts = len(manifest["classes"]), manifest.get("class_counts")
    if not isinstance(counts, list) or len(counts) != n:  # written before conversions counted them
        return f"{n} classes"
    there = sum(1 for c in counts if isinstance(c, int) and c > 0)
    return f"{n} classes" if there == n else f"{there} of {n} classes present (the others have no samples)"


def describe(manifest: dict) -> str:
    """A readable summary for `dataprep info`, every string from the manifest with control characters escaped."""
    src = manifest.get("source") if isinstance(manifest.get("source"), dict) else {}
    lines = [
        f"{manifest['count']:,} {manifest['kind']} samples, shape {tuple(manifest['sample_shape'])} "
        f"{manifest['dtype']}, {_classes_there(manifest)}",
        f"source:  {src.get('kind')} {src.get('path') or '(embedded)'} split={src.get('split')}",
        f"classes: {', '.join(manifest['classes'])}",
    ]
    if manifest.get("audio"):
        a = manifest["audio"]
        lines.append(f"audio:   {a['sample_rate']} Hz, {a.get('clip_seconds')} s clips, {a.get('channels')} channel(s)")
    if isinstance(manifest.get("resize"), dict):
        lines.append(f"resized: {resize_line(manifest)}")
    if manifest["kind"] == "latent":
        lat, vae = manifest["latent"], manifest["latent"].get("vae", {})
        lines.append(
            f"latents: {lat['of']} latents {tuple(lat['shape'])}, views {', '.join(lat['views'])}; mean and "
            f"std stored as {manifest['dtype']}, delivered x {lat['scaling_factor']}"
        )
        lines.append(f"vae:     {vae.get('name')} (sha256 {str(vae.get('sha256'))[:16]}...)")
    lines += caption_lines(manifest.get("captions"))
    if isinstance(manifest.get("text"), dict):
        t, enc = manifest["text"], manifest["text"]["encoder"]
        lines.append(
            f"text:    {enc.get('kind')} {enc.get('name')} embeddings ({enc['dim']} per token, {enc['pooled_dim']} "
            f"pooled) as {t['dtype']}, {t['captions']:,} distinct captions, {t['tokens']:,} tokens (at most "
            f"{t['max_tokens']} each)"
        )
    for name, fmt in manifest["formats"].items():
        files = fmt.get("files", [])
        size = sum(f["bytes"] for f in files)
        lines.append(f"format:  {name:6s} {len(files):6,} file(s) {size / 2**20:9.1f} MiB")
    lines.append(f"digest:  {manifest['digest']['total']}")
    if isinstance(manifest.get("skipped"), list) and manifest["skipped"] and isinstance(manifest["skipped"][0], dict):
        lines.append(f"skipped: {len(manifest['skipped'])} bad file(s), e.g. {manifest['skipped'][0].get('path')}")
    lines.append(f"made by: gpufeed {manifest.get('gpufeed_version')} at {manifest.get('created')}")
    lines.append(f"command: {manifest.get('command')}")
    return "\n".join(printable(line) for line in lines)  # classes, paths, the command: data, not terminal controls
