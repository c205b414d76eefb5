"""What every command line does alike: Ctrl-C ends it with exit status 130 (not click's "Aborted!" and 1), a
renamed option still works under its old name, saying the new one, and a --vae that names nothing usable is refused
before torch or diffusers is imported (it took 5.5 s)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

REPO = Path(__file__).resolve().parents[2]


def interrupted(args: list[str], after_s: float, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run `python -m ARGS` in a process group of its own and send the group SIGINT after `after_s` seconds, as a
    terminal's Ctrl-C does."""
    proc = subprocess.Popen(
        [sys.executable, "-m", *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    time.sleep(after_s)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    # killed by SIGINT (-2) is what a shell reports as 130 too; `python -m` exits that way, now and then, when Ctrl-C
    # lands while torch is being imported, although the command caught the stop and said "stopped by SIGINT"
    return subprocess.CompletedProcess(
        proc.args, 130 if proc.returncode == -signal.SIGINT else proc.returncode, out, err
    )


@pytest.mark.slow
@pytest.mark.parametrize("after_s", [1.0, 4.0])
def test_ctrl_c_in_dataprep_convert_exits_130(tmp_path, after_s):
    """During the imports or the conversion itself: 130, "stopped by SIGINT", no "Aborted!" and no traceback."""
    args = [
        "dataprep",
        "convert",
        "--source",
        "synthetic-images",
        "--limit",
        "2000000",
        "--format",
        "hdf5",
        "--output",
        str(tmp_path / "out"),
        "--quiet",
    ]
    done = interrupted(args, after_s, tmp_path)
    assert done.returncode == 130, done.stderr
    assert "stopped by SIGINT" in done.stderr and "Aborted!" not in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.slow
def test_ctrl_c_while_train_starts_exits_130(synthetic_images, tmp_path):
    """Before the training loop has a step to stop after (imports, the model, the loader): 130 as well."""
    data = synthetic_images(64)
    args = [
        "training",
        "--data",
        str(data),
        "--device",
        "cpu",
        "--model",
        "tiny",
        "--loader",
        "hdf5",
        "--steps",
        "100000",
        "--out",
        str(tmp_path / "run"),
        "--no-progress",
    ]
    done = interrupted(args, 1.0, tmp_path)
    assert done.returncode == 130, done.stderr
    assert "Aborted!" not in done.stderr and "Traceback" not in done.stderr


def test_bench_warmup_is_timing_warmup(tmp_path):
    """`bench loaders --warmup` (the steps left out of the figures) still works, saying its name is now
    --timing-warmup; both together are refused."""
    from bench.cli import cli

    result = CliRunner().invoke(cli, ["loaders", "--data", str(tmp_path), "--warmup", "3"])
    assert "bench loaders: --warmup is now --timing-warmup" in result.output
    assert result.exit_code == 2 and "no manifest.json" in result.output  # it went on to check --data
    result = CliRunner().invoke(cli, ["loaders", "--data", str(tmp_path), "--warmup", "3", "--timing-warmup", "4"])
    assert result.exit_code == 2 and "give --timing-warmup alone" in result.output
    result = CliRunner().invoke(cli, ["watch", "--warmup", "3", "--", "no-such-program-here"])
    assert "bench watch: --warmup is now --timing-warmup" in result.output and result.exit_code == 2


def test_train_warmup_is_lr_warmup(tmp_path):
    """`train --warmup` (the learning-rate warm-up) still works, saying its name is now --lr-warmup; the help says
    which warm-up is which."""
    from training.cli import train

    result = CliRunner().invoke(train, ["--data", str(tmp_path), "--warmup", "0"])
    assert "train: --warmup is now --lr-warmup" in result.output and "dataprep convert" in result.output
    result = CliRunner().invoke(train, ["--data", str(tmp_path), "--warmup", "0", "--lr-warmup", "5"])
    assert result.exit_code == 2 and "give --lr-warmup alone" in result.output
    help_text = CliRunner().invoke(train, ["--help"]).output
    assert "--lr-warmup" in help_text and "learning-rate" in help_text and "--timing-warmup" in help_text
    assert "--warmup " not in help_text.replace("--lr-warmup", "").replace("--timing-warmup", "")


@pytest.mark.parametrize(
    "tool, args",
    [
        ("dataprep.cli:cli", ["convert", "--source", "synthetic-images", "--output", "OUT"]),
        ("training.cli:train", ["--data", "DATA"]),
        ("bench.cli:cli", ["loaders", "--data", "DATA"]),
    ],
)
@pytest.mark.parametrize("vae", ["no-such-dir", "DATA"])  # neither a path nor a hub id; a folder without config.json
def test_a_bad_vae_is_refused_before_torch_is_imported(synthetic_images, tmp_path, tool, args, vae):
    data = str(synthetic_images(64))
    vae = data if vae == "DATA" else vae
    args = [a.replace("DATA", data).replace("OUT", str(tmp_path / "out")) for a in args] + ["--vae", vae]
    module, name = tool.split(":")
    code = f"import sys, json; from click.testing import CliRunner; from {module} import {name} as c; "
    code += f"r = CliRunner().invoke(c, {args!r}); "
    code += "print(json.dumps([r.exit_code, r.output, 'torch' in sys.modules, 'diffusers' in sys.modules]))"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    code, output, torch_imported, diffusers_imported = json.loads(done.stdout.strip().splitlines()[-1])
    assert code == 2 and "Invalid value for --vae" in output and "save_pretrained" in output, output
    assert not torch_imported and not diffusers_imported
