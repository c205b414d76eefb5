"""Fixtures of the loader tests alone (the SeaweedFS server and the shared data are in tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def small_shards():
    """Stream shards of ~128 KiB (42 images) instead of 16 MiB, so a few hundred images make many shards."""
    import dataprep.formats.stream as stream

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(stream, "SHARD_BYTES", 128 << 10)
        yield
