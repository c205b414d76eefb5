"""`bench soak`: a short CPU training run with DataLoader workers recorded over time (memory, fds, threads,
children), its plot and summary, and a command that leaves a process behind is caught."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from bench.cli import cli

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_short_training_run_is_recorded_flat_with_nothing_left_running(cifar_small, tmp_path):
    out = tmp_path / "soak"
    train = f"{sys.executable} -m training --data {cifar_small} --out {tmp_path / 'run'} --loader hdf5 --workers 2"
    train += " --model tiny --batch-size 8 --steps 100000 --precision fp32 --device cpu --sample-every 0"
    train += " --log-every 50 --ckpt-every 0 --no-progress --no-pin-memory"
    args = ["soak", "--out", str(out), "--interval", "0.5", "--duration", "30", "--warmup", "10", "--grace", "20"]
    os.environ["PYTHONPATH"] = str(REPO)
    result = CliRunner().invoke(cli, [*args, "--", *train.split()])
    summary = json.loads((out / "resources-summary.json").read_text())
    q = summary["quantities"]
    print(result.output)
    assert summary["exit_status"] == 128 + signal.SIGTERM and summary["stopped_after_s"] == 30
    assert summary["samples"] >= 40 and summary["left_running"] == []
    assert q["children"]["max"] == 2, "two persistent DataLoader workers"
    assert q["rss_mib"]["after_warmup"] > 100 and q["fds"]["after_warmup"] > 10
    for key in ("fds", "threads", "children", "rss_mib"):
        assert q[key]["flat"], (key, q[key])
    assert result.exit_code == 0, result.output
    lines = (out / "resources.jsonl").read_text().splitlines()
    assert len(lines) == summary["samples"] and json.loads(lines[-1])["t_s"] >= 29
    assert (out / "resources.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_process_left_behind_is_reported(tmp_path):
    """A command that starts a detached sleeper and exits: the sleeper is listed and the soak fails."""
    code = "import subprocess, time; subprocess.Popen(['sleep', '60'], start_new_session=True); time.sleep(1)"
    result = CliRunner().invoke(
        cli,
        [
            "soak",
            "--out",
            str(tmp_path),
            "--interval",
            "0.05",
            "--warmup",
            "0",
            "--grace",
            "1",
            "--",
            sys.executable,
            "-c",
            code,
        ],
    )
    summary = json.loads((tmp_path / "resources-summary.json").read_text())
    left = summary["left_running"]
    for p in left:
        psutil.Process(p["pid"]).kill()
    assert result.exit_code == 1 and summary["exit_status"] == 0
    assert [p["cmdline"] for p in left] == ["sleep 60"]
