"""Property-based fuzzing of every parser of outside input: random bytes and random structures give the project's own
typed errors (or a valid result), never another exception."""

from __future__ import annotations

import json
import pickle
import re
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataprep.manifest import ManifestError, describe, load_manifest, require_verifiable
from dataprep.sources import BadSample, InputError
from dataprep.sources.audio import decode_audio
from dataprep.sources.base import AudioSpec
from dataprep.sources.cifar10 import Cifar10Source
from dataprep.sources.kaggle import KaggleSource

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
KEYS = ["kind", "sample_shape", "dtype", "count", "classes", "digest", "formats", "audio", "source", "resize"]
# near-valid manifests: every required key present, each value random or a plausible one, so checks past the first
# are reached; a class named as a folder can be, with a terminal escape (OSC 52 writes the clipboard) in it
PLAUSIBLE = {
    "kind": "image",
    "sample_shape": [2, 2, 3],
    "dtype": "uint8",
    "count": 1,
    "classes": ["a", "b\x1b]52;c;aGk=\x07"],
    "digest": {"total": "0", "chunk_size": 1, "chunks": []},
    "formats": {"hdf5": {"files": []}},
}

# what `dataprep info` prints of an accepted manifest: lines of text, no control character from the data (it would
# drive the terminal)
CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def assert_printable(summary: str) -> None:
    found = CONTROL.search(summary)
    assert found is None, f"control character {found.group()!r} printed: {summary!r}"


@FUZZ
@given(st.binary(max_size=300))
def test_manifest_reader_random_bytes(blob):
    """Random bytes as manifest.json: a ManifestError, or a summary without control characters; nothing else."""
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "manifest.json").write_bytes(blob)
        try:
            summary = describe(load_manifest(d))
        except ManifestError:
            return
        assert_printable(summary)


@FUZZ
@given(st.fixed_dictionaries({}, optional={k: JSON for k in KEYS}), st.sets(st.sampled_from(list(PLAUSIBLE))))
def test_manifest_reader_random_structures(random_values, keep_plausible):
    """Near-valid random manifests: a ManifestError, or a summary without control characters; nothing else."""
    manifest = {**random_values, **{k: PLAUSIBLE[k] for k in keep_plausible}}
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "manifest.json").write_text(json.dumps(manifest))
        try:
            manifest = load_manifest(d)
            summary = describe(manifest)  # what is accepted must also be readable
            require_verifiable(manifest, Path(d))
        except ManifestError:
            return
        assert_printable(summary)


@FUZZ
@given(st.binary(max_size=200) | st.text(max_size=200).map(lambda t: ("id,label\n" + t).encode()))
def test_label_file_random_bytes(blob):
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "trainLabels.csv").write_bytes(blob)
        try:
            labels = KaggleSource._read_labels(Path(d) / "trainLabels.csv")
            assert all(isinstance(k, str) and k and v for k, v in labels.items())
        except InputError:
            pass


PICKLABLE = st.recursive(
    st.none()
    | st.integers()
    | st.binary(max_size=8)
    | st.text(max_size=8)
    | st.builds(lambda n, m: np.zeros((n, m), np.uint8), st.integers(0, 3), st.sampled_from([3, 3072, 5])),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from([b"data", b"labels", b"x"]), inner),
    max_leaves=10,
)


@FUZZ
@given(st.binary(max_size=300), st.booleans())
def test_pickle_batches_random_bytes(blob, pickle_header):
    """Random bytes as a CIFAR-10 batch (some after a protocol-2 header): InputError naming the batch, nothing else."""
    blob = (b"\x80\x02" + blob) if pickle_header else blob
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "batches.meta").write_bytes(pickle.dumps({b"label_names": [b"a", b"b"]}))
        (root / "data_batch_1").write_bytes(blob)
        try:
            list(Cifar10Source(root, "train").chunks(4, "error", 1))
        except InputError as e:
            assert "data_batch_1" in str(e)


@FUZZ
@given(PICKLABLE, PICKLABLE)
def test_cifar_batches_random_structures(meta, batch):
    """Random structures as batches.meta and data_batch_1: the source converts them or raises InputError."""
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "batches.meta").write_bytes(pickle.dumps({b"label_names": meta} if isinstance(meta, list) else meta))
        (root / "data_batch_1").write_bytes(pickle.dumps(batch))
        try:
            for chunk in Cifar10Source(root, "train").chunks(4, "error", 1):
                assert chunk.x.dtype == np.uint8 and chunk.x.shape[1:] == (32, 32, 3)
        except InputError:
            pass


@FUZZ
@given(st.binary(max_size=400), st.sampled_from([".wav", ".flac", ".ogg"]), st.booleans())
def test_audio_decoder_random_bytes(blob, ext, riff_header):
    """Random bytes, some behind a real RIFF/WAVE header so the parser gets past the magic number."""
    if riff_header:
        blob = b"RIFF" + len(blob).to_bytes(4, "little") + b"WAVEfmt " + blob
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"clip{ext}"
        path.write_bytes(blob)
        try:
            x, n = decode_audio(path, AudioSpec(16000, 0.1, 1))
            assert x.shape == (1600,) and x.dtype == np.float32 and 0 < n <= 1600
        except BadSample as e:
            assert str(path) in str(e)
