"""Digests of the manifest's own values: which of those that change what the loaders deliver was edited after
conversion.

The sample digest covers the samples, not what the loaders make of them: `latent.scaling_factor` edited to 1000
makes every loader deliver values 2,000 times too large, `count` or `classes` edited make them read past the data or
label it otherwise, and all of it passed `dataprep verify`. So the conversion records, per field, the sha256 of its
canonical JSON (`digest.fields` in the manifest); `verify` and every loader's open check compare them, naming the
field. Objects are followed down to their values, so the name says which value changed (`latent.vae.sha256`, not
`latent`). Not covered: what only describes the conversion (`source`, `command`, `created`, `timings`, `skipped`),
the formats' file lists (each file has its own sha256), and `latent.vae.name`, where the autoencoder was loaded from:
a copy of it in another place is the same autoencoder (its `sha256` is covered, and checked wherever it is loaded), so
the name may be changed when the data moves to another machine; `text.encoder.name` likewise (its `config_sha256` is
covered)."""

from __future__ import annotations

import hashlib
import json

ROOTS = ("kind", "sample_shape", "dtype", "count", "classes", "audio", "resize", "latent", "captions", "text")
MOVABLE = frozenset({"latent.vae.name", "text.encoder.name"})


def _leaves(manifest: dict) -> dict[str, object]:
    """Dotted name -> value, for every value under ROOTS (lists and empty objects are values)."""
    out: dict[str, object] = {}

    def walk(name: str, value) -> None:
        if isinstance(value, dict) and value:
            for key, inner in value.items():
                walk(f"{name}.{key}", inner)
        elif name not in MOVABLE:
            out[name] = value

    for root in ROOTS:
        if root in manifest:
            walk(root, manifest[root])
    return out


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def field_digests(manifest: dict) -> dict[str, str]:
    """What the conversion records in `manifest["digest"]["fields"]`."""
    return {name: hashlib.sha256(_canonical(v).encode()).hexdigest() for name, v in _leaves(manifest).items()}


def changed_fields(manifest: dict) -> list[str] | None:
    """One line per field whose value differs from the one converted, is gone or was added; None when the manifest
    records no field digests (written by a gpufeed that did not record them: nothing can be said)."""
    recorded = _recorded(manifest)
    if recorded is None:
        return None
    if not isinstance(recorded, dict) or not all(isinstance(v, str) for v in recorded.values()):
        return ["digest.fields is not an object of sha256 digests"]
    leaves = _leaves(manifest)
    now = field_digests(manifest)
    problems, named = [], set()  # named: current fields already reported
    for name, digest in recorded.items():
        if name in now and now[name] != digest:
            problems.append(f"{name} (now {_shown(leaves[name])}) differs from what was converted")
        elif name not in now:
            parent = next((p for p in now if name.startswith(p + ".")), None)  # an object replaced by a value
            if parent is not None and parent not in named:
                problems.append(f"{parent} (now {_shown(leaves[parent])}) differs from what was converted")
            elif parent is None and any(n.startswith(name + ".") for n in now):  # a value replaced by an object
                problems.append(f"{name} (now an object) differs from what was converted")
            elif parent is None:
                problems.append(f"{name} is missing (the conversion recorded it)")
            named |= {parent} | {n for n in now if n.startswith(name + ".")}
    problems += [f"{name} was not there at conversion" for name in now if name not in recorded and name not in named]
    return problems


def unchecked_note(manifest: dict) -> str | None:
    """A note for a manifest without field digests, whose values verify cannot check; None when it has them."""
    if _recorded(manifest) is not None:
        return None
    return (
        f"this manifest records no digests of its fields ({', '.join(ROOTS)}), so edits to them cannot be "
        "detected; convert the data again to have them checked"
    )


def _recorded(manifest: dict):
    return manifest["digest"].get("fields") if isinstance(manifest.get("digest"), dict) else None


def _shown(value) -> str:
    """The value as JSON (which escapes control characters), cut short."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
