"""Fixtures of the integration tests alone (the shared data and autoencoders are in tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def sd_vae(tmp_path_factory) -> Path:
    """An AutoencoderKL shaped as Stable Diffusion's (random weights, built from its config): the GPU tests' encoder."""
    from bench.studies.latent_cache import build_vaes

    out = tmp_path_factory.mktemp("vaes")
    build_vaes(out)
    return out / "sd"
