"""`bench loaders` end to end on a small real dataset (CPU): the grid's expansion, one JSON per configuration from a
fresh process, the data-free ratio, CSV, Markdown and plots, and Ctrl-C keeping finished configurations."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from bench.grid.job import BACKEND_NAMES, collapse, estimate_s, expand
from bench.grid.runner import GridConfig, finished, run_grid
from bench.report.tables import write_report

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def image_data(tmp_path_factory) -> Path:
    """256 synthetic CIFAR-shaped images as plain files and HDF5 (8 batches of 32)."""
    from dataprep.convert import ConvertConfig, convert

    out = tmp_path_factory.mktemp("bench") / "img"
    convert(
        ConvertConfig(
            output=out, source="synthetic-images", limit=256, formats=("files", "hdf5"), workers=1, progress=False
        )
    )
    return out


def test_knobs_a_backend_ignores_are_collapsed(monkeypatch):
    """gpu runs once, ffcv/dali treat 0 workers as 1 and ignore pin_memory, nothing is pinned on a CPU device (on a
    host where numba allows FFCV 16 threads: on fewer cores its 4 and 8 workers are one configuration)."""
    monkeypatch.setenv("NUMBA_NUM_THREADS", "16")
    assert collapse("gpu", 8, True, "cuda") == (None, None)
    assert collapse("ffcv", 0, True, "cuda") == (1, None)
    assert collapse("torch", 4, True, "cpu") == (4, None)
    assert collapse("hdf5", 0, False, "cuda") == (0, False)
    jobs = expand(
        data=Path("d"),
        backends=BACKEND_NAMES,
        workers=(0, 4, 8),
        pin_memory=(True, False),
        batch_sizes=(128,),
        model="ddpm_cifar10",
        steps=200,
        warmup=20,
        device="cuda",
        cpus=None,
        compile=True,
        repeats=2,
    )
    per_repeat = 6 + 6 + 3 + 3 + 1 + 6 + 1  # torch, hdf5, stream: 3x2; ffcv, dali: workers 1,4,8; gpu once; data-free
    assert len(jobs) == 2 * per_repeat and len({j.name for j in jobs}) == len(jobs)
    assert [j.repeat for j in jobs] == [0] * per_repeat + [1] * per_repeat  # a Ctrl-C leaves whole repeats
    assert 60 < estimate_s(jobs) < 3600


@pytest.mark.slow
def test_tiny_grid_writes_json_csv_report_and_plots(image_data, tmp_path):
    """torch, hdf5, gpu with the loader alone, hdf5 and gpu with the tiny model: all recorded, ratios, verdicts."""
    out = tmp_path / "results"
    common = dict(
        data=image_data,
        out=out,
        backends=("torch", "hdf5", "gpu"),
        workers=(0,),
        pin_memory=(True, False),
        batch_sizes=(32,),
        steps=3,
        warmup=1,
        device="cpu",
        progress=False,
    )
    lines: list[str] = []
    first = run_grid(GridConfig(model="none", **common), echo=lines.append)
    second = run_grid(GridConfig(model="tiny", **common | {"backends": ("hdf5", "gpu")}), echo=lines.append)
    # the loader alone is set against tiny's data-free rate (the preset on CPU), which the second grid measures again
    assert "3 loader runs and 1 data-free run (0 already done), estimated" in lines[0]
    assert "2 loader runs and 1 data-free run" in lines[1]
    assert not first.failed and not second.failed and len(first.done) + len(second.done) == 7

    records = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    assert len(records) == 6
    for name, rec in records.items():
        f = rec["figures"]
        assert f["samples_per_s"] > 0 and 0 <= f["starvation"]["starvation"] <= 1, name
        assert f["starvation"]["source"] == "host-wait" and f["first_batch_s"] > 0
        assert f["cpu_cores"] > 0 and f["peak_mem_mib"] > 50
        assert rec["data"]["digest"] and rec["run"]["versions"]["torch"] and rec["run"]["command"].startswith("bench")
    trained = records["hdf5-w0-pinna-bs32-tiny-cpusall-bf16-cpu-r0"]
    free = records["datafree-bs32-tiny-cpusall-bf16-cpu-r0"]["figures"]["samples_per_s"]
    assert trained["data_free_rate"] == pytest.approx(free)
    assert trained["vs_data_free"] == pytest.approx(trained["figures"]["samples_per_s"] / free)
    assert "input-bound" in trained["verdict"] and "data-free" in trained["verdict"]
    alone = records["torch-w0-pinna-bs32-none-cpusall-bf16-cpu-r0"]
    assert "loader ceiling" in alone["verdict"] and "what tiny eats here" in alone["verdict"]
    assert alone["headroom"] == pytest.approx(alone["figures"]["samples_per_s"] / free)

    with open(out / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 6 and {r["backend"] for r in rows} == {"torch", "hdf5", "gpu", ""}

    md = write_report(out).read_text()
    assert "## none, batch 32, cpu" in md and "## tiny, batch 32, cpu" in md and "Data-free rate" in md
    assert md.count("Best configuration per backend") == 2
    for png in out.glob("plot-*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    assert len(list(out.glob("plot-*.png"))) == 2


@pytest.mark.slow
def test_compiled_grid_compiles_once(image_data, tmp_path, monkeypatch):
    """With --compile the first configuration's process builds the model's kernels and saves them to the compile
    cache; the next configuration's fresh process loads them and builds no graph."""
    monkeypatch.setenv("GPUFEED_COMPILE_CACHE", str(tmp_path / "cache"))
    # the grid's own local cache, empty: torch sets this variable in any process that compiled before, and the grid
    # keeps a value it finds (/tmp/torchinductor_USER, warm from earlier runs, would give the first process hits)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    cfg = GridConfig(
        data=image_data,
        out=tmp_path / "results",
        backends=("gpu",),
        batch_sizes=(8,),
        model="tiny",
        steps=2,
        warmup=1,
        device="cpu",
        compile=True,
        precision="fp32",
        progress=False,
    )
    outcome = run_grid(cfg, echo=lambda line: None)
    assert not outcome.failed and len(outcome.done) == 2
    records = sorted((json.loads(p.read_text()) for p in cfg.out.glob("*.json")), key=lambda r: r["run"]["when"])
    first, second = (r["figures"]["compile"] for r in records)  # in the order they ran: the grid rewrites records
    assert "none yet" in first["cache"]["note"] and Path(first["cache"]["saved"]).parent == tmp_path / "cache"
    assert first["caches"]["fxgraph_cache_miss"] >= 2
    assert second["cache"]["loaded"]["inductor"] >= 2 and second["caches"].get("fxgraph_cache_miss", 0) == 0


def _run_one_children(out: Path) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "bench.grid.run_one" in cmd and str(out) in cmd:
            found.append(p)
    return found


@pytest.mark.slow
def test_ctrl_c_keeps_finished_configurations(image_data, tmp_path):
    """SIGINT during the second configuration: exit 130, the first JSON kept whole, no child left, CSV written."""
    out = tmp_path / "results"
    cmd = [
        sys.executable,
        "-m",
        "bench",
        "loaders",
        "--data",
        str(image_data),
        "--backends",
        "hdf5,torch",
        "--workers",
        "0",
        "--batch-size",
        "32",
        "--model",
        "none",
        "--steps",
        "3000",
        "--timing-warmup",
        "1",
        "--device",
        "cpu",
        "--out",
        str(out),
        "--no-progress",
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, stderr=subprocess.PIPE, text=True)
    first = out / "hdf5-w0-pinna-bs32-none-cpusall-fp32-cpu-r0.json"  # fp32: a CPU's default precision
    deadline = time.time() + 150
    while not (first.exists() and _run_one_children(out)) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    time.sleep(2)  # the torch configuration (about a minute of steps) is under way
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "--resume" in err
    assert json.loads(first.read_text())["figures"]["samples_per_s"] > 0
    assert not (out / "torch-w0-pinna-bs32-none-cpusall-fp32-cpu-r0.json").exists()
    assert not list(out.glob(".*tmp*")) and (out / "results.csv").exists()
    assert not _run_one_children(out)
    # --resume skips exactly the finished job, not one that differs in any setting
    cfg = GridConfig(
        data=image_data,
        out=out,
        backends=("hdf5", "torch"),
        workers=(0,),
        batch_sizes=(32,),
        steps=3000,
        warmup=1,
        device="cpu",
        precision="fp32",  # what the command took on a CPU
    )
    hdf5, torch_job, _ = cfg.jobs()  # the preset's data-free run last
    assert finished(first, hdf5) and not finished(out / f"{torch_job.name}.json", torch_job)
    cfg.steps = 10
    assert not finished(first, cfg.jobs()[0])


@pytest.mark.slow
def test_time_limit_leaves_the_rest_for_resume_under_one_grid_id(image_data, tmp_path):
    """`--time-limit` shorter than any run: only the data-free run (first) runs, exit 0 and a hint; `--resume` runs the
    rest as the same grid, which is what `fastest` reads."""
    from click.testing import CliRunner

    from bench.cli import cli
    from bench.records.results import load_records

    out = tmp_path / "results"
    args = [
        "loaders",
        "--data",
        str(image_data),
        "--backends",
        "hdf5,gpu",
        "--workers",
        "0",
        "--pin-memory",
        "on",
        "--batch-size",
        "32",
        "--model",
        "tiny",
        "--steps",
        "3",
        "--timing-warmup",
        "1",
        "--device",
        "cpu",
        "--out",
        str(out),
        "--no-progress",
    ]
    first = CliRunner().invoke(cli, [*args, "--time-limit", "0.001"])
    assert first.exit_code == 0, first.output
    assert "time limit: 2 runs not started" in first.output and "--resume" in first.output
    assert "no loader run finished yet" in first.output and len(load_records(out)) == 1
    second = CliRunner().invoke(cli, [*args, "--resume"])
    assert second.exit_code == 0 and "(1 already done)" in second.output and "results.md" in second.output
    assert len({r["job"]["grid_id"] for r in load_records(out)}) == 1 and len(load_records(out)) == 3
    assert "done in" in (out / "grid.log").read_text()


def test_a_grid_resumed_on_another_gpu_measures_its_own_data_free_rate(tmp_path):
    """Ratios pair runs of one GPU: resumed elsewhere, the first data-free run is kept under its GPU's name and runs
    again; on its own GPU, or with no loader run left, nothing moves."""
    from bench.grid.runner import set_aside_foreign_data_free

    cfg = GridConfig(
        data=tmp_path,
        out=tmp_path,
        backends=("hdf5",),
        workers=(0,),
        pin_memory=(True,),
        model="tiny",
        repeats=2,
        device="cuda",
    )
    jobs = cfg.jobs()
    free0, hdf5_r0, free1, hdf5_r1 = jobs
    for job, gpu in ((free0, "aaaaaaaa-1"), (hdf5_r0, "aaaaaaaa-1"), (free1, "bbbbbbbb-2")):
        rec = {"job": job.to_dict(), "figures": {}, "run": {"hardware": {"gpu_uuid": gpu}}}
        (tmp_path / f"{job.name}.json").write_text(json.dumps(rec))
    done, said, asked = [free0, hdf5_r0, free1], [], []

    def on(gpu: str):
        return lambda: asked.append(gpu) or gpu

    assert set_aside_foreign_data_free(tmp_path, done, jobs, on("bbbbbbbb-2"), said.append) == done
    assert set_aside_foreign_data_free(tmp_path, done, jobs[:3], on("cccccccc-3"), said.append) == done
    assert len(asked) == 1 and not said  # asked only while a loader run is left
    (tmp_path / f"{free0.name}-gpuaaaaaaaa.json").write_text("{}")  # an earlier set-aside is never overwritten
    left = set_aside_foreign_data_free(tmp_path, done, jobs, on("cccccccc-3"), said.append)
    assert left == [hdf5_r0, free1] and not (tmp_path / f"{free0.name}.json").exists()
    kept = json.loads((tmp_path / f"{free0.name}-gpuaaaaaaaa-1.json").read_text())
    assert kept["run"]["hardware"]["gpu_uuid"] == "aaaaaaaa-1" and "measuring this GPU" in said[0]


def test_a_child_that_dies_silently_is_not_taken_for_an_earlier_result(image_data, tmp_path, monkeypatch):
    """A run that exits before writing anything (here: more --cpus than exist) is recorded as failed, even where an
    earlier grid's JSON of the same name holds figures; and no child sees torchrun's variables (it would try to join
    the training job's process group)."""
    import os

    from bench.grid.runner import child_env, run_job

    job = expand(
        data=image_data,
        backends=("hdf5",),
        workers=(0,),
        pin_memory=(False,),
        batch_sizes=(32,),
        model="none",
        steps=3,
        warmup=1,
        device="cpu",
        cpus=None,
        compile=False,
        repeats=1,
    )[0]
    job.cpus = len(os.sched_getaffinity(0)) + 1
    path = tmp_path / f"{job.name}.json"
    path.write_text(json.dumps({"name": job.name, "job": job.to_dict(), "figures": {"samples_per_s": 1.0}}))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_PORT", "29500")
    env = child_env(GridConfig(data=image_data, out=tmp_path))
    assert "WORLD_SIZE" not in env and "MASTER_PORT" not in env
    with open(tmp_path / "grid.log", "ab") as log:
        assert not run_job(job, path, env, 120, log)
    assert "wrote nothing" in json.loads(path.read_text())["error"]


@pytest.mark.gpu
@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_cuda_grid_runs_in_fresh_processes(image_data, tmp_path, device):
    """What a GPU run of `bench loaders` does: each configuration in its own `bench.grid.run_one` process, timed with
    CUDA events, its GPU named by uuid and sampled through NVML. (Every GPU run once failed in the child, unseen by the
    in-process GPU tests: `set_device("cuda")` has no index.)"""
    out = tmp_path / "results"
    cfg = GridConfig(
        data=image_data,
        out=out,
        backends=("gpu",),
        workers=(0,),
        pin_memory=(True,),
        batch_sizes=(32,),
        model="tiny",
        steps=5,
        warmup=2,
        device=device,
        progress=False,
    )
    outcome = run_grid(cfg, echo=lambda line: None)
    assert not outcome.failed and len(outcome.done) == 2, (out / "grid.log").read_text()[-3000:]
    for path in outcome.done:
        rec = json.loads(path.read_text())
        f, hw = rec["figures"], rec["run"]["hardware"]
        assert f["starvation"]["source"] == "cuda-events" and f["samples_per_s"] > 0, path.name
        assert hw["gpu_uuid"] and hw["gpu"], path.name
        assert f.get("nvml_samples", 0) >= 1 and f["nvml_gpu_util_pct"] is not None, path.name
