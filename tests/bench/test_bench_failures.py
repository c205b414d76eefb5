"""`bench loaders` when a configuration crashes, hangs or runs out of memory: recorded as failed in its JSON, and the
grid goes on. A damaged result JSON is skipped with a warning naming it by `bench report` and `train --loader
fastest`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest
from test_bench_fastest import write

from bench.grid.runner import GridConfig, run_grid
from bench.records.results import ResultWarning, load_records
from bench.report.tables import write_report

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def image_data(synthetic_images) -> Path:
    return synthetic_images(1024, ("files", "hdf5"))


def interfere(out: Path, actions: dict[str, signal.Signals], stop: threading.Event) -> None:
    """Send each backend's run_one child its signal as soon as it appears (before it can finish)."""
    done: set[str] = set()
    while not stop.is_set() and len(done) < len(actions):
        for p in psutil.process_iter(["cmdline"]):
            cmd = " ".join(p.info["cmdline"] or [])
            if "bench.grid.run_one" not in cmd or str(out) not in cmd:
                continue
            job = json.loads(p.info["cmdline"][p.info["cmdline"].index("--job") + 1])
            backend = job["backend"]
            if job.get("kind") == "loader" and backend in actions and backend not in done:
                p.send_signal(actions[backend])
                done.add(backend)
        time.sleep(0.02)


@pytest.mark.slow
def test_a_crashed_and_a_hung_configuration_are_recorded_and_the_grid_goes_on(image_data, tmp_path):
    """torch's run dies of SIGSEGV (a crash in a native library), hdf5's is stopped (SIGSTOP: a hang) and outlives
    --timeout 8; both are recorded as failed with the reason, gpu's still runs, and the report is written. Then a
    damaged copy of a result is skipped by the report with a warning naming it."""
    out = tmp_path / "results"
    cfg = GridConfig(
        data=image_data,
        out=out,
        backends=("torch", "hdf5", "gpu"),
        workers=(0,),
        pin_memory=(False,),
        batch_sizes=(32,),
        model="none",
        steps=3,
        warmup=1,
        device="cpu",
        progress=False,
        timeout_s=8,
    )
    stop = threading.Event()
    watcher = threading.Thread(target=interfere, args=(out, {"torch": signal.SIGSEGV, "hdf5": signal.SIGSTOP}, stop))
    watcher.start()
    t0 = time.monotonic()
    try:
        outcome = run_grid(cfg, echo=lambda _: None)
    finally:
        stop.set()
        watcher.join()
    assert time.monotonic() - t0 < 120
    records = {r["job"]["backend"]: r for r in load_records(out)}
    assert "killed by SIGSEGV" in records["torch"]["error"]
    assert "timed out after 8 s" in records["hdf5"]["error"]
    assert "figures" in records["gpu"] and records["gpu"]["figures"]["samples_per_s"] > 0
    # (the preset's data-free run beside a loader-only grid is not under test: 8 s may not fit it on a loaded CPU)
    failed_loaders = [n for n in outcome.failed if not n.startswith("datafree")]
    assert sorted(failed_loaders) == sorted(records[b]["name"] for b in ("torch", "hdf5"))
    assert [p.stem for p in outcome.done if not p.stem.startswith("datafree")] == [records["gpu"]["name"]]
    assert not [p for p in psutil.process_iter(["cmdline"]) if str(out) in " ".join(p.info["cmdline"] or [])]

    good = out / f"{records['gpu']['name']}.json"
    damaged = out / "zz-damaged-copy.json"
    damaged.write_bytes(good.read_bytes()[:300])
    with pytest.warns(ResultWarning, match=f"{damaged}: skipped, not a readable bench result"):
        md = write_report(out).read_text()
    assert "gpu" in md and "zz-damaged" not in md


@pytest.mark.slow
def test_a_configuration_out_of_memory_is_recorded_and_the_grid_goes_on(image_data, tmp_path):
    """The grid under a 4 GiB address-space limit (RLIMIT_AS, inherited by its children): the batch-1024 runs of the
    tiny model cannot allocate their activations and are recorded as failed with the allocator's error; the batch-32
    runs after them finish."""
    out = tmp_path / "results"
    code = textwrap.dedent(f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
        from pathlib import Path
        from bench.grid.runner import GridConfig, run_grid
        cfg = GridConfig(data=Path({str(image_data)!r}), out=Path({str(out)!r}), backends=("hdf5",), workers=(0,),
                         pin_memory=(False,), batch_sizes=(1024, 32), model="tiny", steps=2, warmup=0, device="cpu",
                         precision="fp32", progress=False)
        outcome = run_grid(cfg)
        print("FAILED", len(outcome.failed), "DONE", len(outcome.done))
    """)
    env = os.environ | {"PYTHONPATH": str(REPO), "MALLOC_ARENA_MAX": "2", "OMP_NUM_THREADS": "2"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = {r["name"]: r for r in load_records(out)}
    big = [r for r in records.values() if r["job"]["batch_size"] == 1024]
    small = [r for r in records.values() if r["job"]["batch_size"] == 32]
    assert len(big) == len(small) == 2
    for r in big:
        assert "can't allocate memory" in r["error"] or "MemoryError" in r["error"], r["error"]
    for r in small:
        assert "figures" in r, r.get("error")
    assert "FAILED 2 DONE 2" in proc.stdout


def test_a_damaged_result_is_skipped_by_fastest_with_a_warning(tmp_path):
    """The best result truncated, another replaced by garbage, a third with figures of the wrong type: `fastest`
    warns naming each and picks from the rest."""
    from bench.fastest import choose
    from dataprep.convert import ConvertConfig, convert

    data = tmp_path / "data"
    convert(
        ConvertConfig(output=data, source="synthetic-images", limit=64, formats=("hdf5",), workers=1, progress=False)
    )
    digest = json.loads((data / "manifest.json").read_text())["digest"]["total"]
    res = tmp_path / "r"
    write(res, "hdf5", 2, 1000, 0.0, 1.0, digest=digest)
    write(res, "gpu", None, 2000, 0.0, 1.0, digest=digest)
    write(res, "torch", 4, 3000, 0.0, 1.0, digest=digest)
    write(res, "hdf5", 4, 4000, 0.0, 1.0, digest=digest)
    paths = {
        json.loads(p.read_text())["job"]["backend"] + str(json.loads(p.read_text())["job"]["workers"]): p
        for p in res.glob("*.json")
    }
    paths["hdf54"].write_bytes(paths["hdf54"].read_bytes()[:-40])
    paths["torch4"].write_bytes(os.urandom(200))
    rec = json.loads(paths["gpuNone"].read_text())
    paths["gpuNone"].write_text(json.dumps(rec | {"figures": "damaged"}))
    with pytest.warns(ResultWarning) as caught:
        c = choose(data, device="cpu", model="tiny", batch_size=64, results_dir=res)
    warned = " ".join(str(w.message) for w in caught)
    assert all(str(paths[k]) in warned for k in ("hdf54", "torch4", "gpuNone"))
    assert (c.backend, c.workers) == ("hdf5", 2)
