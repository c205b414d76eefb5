"""Strings from data reach the terminal with control characters escaped: class names, the recorded command, the
source path, the autoencoder's name and skipped files in `dataprep info`; names quoted by errors of `convert` and
`verify`; `bench` lines and `train`'s closing summary. Every string here carries OSC 52 (which writes the
terminal's clipboard) or a cursor movement, made the way a user would meet it: folder and file names, a command."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from click.testing import CliRunner
from dataprep_helpers import random_images
from PIL import Image

from dataprep.cli import cli
from dataprep.convert import ConvertConfig, convert

OSC52 = "\x1b]52;c;ZWNobyBoaQ==\x07"  # base64 of "echo hi", for the clipboard
CSI = "\x1b[2J"  # clear the screen


def _clean(output: str) -> None:
    """No ESC or BEL reaches the terminal; what was there is shown escaped."""
    assert "\x1b" not in output and "\x07" not in output, repr(output)
    assert "\\x1b" in output, output


def _folder(root: Path, cls: str, n: int = 3) -> Path:
    (root / cls).mkdir(parents=True)
    for i, img in enumerate(random_images(n)):
        Image.fromarray(img).save(root / cls / f"{i}.png")
    return root


def test_info_escapes_classes_command_source_and_skipped(tmp_path):
    """An input folder named with a screen-clearing sequence, a class folder with OSC 52, a damaged file whose name
    carries one (skipped), and a command line with one: `dataprep info` shows each escaped."""
    root = _folder(tmp_path / f"in{CSI}", f"cat{OSC52}")
    (root / f"cat{OSC52}" / f"bad{CSI}.png").write_bytes(b"not a png")
    out = tmp_path / "o"
    convert(
        ConvertConfig(
            output=out,
            input=root,
            formats=("hdf5",),
            workers=1,
            progress=False,
            on_bad_file="skip",
            command=f"dataprep convert {OSC52}",
        )
    )
    r = CliRunner().invoke(cli, ["info", str(out)])
    assert r.exit_code == 0, r.output
    _clean(r.output)
    assert "classes: cat\\x1b]52;c;ZWNobyBoaQ==\\x07" in r.output
    assert "command: dataprep convert \\x1b]52;c;ZWNobyBoaQ==\\x07" in r.output
    assert "in\\x1b[2J" in r.output and "bad\\x1b[2J.png" in r.output


def test_info_escapes_the_autoencoder_name(image_vae, tmp_path):
    """Latents made by an autoencoder in a directory named with OSC 52: `info`'s vae line shows it escaped."""
    vae = tmp_path / f"vae{OSC52}"
    shutil.copytree(image_vae, vae)
    out = tmp_path / "o"
    convert(
        ConvertConfig(
            output=out,
            source="synthetic-images",
            limit=4,
            formats=("hdf5",),
            vae=str(vae),
            device="cpu",
            batch_size=4,
            workers=1,
            progress=False,
        )
    )
    r = CliRunner().invoke(cli, ["info", str(out)])
    assert r.exit_code == 0, r.output
    _clean(r.output)
    assert "vae\\x1b]52;c;ZWNobyBoaQ==\\x07" in r.output


def test_errors_quoting_names_escape_them(tmp_path):
    """A damaged input file, an output path and a manifest entry carrying escape sequences: `convert` and `verify`
    fail naming them escaped."""
    root = _folder(tmp_path / "in", "cat")
    (root / "cat" / f"x{OSC52}.png").write_bytes(b"not a png")
    r = CliRunner().invoke(cli, ["convert", "--input", str(root), "--output", str(tmp_path / "o"), "--quiet"])
    assert r.exit_code == 1 and "x\\x1b]52;" in r.output, r.output
    _clean(r.output)
    (tmp_path / f"taken{CSI}").write_text("a file")
    r = CliRunner().invoke(
        cli,
        [
            "convert",
            "--source",
            "synthetic-images",
            "--limit",
            "2",
            "--output",
            str(tmp_path / f"taken{CSI}"),
            "--overwrite",
            "--quiet",
        ],
    )
    assert r.exit_code == 1 and "taken\\x1b[2J: exists and is not a directory" in r.output, r.output
    out = tmp_path / "set"
    convert(
        ConvertConfig(output=out, source="synthetic-images", limit=4, formats=("files",), workers=1, progress=False)
    )
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["formats"]["files"]["files"].append({"path": f"files/{OSC52}.png", "bytes": 1, "sha256": "0" * 64})
    (out / "manifest.json").write_text(json.dumps(manifest))
    r = CliRunner().invoke(cli, ["verify", str(out)])
    assert r.exit_code == 1
    assert "\x1b" not in r.output and "\x07" not in r.output, repr(r.output)


def test_bench_report_and_train_summary_escape(tmp_path):
    """`bench report` refusing a results folder named with a screen-clearing sequence, and `train`'s closing lines
    naming a loader reason and run files that carry OSC 52: shown escaped."""
    from bench.cli import cli as bench_cli
    from training.summary import lines

    results = tmp_path / f"r{CSI}"
    results.mkdir()
    r = CliRunner().invoke(bench_cli, ["report", str(results)])
    assert r.exit_code == 1 and "r\\x1b[2J" in r.output, r.output
    _clean(r.output)
    rec = {
        "config": {"model": "tiny", "device": "cpu"},
        "loader": {"workers": 2, "reason": f"chosen {OSC52}"},
        "steps": 10,
        "wall_s": 3.0,
        "samples_per_s": np.float64(100.0),
        "final_loss": 0.5,
        "backend": "hdf5",
        "files": {"summary": f"run{OSC52}/summary.json", "metrics": f"run{OSC52}/metrics.jsonl"},
    }
    shown = "\n".join(lines(rec))
    _clean(shown)
    assert "chosen \\x1b]52;c;ZWNobyBoaQ==\\x07" in shown
