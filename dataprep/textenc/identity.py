"""Which text encoder made a table of caption embeddings: the sha256 of its folder (weights as saved and tokenizer),
recorded in the manifest by `convert --text-encoder` and checked before an encoder encodes prompts or the empty
caption for that data."""

from __future__ import annotations

import hashlib
import threading
from concurrent.futures import Future
from pathlib import Path

from common.paths import open_regular

from ..hashbook import remembered_sha256
from .base import TextEncoderError


def config_sha256(folder: Path) -> str:
    with open_regular(folder / "config.json") as f:
        return hashlib.sha256(f.read()).hexdigest()


def encoder_sha256(folder: Path) -> str:
    """sha256 over a text encoder folder's files (names and contents, in name order): the weights as saved, whatever
    dtype a process loads them in, and the tokenizer, which decides the tokens as much as the weights do. The
    weights' own hashes are remembered between runs (dataprep.hashbook)."""
    h = hashlib.sha256()
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        h.update(path.relative_to(folder).as_posix().encode() + b"\0")
        h.update(remembered_sha256(path).encode())
    return h.hexdigest()


def sha256_soon(folder: Path) -> Future:
    """encoder_sha256(folder), computed on a thread of its own (hashlib lets go of the GIL). 5 GB and 5 s for a
    T5-XL-sized encoder: hashed after the last caption, it halved that conversion's caption rate; a conversion starts
    it before importing and loading the encoder. A daemon thread: a process that fails first does not wait for it."""
    done: Future = Future()

    def run() -> None:
        try:
            done.set_result(encoder_sha256(folder))
        except BaseException as e:  # raised where the result is asked for
            done.set_exception(e)

    threading.Thread(target=run, name="text-encoder-sha256", daemon=True).start()
    return done


def check_encoder_identity(encoder, text: dict, data: str) -> None:
    """Raise TextEncoderError unless `encoder` is the one whose embeddings a manifest's `text` entry describes: its
    kind and the sha256 of its folder (its place may differ). Prompts or the empty caption encoded by another encoder
    would live in another embedding space than the cached captions, and training would go on without an error."""
    recorded = text.get("encoder") if isinstance(text.get("encoder"), dict) else {}
    have = encoder_sha256(Path(encoder.name))
    if recorded.get("kind") == encoder.kind and recorded.get("sha256") == have:
        return
    raise TextEncoderError(
        f"{encoder.name} ({encoder.kind}, sha256 {have[:16]}...) is not the text encoder that made the caption "
        f"embeddings of {data}: {recorded.get('name')} ({recorded.get('kind')}, sha256 "
        f"{str(recorded.get('sha256'))[:16]}...); pass that one, drop --text-encoder, or convert the data again"
    )
