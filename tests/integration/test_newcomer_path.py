"""The newcomer's path through the README (scripts/newcomer_path.sh) runs end to end in CI-sized form: the demo's
main job, the main job on real CIFAR-10 JPEGs, the object-storage section against a real SeaweedFS, and the latent
section on a CPU with an autoencoder made offline."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # 10 minutes on 2 cores other work kept busy (load 13): 20 commands, each importing torch
def test_the_newcomer_path_runs_as_the_readme_types_it(cifar_jpg_root, seaweed, tmp_path):
    """Every section of the path exits 0 and says what the README says it will (no section skipped)."""
    env = os.environ | {
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "PYTHONPATH": str(REPO),
        "IMAGES": str(cifar_jpg_root),
        "LIMIT": "64",
        "STEPS": "3",
        "BENCH": "--steps 3 --timing-warmup 1",
        "BUCKET": seaweed.bucket(),
    }
    r = subprocess.run(
        ["bash", str(REPO / "scripts" / "newcomer_path.sh"), str(tmp_path / "w")],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    said = r.stdout + r.stderr
    assert r.returncode == 0, said[-4000:]
    assert "Traceback" not in said and "skipped: no store" not in said
    assert said.count("wrote 64 samples to") == 4 and "done: every step of the path ran" in said
    assert "stream, 1 worker" in said and "random weights" in said and "next, with your own data" in said
