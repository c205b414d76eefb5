"""Every way `train` offers has a row in docs/BENCHMARKS.md; the ways no measurement earned are gone, and an old
checkpoint or bench record naming one still loads, saying what is used instead."""

from __future__ import annotations

import re
from pathlib import Path

import click

from bench.grid.job import Job
from training.checkpoint import load_checkpoint, save_checkpoint
from training.cli import train

BENCHMARKS = Path(__file__).resolve().parents[2] / "docs" / "BENCHMARKS.md"


def test_train_help_lists_only_ways_with_a_row_in_benchmarks():
    """Every choice of --grad-sync and --precision but auto (the pick among them) is named in a table row of
    docs/BENCHMARKS.md, auto and --compile-traced-program in its text, and no compile mode is offered."""
    text = BENCHMARKS.read_text()
    rows = "\n".join(line for line in text.splitlines() if line.startswith("|"))
    options = {p.name: p for p in train.params}
    assert "compile_mode" not in options
    for name in ("grad_sync", "precision"):
        choices = options[name].type.choices
        assert isinstance(options[name].type, click.Choice) and choices
        for choice in choices:
            where = text if choice == "auto" else rows
            assert re.search(rf"\b{re.escape(choice)}\b", where), f"--{name.replace('_', '-')} {choice}: no row"
    assert "--compile-traced-program" in text and options["compile_traced_program"]


def test_an_old_checkpoint_naming_removed_ways_loads_as_what_replaced_them(tmp_path):
    """A checkpoint saved with fp16 (and its loss scaler), --grad-sync flat and a compile mode no longer offered
    resumes as bf16, step-graph and reduce-overhead, one line for each saying so."""
    path = tmp_path / "ckpt.pt"
    config = {"batch_size": 8, "seed": 0, "world_size": 1, "lr": 1e-3}
    old = config | {"precision": "fp16", "grad_sync": "flat", "compile_mode": "max-autotune"}
    save_checkpoint(path, {"model_config": {}, "train_config": old, "scaler": {"scale": 65536.0}, "step": 2})
    state = load_checkpoint(path, model_config={}, train_config=config | {"precision": "bf16"})
    assert state["train_config"] | config == config | {
        "precision": "bf16",
        "grad_sync": "step-graph",
        "compile_mode": "reduce-overhead",
    }
    assert state["replaced"] == [
        f"{path} was saved with precision=fp16, no longer offered: bf16 is used instead "
        "(bf16 autocast needs no loss scaling)",
        f"{path} was saved with grad_sync=flat, no longer offered: step-graph is used instead "
        "(its one all-reduce is the step graph's)",
        f"{path} was saved with compile_mode=max-autotune, no longer offered: reduce-overhead is used instead "
        "(torch.compile's CUDA graphs measured fastest)",
    ]


def test_an_old_bench_job_naming_a_removed_way_runs_what_replaced_it(capsys):
    """A bench record's job with --grad-sync ddp-bucket100 and fp16 loads as ddp and bf16, saying so on stderr."""
    job = Job.from_dict(
        {"kind": "data_free", "data": "d", "backend": None, "workers": None, "pin_memory": None, "batch_size": 8}
        | {"model": "tiny", "steps": 3, "warmup": 1, "device": "cpu", "cpus": None, "compile": False}
        | {"precision": "fp16", "grad_sync": "ddp-bucket100", "nproc": 2}
    )
    assert (job.precision, job.grad_sync) == ("bf16", "ddp")
    err = capsys.readouterr().err
    assert "bench: a job with grad_sync=ddp-bucket100, no longer offered: ddp is used instead" in err
    assert "bench: a job with precision=fp16, no longer offered: bf16 is used instead" in err
