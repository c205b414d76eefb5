"""Large files' sha256 remembered between runs (dataprep.hashbook): the same file is not read again, a written file
is, a damaged book is ignored, and a text encoder's identity is the same with or without the book."""

from __future__ import annotations

import hashlib
import os

import pytest

import dataprep.digest as digest
import dataprep.hashbook as hashbook
from dataprep.textenc.identity import encoder_sha256


@pytest.fixture
def counted(monkeypatch, tmp_path):
    """Every file counts as large; the book is this test's; `reads` counts the whole-file hashes taken."""
    monkeypatch.setattr(hashbook, "REMEMBER_BYTES", 1)
    monkeypatch.setenv("GPUFEED_HASH_BOOK", str(tmp_path / "book.json"))
    reads = []
    real = digest.stream_sha256

    def stream_sha256(f, *args):
        reads.append(f.name)
        return real(f, *args)

    monkeypatch.setattr(hashbook, "stream_sha256", stream_sha256)
    return reads


def test_the_same_file_is_hashed_once(counted, tmp_path):
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"w" * 1000)
    want = hashlib.sha256(b"w" * 1000).hexdigest()
    assert [hashbook.remembered_sha256(weights) for _ in range(3)] == [want] * 3
    assert len(counted) == 1


def test_a_written_file_is_hashed_again(counted, tmp_path):
    """New contents change the size or the modification time: the book's entry no longer applies."""
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"a" * 1000)
    hashbook.remembered_sha256(weights)
    weights.write_bytes(b"b" * 1000)
    os.utime(weights, ns=(1, 1))  # a time of its own, whatever the clock's resolution
    assert hashbook.remembered_sha256(weights) == hashlib.sha256(b"b" * 1000).hexdigest() and len(counted) == 2


def test_a_damaged_or_unwritable_book_is_ignored(counted, tmp_path, monkeypatch):
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"w" * 1000)
    (tmp_path / "book.json").write_text("{not json")
    assert hashbook.remembered_sha256(weights) == hashlib.sha256(b"w" * 1000).hexdigest()
    monkeypatch.setenv("GPUFEED_HASH_BOOK", str(weights / "under-a-file.json"))  # cannot be made
    assert hashbook.remembered_sha256(weights) == hashlib.sha256(b"w" * 1000).hexdigest()


def test_an_encoders_identity_is_the_same_from_the_book(counted, text_encoders):
    first = encoder_sha256(text_encoders["t5"])
    reads = len(counted)
    assert encoder_sha256(text_encoders["t5"]) == first and len(counted) == reads  # nothing read the second time
