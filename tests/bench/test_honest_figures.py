"""Figures that cannot be facts are not printed as facts: a loader faster than the data-free rate shows how noisy the
runs were (and what ties within that), a busy machine is named, a rate says how many steps it rests on, and a CPU run
prints no GPU figures or GPU names."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from click.testing import CliRunner
from test_bench_fastest import write

from bench.grid.monitor import ResourceMonitor
from bench.records.results import group
from bench.records.verdicts import verdict
from bench.report.answer import summarize
from training.summary import lines, timed_steps


def _group(backend: str, workers: int | None, rate: float, vs: float) -> dict:
    return {
        "backend": backend,
        "workers": workers,
        "pin_memory": None,
        "device": "cpu",
        "model": "tiny",
        "samples_per_s": rate,
        "starvation": 0.001,
        "vs_data_free": vs,
        "host_behind": None,
    }


def test_a_rate_above_the_data_free_rate_is_called_noise_and_hides_no_gain():
    """hdf5 at 135% of the data-free rate: no loader can beat it, so the rates vary by 35% or more, and torch's 10%
    lead over hdf5 is no gain to report."""
    torch_, hdf5 = _group("torch", 0, 110.0, 1.485), _group("hdf5", 0, 100.0, 1.35)
    said = verdict(hdf5, [torch_, hdf5])
    assert "135% of the data-free rate (above it: the rates here vary by 49% or more)" in said
    assert "helped most" not in said and "nothing in this grid did better beyond its run-to-run spread" in said
    quiet = verdict(_group("hdf5", 0, 100.0, 0.95), [_group("torch", 0, 110.0, 0.99), _group("hdf5", 0, 100.0, 0.95)])
    assert "backend -> torch, 0 workers helped most (+10%" in quiet and "above it" not in quiet


def test_a_busy_machine_is_named_in_the_answer(tmp_path):
    """Runs during which other programs held the cores: the answer says it cannot tell, once, and ranks nothing."""
    res = tmp_path / "r"
    write(res, None, None, 8.0, 0.0, 0.6, kind="data_free")
    write(res, "hdf5", 0, 122.0, 0.006, 1.8)
    write(res, "gpu", None, 11.0, 0.0, 0.7)
    for path in res.glob("datafree-*.json"):  # the data-free run met a machine two other programs kept busy
        rec = json.loads(path.read_text())
        rec["figures"] |= {"other_cores": 1.4, "other_share": 0.7}
        path.write_text(json.dumps(rec))
    from bench.records.results import finalize

    text, record = summarize(res, finalize(res), [])
    said = "\n".join(text)
    assert said.count("other programs took") == 1 and "slowest" not in said and "tie" not in said
    assert "cannot tell on this machine now: other programs took 70% of the cores during the runs" in said
    assert record["scenarios"][0]["best"] is None and record["scenarios"][0]["busy"] == 0.7


def test_the_monitor_counts_other_programs_cores():
    """A program outside the watched process tree spinning on a core shows up as other_cores, not as the tree's."""
    spin = f"{sys.executable} -c 'import time\nt = time.time()\nwhile time.time() - t < 5: pass' >/dev/null 2>&1 &"
    subprocess.run(["sh", "-c", spin], check=True)  # the shell exits: the spinner is no child of this process
    time.sleep(0.5)
    with ResourceMonitor(interval=0.1) as m:
        t0 = time.perf_counter()
        time.sleep(2.0)
        t1 = time.perf_counter()
    figures = m.figures(t0, t1)
    assert figures["other_cores"] > 0.6 and figures["cpu_cores"] < 0.3


def test_a_rate_says_how_many_steps_it_rests_on():
    assert timed_steps({"steps": 180, "untimed_steps": 20}, {"timing_warmup": 20}) == " over 180 timed steps"
    short = timed_steps({"steps": 3, "untimed_steps": 2}, {"timing_warmup": 2})
    assert short == " over 3 timed steps (too few to trust: run 12 or more --steps)"
    warm = timed_steps({"steps": 2, "untimed_steps": 18}, {"timing_warmup": 20})
    assert "warm-up steps among them" in warm and "--timing-warmup 20" in warm and "not a rate to compare" in warm


def test_a_cpu_run_prints_no_gpu_figures(synthetic_images, tmp_path):
    """No TFLOP/s, MFU or device memory on a CPU's log lines; the resident loader is named for what it is there;
    starvation says what it is a share of; the rate says how many steps it rests on, and a short run says so first."""
    from training.cli import train

    data = synthetic_images(64)
    args = [
        "--data",
        str(data),
        "--loader",
        "gpu",
        "--steps",
        "4",
        "--log-every",
        "2",
        "--device",
        "cpu",
        "--batch-size",
        "8",
        "--out",
        str(tmp_path / "run"),
        "--no-progress",
    ]
    result = CliRunner().invoke(train, args)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "step 2: loss" in out and "TFLOP/s" not in out and "MFU" not in out and " GiB" not in out
    assert "loader: gpu (dataset resident in RAM here: no GPU)" in out
    assert "starvation " in out and "(the share of time training waited for data)" in out
    assert "over 2 timed steps (too few to trust: run 12 or more --steps)" in out
    assert "train: 4 steps with --timing-warmup 2 leave 2 timed: the rate will be a rough figure" in out
    rec = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert rec["starvation"]["steps"] == 2 and rec["starvation"]["untimed_steps"] == 2
    assert lines(rec)[0] == result.stdout.splitlines()[0]


def test_groups_keep_how_busy_the_machine_was():
    rows = [
        {
            "kind": "loader",
            "crosscheck": False,
            "error": "",
            "digest": "d",
            "device": "cpu",
            "model": "tiny",
            "batch_size": 8,
            "cpus": None,
            "precision": "fp32",
            "compile": False,
            "nproc": 1,
            "grad_sync": "ddp",
            "backend": "hdf5",
            "workers": 0,
            "pin_memory": None,
            "samples_per_s": r,
            "starvation": 0.0,
            "other_share": share,
            "grid_id": "g",
            "name": f"n{r}",
        }
        for r, share in ((10.0, 0.05), (11.0, 0.4))
    ]
    (g,) = group(rows)
    assert g["other_share_max"] == 0.4


def test_rates_a_few_percent_apart_plot_from_zero_on_a_linear_axis(tmp_path):
    """A log axis over a few percent zooms into run-to-run noise; a starving baseline beside the rest keeps it."""
    from bench.report.plots import plot_scenario, rate_scale

    assert rate_scale([26_351, 26_234, 26_487]) == "linear"
    assert rate_scale([7_017, 25_708, None]) == "log"
    groups = [
        {"backend": b, "workers": 1, "pin_memory": None, "model": "ddpm_cifar10", "samples_per_s": rate}
        | {"starvation": 0.002, "cpu_s_per_1k_samples": 0.07}
        for b, rate in (("ffcv", 26_324), ("stream", 26_398))
    ]
    path = plot_scenario(groups, [{"samples_per_s": 26_351, "model": "ddpm_cifar10"}], tmp_path / "p.png", "near")
    assert path.stat().st_size > 10_000
