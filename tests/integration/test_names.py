"""One vocabulary across dataprep, train and bench (old spellings kept as hidden aliases), and what a run reports
matches what it used: config, loss, units and words."""

from __future__ import annotations

import json
import re

from click.testing import CliRunner
from training_helpers import tiny_cfg

from bench.cli import cli as bench_cli
from dataprep.cli import cli as dataprep_cli
from training.cli import train as train_cli


def test_dataprep_takes_out_and_no_progress_and_still_the_old_names(tmp_path):
    """`convert --out --no-progress` as train and bench spell them; `--output` and `--quiet` work, hidden."""
    args = ["convert", "--source", "synthetic-images", "--limit", "8", "--format", "hdf5"]
    new = CliRunner().invoke(dataprep_cli, [*args, "--out", str(tmp_path / "a"), "--no-progress"])
    old = CliRunner().invoke(dataprep_cli, [*args, "--output", str(tmp_path / "b"), "--quiet"])
    assert new.exit_code == old.exit_code == 0, (new.output, old.output)
    assert (tmp_path / "a" / "manifest.json").is_file() and (tmp_path / "b" / "manifest.json").is_file()
    assert "convert:" not in new.stderr + old.stderr  # no progress bar either way
    shown = CliRunner().invoke(dataprep_cli, ["convert", "--help"]).output
    assert "--out " in shown and "--no-progress" in shown and "--output" not in shown and "--quiet" not in shown
    both = CliRunner().invoke(dataprep_cli, [*args, "--out", "x", "--output", "y"])
    assert both.exit_code == 2 and "give --out alone" in both.output


def test_device_help_is_one_sentence_and_fastest_takes_model_auto():
    """`--device` says the same in train, bench loaders and bench fastest; bench fastest's --model defaults to auto."""
    helps = [
        CliRunner().invoke(cmd, [*sub, "--help"], terminal_width=300).output
        for cmd, sub in ((train_cli, []), (bench_cli, ["loaders"]), (bench_cli, ["fastest"]))
    ]
    said = {re.search(r"--device TEXT\s+(.*)", h)[1].strip() for h in helps}
    assert said == {"cuda, cuda:N or cpu [default: cuda when present]."}, said
    assert re.search(r"--model \[auto\|.*?\[default: auto\]", helps[2], re.S), helps[2]


def test_a_cpu_run_reports_what_it_used(synthetic_images, tmp_path, capsys):
    """summary.json's config has the workers and pin_memory used (no page-locked copies on a CPU), the progress
    bar's last loss is the log line's, rates are samples/s, "1 worker", and early samples are said to be noise."""
    from training.loop import main
    from training.summary import lines, record

    out = tmp_path / "run"
    cfg = tiny_cfg(synthetic_images(64), out, loader="hdf5", workers=1, pin_memory=True, steps=4, log_every=2)
    cfg.progress, cfg.sample_every, cfg.sample_count, cfg.sample_steps = True, 4, 4, 2
    rec = record(main(cfg).to_dict(), out)
    assert (rec["config"]["workers"], rec["config"]["pin_memory"]) == (1, False)
    err = capsys.readouterr().err
    logged = re.findall(r"step 4: loss (\S+), \d+ samples/s", err)
    assert logged and re.findall(r"loss=(\S+?),", err)[-1] == logged[-1], err
    said = "\n".join(lines(rec))
    assert ", 1 worker:" in said and "samples after 4 steps are noise, as expected" in said
    assert json.loads(json.dumps(rec, default=str))["config"]["threads"] >= 1
