"""`train --loader fastest`: the choice from bench results (1% starvation rule, ties to fewer cores, latest grid,
same data/device/model/batch only), and a short bench when there are none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import bench.fastest as fastest
from bench.fastest import choose
from bench.job import Job

DIGEST = "ab" * 32


@pytest.fixture(scope="module")
def small_data(tmp_path_factory) -> Path:
    """128 synthetic images, HDF5 only: the short bench can use hdf5 and gpu."""
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
) -> None:
    """A result JSON as bench.run_one writes it, with just the fields the choice reads."""
    job = Job(
        kind="loader",
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


def test_ties_within_two_percent_go_to_fewer_cpu_cores(data_dir, tmp_path):
    """1000/s on 6 cores vs 990/s on 2 cores: a tie, the 2-core one wins; 900/s on 1 core is not a tie."""
    res = tmp_path / "r"
    write(res, "hdf5", 8, 1000, 0.002, 6.0)
    write(res, "ffcv", 2, 990, 0.001, 2.0)
    write(res, "gpu", None, 900, 0.0, 1.0)
    c = choose(data_dir, device="cpu", model="tiny", batch_size=64, results_dir=res)
    assert (c.backend, c.workers) == ("ffcv", 2) and "fewest CPU cores" in c.reason


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
    assert c.workers == 4 and "none of 2 configurations stayed under 1%" in c.reason


@pytest.mark.slow
def test_no_results_runs_a_short_bench_first(small_data, monkeypatch):
    """With no results, a short bench runs (hdf5 and gpu here), writes DATA/.gpufeed-bench, and the reason says so."""
    monkeypatch.setattr(fastest, "SHORT", dict(steps=3, warmup=1))  # the same bench, fewer steps for CI's 2 cores
    monkeypatch.delenv("GPUFEED_BENCH_RESULTS", raising=False)
    c = choose(small_data, device="cpu", model="tiny", batch_size=16)
    assert c.backend in ("hdf5", "gpu") and "ran a short bench first" in c.reason
    assert len(list((small_data / ".gpufeed-bench").glob("*.json"))) == 4  # hdf5 w0, w2, gpu, data-free
    again = choose(small_data, device="cpu", model="tiny", batch_size=16)
    assert "from bench results in" in again.reason and again.backend == c.backend


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
    from bench.results import attach_data_free

    def rec(kind: str, rate: float, uuid: str | None) -> dict:
        job = Job(kind=kind, data="d", backend="gpu" if kind == "loader" else None, workers=None, pin_memory=None,
                  batch_size=64, model="tiny", steps=200, warmup=20, device="cuda", cpus=None,
                  compile=False)  # fmt: skip
        hw = {"gpu_uuid": uuid} if uuid else {}
        waits = {"wait_median_ms": 0, "wait_p95_ms": 0, "wait_max_ms": 0}
        figures = {"samples_per_s": rate, "starvation": {"starvation": 0.0, "source": "cuda-events", **waits}}
        return {"name": f"{kind}-r1", "job": job.to_dict(), "run": {"hardware": hw}, "figures": figures}

    records = [rec("data_free", 1000.0, "A"), rec("data_free", 900.0, "B"), rec("loader", 990.0, "A"),
               rec("loader", 891.0, "B"), rec("loader", 950.0, "C")]  # fmt: skip
    attach_data_free(records)
    assert [r.get("data_free_rate") for r in records[2:]] == [1000.0, 900.0, 950.0]
    assert records[2]["vs_data_free"] == pytest.approx(0.99) and records[3]["vs_data_free"] == pytest.approx(0.99)


def test_verdict_names_a_host_that_falls_behind():
    """A run that is 92% of the data-free rate at 2.5% starvation, the host behind on every step (pin_memory off in
    finding 1): the verdict must say where the rest went; a fed run at 0% behind must not, nor a run whose starvation
    accounts for its shortfall."""
    from bench.results import verdict

    g = dict(model="tiny", device="cuda", starvation=0.025, vs_data_free=0.92, host_behind=1.0, samples_per_s=4600.0)
    assert "host fell behind the GPU on 100% of the steps (a synchronising copy" in verdict(g, [])
    assert "host fell behind" not in verdict(g | dict(vs_data_free=0.998, host_behind=0.0), [])
    # finding 3: torch, 0 workers, 95.3% at 4.2% starvation, behind on 77% of steps (it loads each batch itself): the
    # waits explain the shortfall, so no copy is blamed
    assert "host fell behind" not in verdict(g | dict(vs_data_free=0.953, starvation=0.042, host_behind=0.77), [])
    # finding 2: eager `tiny` on 4 cores is behind on every step with no input at all (launch-bound), no copy to blame
    launch_bound = verdict(g | dict(data_free_host_behind=1.0), [])
    assert "as it does with no input at all" in launch_bound and "pin_memory" not in launch_bound


def test_a_knob_helps_only_beyond_the_run_to_run_spread():
    """Finding 2: gpu 11,751-15,303 samples/s against hdf5 14,412-14,460; the medians differ by 7%, the repeats
    overlap: no knob is named. Against ranges that do not overlap it is."""
    from bench.results import verdict

    def cfg(backend: str, lo: float, hi: float) -> dict:
        rates = dict(samples_per_s=(lo + hi) / 2, samples_per_s_min=lo, samples_per_s_max=hi)
        return dict(model="tiny", device="cuda", starvation=0.01, vs_data_free=1.0, backend=backend, workers=None,
                    pin_memory=None, **rates)  # fmt: skip

    gpu, hdf5 = cfg("gpu", 11751, 15303), cfg("hdf5", 14412, 14460)
    assert "nothing in this grid did better" in verdict(gpu, [gpu, hdf5])
    assert "backend -> hdf5 helped most (+23%" in verdict(cfg("gpu", 11751, 11751), [hdf5])
