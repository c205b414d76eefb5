"""`train --loader fastest`: the choice from bench results (the 1% starvation and 99%-of-data-free bar, ties by the
measured spread going to fewer cores, latest grid, same data/device/model/batch only), and the in-process probe when
there are none."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from bench.fastest.choice import choose, latest_groups, measured_spread, pick
from bench.fastest.probe_plan import ProbeConfig
from bench.grid.job import Job
from bench.records.results import finalize, load_records
from bench.records.rows import flat

DIGEST = "ab" * 32


@pytest.fixture(scope="module")
def small_data(tmp_path_factory) -> Path:
    """128 synthetic images, HDF5 only: the probe can use hdf5 and gpu."""
    from dataprep.convert import ConvertConfig, convert

    out = tmp_path_factory.mktemp("fastest") / "img"
    convert(
        ConvertConfig(output=out, source="synthetic-images", limit=128, formats=("hdf5",), workers=1, progress=False)
    )
    return out


def write(
    results: Path,
    backend: str,
    workers: int | None,
    rate: float,
    starvation: float,
    cores: float,
    *,
    grid: str = "20261122T100000Z",
    digest: str = DIGEST,
    model: str = "tiny",
    batch: int = 64,
    pin: bool | None = None,
    repeat: int = 0,
    precision: str = "bf16",
    compile: bool = False,
    kind: str = "loader",
    other_share: float | None = None,
) -> None:
    """A result JSON as bench.grid.run_one writes it, with just the fields the choice reads
    (bench.records.results.finalize adds the data-free ratios, as after a grid)."""
    job = Job(
        kind=kind,
        data="d",
        backend=backend,
        workers=workers,
        pin_memory=pin,
        batch_size=batch,
        model=model,
        steps=200,
        warmup=20,
        device="cpu",
        cpus=None,
        compile=compile,
        precision=precision,
        repeat=repeat,
        grid_id=grid,
    )
    rec = {
        "name": job.name + grid,
        "job": job.to_dict(),
        "data": {"digest": digest},
        "run": {"hardware": {"cpus_allowed": 2}},
        "figures": {
            "samples_per_s": rate,
            "cpu_cores": cores,
            "other_share": other_share,
            "starvation": {
                "starvation": starvation,
                "source": "host-wait",
                "wait_median_ms": 1.0,
                "wait_p95_ms": 1.0,
                "wait_max_ms": 1.0,
            },
        },
    }
    results.mkdir(parents=True, exist_ok=True)
    (results / f"{rec['name']}.json").write_text(json.dumps(rec))
    finalize(results)


@pytest.fixture
def data_dir(tmp_path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    manifest = {
        "kind": "image",
        "formats": {"hdf5": {}},
        "digest": {"total": DIGEST},
        "sample_shape": [32, 32, 3],
        "dtype": "uint8",
        "count": 1000,
        "classes": ["a", "b"],
    }
    (d / "manifest.json").write_text(json.dumps(manifest))
    return d


def test_starvation_over_one_percent_loses_to_a_slower_fed_loader(data_dir, tmp_path):
    """The fastest configuration starving 2% loses to a slower one under 1%."""
    res = tmp_path / "r"
    write(res, "torch", 8, 1000, 0.02, 3.0)
    write(res, "hdf5", 2, 900, 0.005, 3.0)
    c = choose(data_dir, device="cpu", model="tiny", batch_size=64, results_dir=res)
    assert (c.backend, c.workers, c.batch_size) == ("hdf5", 2, 64)
    assert "under 1% starvation" in c.reason and str(res) in c.reason


def test_ties_follow_the_overlap_of_repeats_not_a_fixed_margin(data_dir, tmp_path):
    """Two repeats each: ranges 1.0% apart that do not overlap are not a tie (the faster wins although it keeps more
    cores busy); ranges that overlap are, and the configuration using fewer cores wins."""
    res = tmp_path / "r"
    for r, (a, b) in enumerate(((1000, 994), (1004, 990))):
        write(res, "hdf5", 8, a, 0.002, 6.0, repeat=r)
        write(res, "ffcv", 2, b, 0.001, 2.0, repeat=r)
    c = choose(data_dir, device="cpu", model="tiny", batch_size=64, results_dir=res)
    assert (c.backend, c.workers) == ("hdf5", 8)
    write(res, "ffcv", 2, 1001, 0.001, 2.0, repeat=2)  # ffcv's range now 990-1001 overlaps hdf5's 1000-1004
    c = choose(data_dir, device="cpu", model="tiny", batch_size=64, results_dir=res)
    assert (c.backend, c.workers) == ("ffcv", 2) and "1 more tie" in c.reason and "fewest CPU cores" in c.reason


@pytest.mark.parametrize(
    "free, winner, spread_said",
    [
        ((990, 995), "hdf5", "0.5% spread, the range of 2 data-free runs"),  # 0.8% apart > 0.5% spread
        ((990, 1010), "ffcv", "2.0% spread, the range of 2 data-free runs"),  # 0.8% apart < 2% spread: a tie
        ((1001,), "ffcv", "1.0% spread, the default 1%"),  # not repeated: the default spread
        # hdf5 ran above the one data-free run: no loader can, so the rates vary at least that much
        ((990,), "ffcv", "1.0% spread, at least that much: hdf5, 8 workers ran at 101% of the data-free rate"),
    ],
)
def test_single_runs_tie_within_the_spread_of_the_data_free_runs(data_dir, tmp_path, free, winner, spread_said):
    """One run each, 0.8% apart: the faster wins unless the data-free runs of the same grid spread more than that,
    or a loader ran faster than the data-free rate by more than that. The reason names the one it did not take."""
    res = tmp_path / "r"
    for r, rate in enumerate(free):
        write(res, None, None, rate, 0.0, 1.0, kind="data_free", repeat=r)
    write(res, "hdf5", 8, 1000, 0.002, 6.0)
    write(res, "ffcv", 2, 992, 0.001, 2.0)
    c = choose(data_dir, device="cpu", model="tiny", batch_size=64, results_dir=res)
    assert c.backend == winner
    assert (spread_said in c.reason) == (winner == "ffcv")  # the reason names the spread when it decided a tie
    assert ("(hdf5, 8 workers)" in c.reason) == (winner == "ffcv")  # and which configuration is tied with the pick


def test_the_pick_must_reach_99_percent_of_the_data_free_rate(data_dir, tmp_path):
    """The H100 case: ffcv at 98.9% of the data-free rate, 0.2 core cheaper than the resident gpu loader at 99.8%, one
    run each: within any spread of each other, but only gpu is at the bar."""
    res = tmp_path / "r"
    write(res, None, None, 5000, 0.0, 1.0, kind="data_free")
    write(res, "ffcv", 4, 4945, 0.001, 1.4)
    write(res, "gpu", None, 4990, 0.0, 1.6)
    c = choose(data_dir, device="cpu", model="tiny", batch_size=64, results_dir=res)
    assert c.backend == "gpu" and "99.8% of the data-free rate" in c.reason


def archived_records(archive: Path) -> list[dict]:
    """The bench records at the top of a committed raw.tar.xz, in name order as load_records reads a directory, read
    in memory: nothing is unpacked into the checkout."""
    with tarfile.open(archive) as tar:
        members = sorted((m for m in tar.getmembers() if m.isfile() and "/" not in m.name), key=lambda m: m.name)
        recs = [json.load(tar.extractfile(m)) for m in members if m.name.endswith(".json")]
    return [r for r in recs if isinstance(r, dict) and "job" in r]


def test_committed_h100_results_pick_by_the_measured_spread():
    """Finding 1's committed JSONs (ddpm_cifar10 compiled, batch 128, four H100s, two repeats each): the data-free
    runs spread 0.8%; hdf5 with 8 workers and pinned memory (4,983 samples/s, 99.8%) ties by overlapping repeats with
    the fastest median (torch, 4 workers, pinned) and keeps the fewest cores of those tied. ffcv with 8 threads
    (98.6-99.4%, median 98.97%) is below the bar."""
    raw = Path(__file__).resolve().parents[2] / "bench" / "results" / "f1_cifar10_bs128" / "raw.tar.xz"
    rows = [flat(r) for r in archived_records(raw) if "figures" in r]
    groups = latest_groups(rows)
    spread, where = measured_spread(rows, groups[0]["grid_id"])
    assert spread == pytest.approx(0.0084, abs=1e-4) and "4 data-free runs" in where
    win, why = pick(groups, spread, where)
    assert (win["backend"], win["workers"], win["pin_memory"]) == ("hdf5", 8, True)
    assert win["vs_data_free"] >= 0.99 and "2 more tie with it" in why
    by = {(g["backend"], g["workers"], g["pin_memory"]): g for g in groups}
    assert by[("ffcv", 8, None)]["vs_data_free"] < 0.99


def test_a_grid_resumed_on_another_gpu_ties_by_one_gpus_spread():
    """Finding 1's cells at 0 and 8 workers ran on two H200s (data-free 6,825-6,858 and 7,011-7,017 samples/s): the
    spread is the wider of one GPU's runs (0.5%), not the 2.8% between the GPUs, which would tie every loader with
    the fastest."""
    results = Path(__file__).resolve().parents[2] / "bench" / "results" / "f1_more_h200"
    rows = [flat(json.loads(p.read_text())) for p in sorted(results.glob("*-r*.json"))]
    groups = latest_groups(rows)
    spread, where = measured_spread(rows, groups[0]["grid_id"])
    assert spread == pytest.approx((6858 - 6825) / 6841.8, abs=2e-4)
    assert "the widest of 2 GPUs'" in where


def test_the_report_gives_each_gpus_data_free_rate(tmp_path):
    """The report of a grid resumed on another GPU gives each GPU's data-free rate apart, as its loader runs are set
    against them, not one median over both."""
    import shutil

    from bench.report.tables import write_report

    for p in (Path(__file__).resolve().parents[2] / "bench" / "results" / "f1_more_h200").glob("*-r*.json"):
        shutil.copy(p, tmp_path)
    text = write_report(tmp_path).read_text()
    assert "GPU e2fa6d60: median 6,842 samples/s, range 6,825–6,858 over 2 runs" in text
    assert "GPU 3432a458: median 7,014 samples/s, range 7,011–7,017 over 2 runs" in text


def test_median_of_repeats_and_only_matching_latest_results_count(data_dir, tmp_path):
    """Other data, model, batch size, precision or compile setting never count; an older grid is ignored; repeats are
    combined by median."""
    res = tmp_path / "r"
    write(res, "gpu", None, 5000, 0.0, 1.0, digest="cd" * 32)
    write(res, "gpu", None, 5000, 0.0, 1.0, model="ddpm_cifar10")
    write(res, "gpu", None, 5000, 0.0, 1.0, batch=128)
    write(res, "gpu", None, 5000, 0.0, 1.0, precision="fp32")
    write(res, "gpu", None, 5000, 0.0, 1.0, compile=True)
    write(res, "gpu", None, 4000, 0.0, 1.0, grid="20261121T000000Z")  # yesterday's grid
    write(res, "torch", 4, 700, 0.0, 1.0)
    write(res, "hdf5", 4, 1000, 0.0, 1.0)
    for r, rate in enumerate((100, 650, 800)):  # median 650 < 700 although one run beat it
        write(res, "hdf5", 8, rate * 2, 0.0, 1.0, repeat=r)
    c = choose(data_dir, device="cpu", model="tiny", batch_size=64, results_dir=res)
    assert (c.backend, c.workers) == ("hdf5", 8) and "1,300 samples/s" in c.reason
    write(res, "hdf5", 8, 10, 0.0, 1.0, repeat=3)
    write(res, "hdf5", 8, 10, 0.0, 1.0, repeat=4)
    assert choose(data_dir, device="cpu", model="tiny", batch_size=64, results_dir=res).backend == "hdf5"
    assert choose(data_dir, device="cpu", model="tiny", batch_size=64, results_dir=res).workers == 4


def test_when_everything_starves_the_fastest_is_taken_and_the_reason_says_so(data_dir, tmp_path):
    """No configuration under 1%: the fastest anyway, with the reason saying none was fed."""
    res = tmp_path / "r"
    write(res, "torch", 0, 100, 0.30, 1.0)
    write(res, "torch", 4, 300, 0.05, 4.0)
    c = choose(data_dir, device="cpu", model="tiny", batch_size=64, results_dir=res)
    assert c.workers == 4 and "none of 2 configurations was under 1% starvation" in c.reason


@pytest.mark.slow
def test_no_results_measures_in_process_first(small_data, monkeypatch):
    """With no results, the probe measures in this process: the data-free rate twice, ceilings (hdf5 and gpu here), the
    pick confirmed in the training loop; it writes bench records to DATA/.gpufeed-bench that a second call reads."""
    quick = ProbeConfig(segment_s=0.0, min_steps=2, warmup=1, loader_warmup=1, workers_cpu=(0,))
    monkeypatch.setattr(ProbeConfig, "for_device", classmethod(lambda cls, device: quick))
    monkeypatch.delenv("GPUFEED_BENCH_RESULTS", raising=False)
    c = choose(small_data, device="cpu", model="tiny", batch_size=16, precision="fp32")  # fp32: quicker CPU steps
    assert c.backend in ("hdf5", "gpu") and "measured in this process first" in c.reason
    out = small_data / ".gpufeed-bench"
    recs = load_records(out)
    free = sorted(r["job"]["repeat"] for r in recs if r["job"]["kind"] == "data_free")
    confirmed = [r for r in recs if r["job"]["kind"] == "loader"]
    assert free == [0, 1] and confirmed and all(r["vs_data_free"] > 0 for r in confirmed)
    noise = "cannot tell on this machine now" in c.reason  # a busy machine: the default (bench.fastest.noise)
    assert noise or c.backend in {r["job"]["backend"] for r in confirmed}  # the pick ran in the training loop
    (summary,) = [json.loads(p.read_text()) for p in out.glob("fastest-probe-*.json")]
    ceilings = {c["config"][0]: c for c in summary["ceilings"]}
    assert ceilings["gpu"]["samples_per_s"] > 0 and summary["times"]["total_s"] > 0
    again = choose(small_data, device="cpu", model="tiny", batch_size=16, precision="fp32")
    assert "from bench results in" in again.reason and (again.backend, again.workers) == (c.backend, c.workers)


def test_train_loader_fastest_uses_the_choice(small_data, tmp_path, monkeypatch):
    """The training loop with --loader fastest trains with the configuration bench picked from the results."""
    from dataprep.manifest import load_manifest
    from training.config import TrainConfig
    from training.loop import main

    res = tmp_path / "r"
    digest = load_manifest(small_data)["digest"]["total"]
    write(res, "hdf5", 0, 1000, 0.0, 1.0, digest=digest, batch=16)
    write(res, "gpu", None, 500, 0.0, 1.0, digest=digest, batch=16)
    monkeypatch.setenv("GPUFEED_BENCH_RESULTS", str(res))
    cfg = TrainConfig(
        data=small_data,
        loader="fastest",
        model="tiny",
        batch_size=16,
        steps=3,
        device="cpu",
        timing_warmup=1,
        ckpt_every=0,
        sample_every=0,
        progress=False,
        out=tmp_path / "run",
    )
    assert main(cfg).backend == "hdf5"


def test_data_free_rate_pairs_runs_of_the_same_gpu():
    """A grid resumed on another machine: each loader run is set against the data-free runs of its own GPU, and
    against all of them only where its GPU measured none. Runs of the same name on two machines both count."""
    from bench.records.results import attach_data_free

    def rec(kind: str, rate: float, uuid: str | None) -> dict:
        job = Job(
            kind=kind,
            data="d",
            backend="gpu" if kind == "loader" else None,
            workers=None,
            pin_memory=None,
            batch_size=64,
            model="tiny",
            steps=200,
            warmup=20,
            device="cuda",
            cpus=None,
            compile=False,
        )
        hw = {"gpu_uuid": uuid} if uuid else {}
        waits = {"wait_median_ms": 0, "wait_p95_ms": 0, "wait_max_ms": 0}
        figures = {"samples_per_s": rate, "starvation": {"starvation": 0.0, "source": "cuda-events", **waits}}
        return {"name": f"{kind}-r1", "job": job.to_dict(), "run": {"hardware": hw}, "figures": figures}

    records = [
        rec("data_free", 1000.0, "A"),
        rec("data_free", 900.0, "B"),
        rec("loader", 990.0, "A"),
        rec("loader", 891.0, "B"),
        rec("loader", 950.0, "C"),
    ]
    attach_data_free(records)
    assert [r.get("data_free_rate") for r in records[2:]] == [1000.0, 900.0, 950.0]
    assert records[2]["vs_data_free"] == pytest.approx(0.99) and records[3]["vs_data_free"] == pytest.approx(0.99)


def test_verdict_names_a_host_that_falls_behind():
    """A run that is 92% of the data-free rate at 2.5% starvation, the host behind on every step (pin_memory off in
    finding 1): the verdict must say where the rest went; a fed run at 0% behind must not, nor a run whose starvation
    accounts for its shortfall."""
    from bench.records.verdicts import verdict

    g = dict(model="tiny", device="cuda", starvation=0.025, vs_data_free=0.92, host_behind=1.0, samples_per_s=4600.0)
    assert "host fell behind the GPU on 100% of the steps (a synchronising copy" in verdict(g, [])
    assert "host fell behind" not in verdict(g | dict(vs_data_free=0.998, host_behind=0.0), [])
    # finding 3: torch, 0 workers, 95.3% at 4.2% starvation, behind on 77% of steps (it loads each batch itself): the
    # waits explain the shortfall, so no copy is blamed
    assert "host fell behind" not in verdict(g | dict(vs_data_free=0.953, starvation=0.042, host_behind=0.77), [])
    # finding 2: eager `tiny` on 4 cores is behind on every step with no input at all (launch-bound), no copy to blame
    launch_bound = verdict(g | dict(data_free_host_behind=1.0), [])
    assert "as it does with no input at all" in launch_bound and "pin_memory" not in launch_bound


def test_verdict_names_epoch_starts():
    """Finding 9's plain DataLoader on 2 cores: 3.9% starvation, most of it at the first batch of an epoch, where it
    starts its workers again; the verdict says so and names the DataLoader's knob (only for the DataLoader). A run that
    barely waited, or waited elsewhere, is not told about epoch starts."""
    from bench.records.verdicts import verdict

    g = dict(model="dit_b2_text", device="cuda", backend="torch", starvation=0.039, vs_data_free=0.965)
    g |= dict(samples_per_s=2166.0, epoch_start_idle=0.94)
    said = verdict(g, [])
    assert "94% of that at the first batch of an epoch" in said and "persistent_workers=True" in said
    dali = verdict(g | dict(backend="dali"), [])
    assert "first batch of an epoch" in dali and "persistent_workers" not in dali
    assert "epoch" not in verdict(g | dict(starvation=0.004), [])
    assert "epoch" not in verdict(g | dict(epoch_start_idle=0.3), [])


def test_verdict_names_a_shortfall_inside_the_steps():
    """Finding 1 on today's code: hdf5, 4 workers pinned, 94.6% of the data-free rate at 0.24% starvation, the host
    behind on 0.5% of the steps, NVML's GPU busy 92%: 'not input-bound' alone would hide the 5% lost; the verdict says
    it was lost inside the steps. Where starvation accounts for the loss, nothing is added."""
    from bench.records.verdicts import verdict

    g = dict(model="ddpm_cifar10", device="cuda", starvation=0.0024, vs_data_free=0.946, host_behind=0.005)
    g |= dict(samples_per_s=6659.0, nvml_gpu_util_pct=92.0)
    said = verdict(g, [])
    assert (
        said.startswith("not input-bound") and "yet 5% of the data-free rate is lost, 5% of it inside the steps" in said
    )
    assert "(NVML saw the GPU busy 92% of the time)" in said and "host fell behind" not in said
    assert "inside the steps" not in verdict(g | dict(vs_data_free=0.99), [])
    assert "inside the steps" not in verdict(g | dict(starvation=0.04, vs_data_free=0.955), [])


def test_a_knob_helps_only_beyond_the_run_to_run_spread():
    """Finding 2: gpu 11,751-15,303 samples/s against hdf5 14,412-14,460; the medians differ by 7%, the repeats
    overlap: no knob is named. Against ranges that do not overlap it is."""
    from bench.records.verdicts import verdict

    def cfg(backend: str, lo: float, hi: float) -> dict:
        rates = dict(samples_per_s=(lo + hi) / 2, samples_per_s_min=lo, samples_per_s_max=hi)
        return dict(
            model="tiny",
            device="cuda",
            starvation=0.01,
            vs_data_free=1.0,
            backend=backend,
            workers=None,
            pin_memory=None,
            **rates,
        )

    gpu, hdf5 = cfg("gpu", 11751, 15303), cfg("hdf5", 14412, 14460)
    assert "nothing in this grid did better" in verdict(gpu, [gpu, hdf5])
    assert "backend -> hdf5 helped most (+23%" in verdict(cfg("gpu", 11751, 11751), [hdf5])


DECIDE = """
import json, sys, time
from pathlib import Path
t = time.perf_counter()
from bench.fastest import choose
c = choose(Path(sys.argv[1]), device="cuda", model="ddpm_cifar10", batch_size=128, compile=True,
           results_dir=Path(sys.argv[2]))
print(json.dumps({"seconds": time.perf_counter() - t, "backend": c.backend, "workers": c.workers,
                  "reason": c.reason}))
"""


@pytest.mark.gpu
@pytest.mark.slow
def test_fastest_decides_within_a_minute_for_compiled_ddpm_cifar10(tmp_path):
    """No results, ddpm_cifar10 compiled with CUDA graphs, 10,000 CIFAR-shaped images in every format: a fresh process
    decides in 60 s or less once torch.compile's cache holds the model (the run before it fills the cache, as any first
    compiled `train` does), its pick reached 99% of the data-free rate in its confirming run, and a second call is
    instant with the same answer."""
    import os
    import subprocess
    import sys
    import time

    from dataprep.convert import ConvertConfig, convert

    data = tmp_path / "cifar"
    convert(ConvertConfig(output=data, source="synthetic-images", limit=10_000, progress=False))  # every format
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[2])}

    def decide(results: Path) -> dict:
        out = subprocess.run(
            [sys.executable, "-c", DECIDE, str(data), str(results)],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        print(out.stderr[-3000:])
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    first = decide(tmp_path / "first")  # torch.compile's cache may be cold here: the compile any first run pays
    second = decide(tmp_path / "second")
    (summary,) = [json.loads(p.read_text()) for p in (tmp_path / "second").glob("fastest-probe-*.json")]
    print(f"first call {first['seconds']:.1f} s, second {second['seconds']:.1f} s; second's probe: {summary['times']}")
    print(second["reason"])
    assert second["seconds"] <= 60
    recs = load_records(tmp_path / "second")
    pick = [
        r
        for r in recs
        if r["job"]["kind"] == "loader"
        and r["job"]["backend"] == second["backend"]
        and (r["job"]["workers"] or 0) == second["workers"]
    ]
    assert pick and pick[0]["vs_data_free"] >= 0.99
    t = time.perf_counter()
    again = choose(
        data, device="cuda", model="ddpm_cifar10", batch_size=128, compile=True, results_dir=tmp_path / "second"
    )
    assert time.perf_counter() - t < 10 and (again.backend, again.workers) == (second["backend"], second["workers"])


def test_rates_that_vary_more_than_they_differ_give_no_ranking(data_dir, tmp_path):
    """Loaders at 115-444% of the data-free rate: "cannot tell", the default configuration, a short reason, no rates."""
    res = tmp_path / "r"
    write(res, None, None, 1000, 0.0, 1.0, kind="data_free")
    write(res, "hdf5", 8, 4440, 0.0, 3.0)
    write(res, "gpu", None, 3000, 0.0, 1.0)
    write(res, "torch", 0, 1150, 0.0, 1.0)
    c = choose(data_dir, device="cpu", model="tiny", batch_size=64, results_dir=res)
    assert (c.backend, c.workers, c.pin_memory) == ("hdf5", 1, False)  # the default: hdf5, half of 2 cores
    said = c.reason.split("): ", 1)[1]  # after where the results are
    assert said.startswith("cannot tell on this machine now (") and said.endswith("took the default")
    assert "samples/s" not in said and "tie" not in said and len(said) < 120


def test_a_busy_grid_keeps_the_previous_choice(data_dir, tmp_path):
    """The latest grid ran while other programs took half the cores: the previous grid's winner stays."""
    res = tmp_path / "r"
    write(res, "torch", 4, 1000, 0.0, 4.0, grid="20261121T000000Z")
    write(res, "torch", 0, 300, 0.2, 1.0, grid="20261121T000000Z")
    write(res, "gpu", None, 2000, 0.0, 1.0, other_share=0.5)
    write(res, "torch", 4, 900, 0.0, 4.0, other_share=0.5)
    c = choose(data_dir, device="cpu", model="tiny", batch_size=64, results_dir=res)
    assert (c.backend, c.workers) == ("torch", 4)
    assert c.reason.endswith(
        "(grid 20261122T100000Z): cannot tell on this machine now (other programs took 50% of the cores during the "
        "runs); kept the previous choice (grid 20261121T000000Z)"
    )


def test_bench_loaders_answer_shows_no_ranking_from_noise(tmp_path):
    """The answer of a busy grid says "cannot tell" once, with neither a pick nor a slowest configuration."""
    from bench.records.results import group
    from bench.report.answer import summarize

    res = tmp_path / "r"
    write(res, None, None, 1000, 0.0, 1.0, kind="data_free")
    write(res, "hdf5", 8, 4440, 0.0, 3.0, other_share=0.6)
    write(res, "torch", 0, 1150, 0.0, 1.0, other_share=0.6)
    lines, record = summarize(res, group([flat(r) for r in load_records(res)]), [])
    text = "\n".join(lines)
    assert text.count("cannot tell on this machine now") == 1 and text.count("busy") + text.count("other progr") == 1
    assert "slowest" not in text and "takes" not in text and record["scenarios"][0]["best"] is None
