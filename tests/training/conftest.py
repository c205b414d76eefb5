"""Fixtures of the training tests alone (the shared data and autoencoders are in tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def images64(synthetic_images) -> Path:
    """64 synthetic 32x32 images in HDF5, read-only: the data of the stop, resume and torchrun tests."""
    return synthetic_images(64)
