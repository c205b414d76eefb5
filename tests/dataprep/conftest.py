"""Fixtures of the dataprep tests alone (the shared ones, real data and the image autoencoder, are in
tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def audio_vae(tmp_path_factory) -> Path:
    """A tiny AudioLDM-shaped AutoencoderKL directory: a 1-channel log-mel in, 8 latent channels, downsampling 4."""
    from latent_helpers import build_audio_vae

    return build_audio_vae(tmp_path_factory.mktemp("vae") / "audio")
