"""`bench` CLI: every bad option is refused with a message that says what to do, before anything runs."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from bench.cli import cli


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def manifest_only(tmp_path):
    """A directory that looks prepared (the CLI checks only for the manifest before the grid starts)."""
    d = tmp_path / "data"
    d.mkdir()
    (d / "manifest.json").write_text(json.dumps({"kind": "image", "formats": {}}))
    return d


def invoke(runner, *args):
    return runner.invoke(cli, ["loaders", *args, "--device", "cpu", "--out", "unused"])


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--backends", "torch,pytorch", "unknown backend 'pytorch'; valid: torch, hdf5, ffcv, dali, gpu"),
        ("--backends", "torch,,gpu", "comma-separated list"),
        ("--workers", "0,four", "expected whole numbers, e.g. 0,4,8"),
        ("--workers", "0,-4", "must be >= 0"),
        ("--batch-size", "0", "must be >= 1"),
        ("--pin-memory", "yes", "'yes': use on, off or on,off"),
        ("--cpus", "4096", "4096 cores asked"),
        ("--crosscheck", None, "needs GPU kernels"),
    ],
)
def test_bad_options_name_the_fix(runner, manifest_only, option, value, message):
    """A wrong list or value exits 2 with the option named and the valid values or an example."""
    args = ["--data", str(manifest_only), option] + ([value] if value is not None else [])
    result = invoke(runner, *args)
    assert result.exit_code == 2, result.output
    assert message in result.output and option in result.output


def test_data_without_manifest_is_refused(runner, tmp_path):
    """A directory that `dataprep convert` did not write is refused, pointing at dataprep."""
    result = invoke(runner, "--data", str(tmp_path))
    assert result.exit_code == 2 and "no manifest.json" in result.output and "dataprep convert" in result.output


def test_cuda_without_a_gpu_is_refused(runner, manifest_only):
    """--device cuda on a machine without CUDA says to use --device cpu."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    result = runner.invoke(cli, ["loaders", "--data", str(manifest_only), "--device", "cuda"])
    assert result.exit_code == 2 and "--device cpu" in result.output


def test_report_on_a_directory_without_results(runner, tmp_path):
    """`bench report` on a directory with no bench JSONs fails with a message, not a traceback."""
    result = runner.invoke(cli, ["report", str(tmp_path)])
    assert result.exit_code == 1 and "no finished bench results" in result.output


def test_help_is_instant_and_lists_the_options():
    """`bench loaders --help` imports neither torch nor a loader library, and lists every option."""
    t0 = time.perf_counter()
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\nfrom bench.cli import main\nsys.argv=['bench','loaders',"
            "'--help']\ntry:\n main()\nexcept SystemExit:\n pass\nprint('torch' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip().endswith("False") and time.perf_counter() - t0 < 10
    for option in (
        "--data",
        "--backends",
        "--workers",
        "--pin-memory",
        "--batch-size",
        "--model",
        "--steps",
        "--timing-warmup",
        "--device",
        "--cpus",
        "--compile",
        "--repeats",
        "--out",
    ):
        assert option in out
