"""bench/studies/cold_start.py's variants: a checkout and Inductor settings per variant, refused with the expected form
when malformed, and the settings made in the `train` process before it starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.studies.cold_start import LAUNCH, table, variant

REPO = Path(__file__).resolve().parents[2]


def test_a_variant_names_a_checkout_and_inductor_settings():
    light = variant(f"light={REPO},triton.autotune_pointwise=False,compile_threads=4")
    assert light == {
        "name": "light",
        "code": str(REPO),
        "inductor": {"triton.autotune_pointwise": False, "compile_threads": 4},
    }
    assert variant(f"this={REPO}")["inductor"] == {}


@pytest.mark.parametrize("spec", ["noequals", "=.", "x=/no/such/checkout", f"x={REPO},key=not a literal"])
def test_a_malformed_variant_is_refused_with_the_form(spec):
    with pytest.raises(SystemExit, match="NAME=DIR|KEY=<Python literal>"):
        variant(spec)


def launch(settings: dict) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", LAUNCH, json.dumps(settings), "--help"]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # starts `train`: 10 s; the variants' forms stay in make test
def test_the_launcher_sets_inductor_then_runs_train():
    done = launch({"triton.autotune_pointwise": False})
    assert done.returncode == 0 and "Usage: train" in done.stdout, done.stderr[-2000:]
    bad = launch({"triton.no_such_setting": 1})
    assert bad.returncode != 0 and "no_such_setting" in bad.stderr


def test_the_table_has_a_row_per_variant_and_start():
    def run(name: str, since: float) -> dict:
        compile_record = {
            "since_launch_s": since,
            "timed_since_launch_s": since + 2,
            "first_step_s": since - 5,
            "phases_s": {},
            "caches": {},
        }
        return {"name": name, "variant": name.split("-")[0], "samples_per_s": 100.0, "compile": compile_record}

    rows = table([run("a-cold-0", 90), run("a-warm-0", 20), run("b-cold-0", 80), run("a-warm-1", 30)])
    lines = rows.splitlines()[2:]
    assert [line.split(" | ")[:4] for line in lines] == [
        ["| a", "cold", "1", "90.0"],
        ["| a", "warm", "2", "25.0"],
        ["| b", "cold", "1", "80.0"],
    ]
