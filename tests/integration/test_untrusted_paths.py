"""A data directory is untrusted input: every path found in it (the manifest's file lists, `files/index.csv`, the
files each format opens, DALI's shards and index files, manifest.json itself), in a results directory (`bench report`,
`bench fastest`) or in a run directory (`train --resume`) stays inside it. One leading out is refused before anything
is opened, by the real commands, naming the entry, where it was found and the rule. Every outside target exists and
is a valid copy of what was expected, so a missing check would read it and, mostly, succeed."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from bench.cli import cli as bench_cli
from common.paths import OutsideError, all_inside
from dataprep.cli import cli as dataprep_cli
from training.checkpoint import CKPT_NAME, FORMAT
from training.cli import train

RULE = "must stay inside it"
TRAIN = "--model tiny --batch-size 8 --precision fp32 --device cpu --workers 0 --no-pin-memory --sample-every 0"
TRAIN += " --no-progress --log-every 1 --timing-warmup 0 --steps 2"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    """64 synthetic images in every format, converted once; tests change copies of it."""
    from dataprep.convert import ConvertConfig, convert

    out = tmp_path_factory.mktemp("untrusted") / "data"
    convert(ConvertConfig(output=out, source="synthetic-images", limit=64, formats=("all",), workers=1, progress=False))
    return out


@pytest.fixture
def prepared_copy(prepared, tmp_path) -> Path:
    """A copy of the prepared directory, with an `elsewhere` folder beside it for the outside targets."""
    (tmp_path / "elsewhere").mkdir()
    return Path(shutil.copytree(prepared, tmp_path / "data"))


def move_out(d: Path, rel: str) -> Path:
    """Move d/rel beside d, into `elsewhere`, and leave a symbolic link to it: the content is exactly what was there."""
    target = d.parent / "elsewhere" / Path(rel).name
    shutil.move(d / rel, target)
    (d / rel).symlink_to(target)
    return target


def edit_manifest(d: Path, change) -> None:
    m = json.loads((d / "manifest.json").read_text())
    change(m)
    (d / "manifest.json").write_text(json.dumps(m))


def replace_first_row(d: Path, path: str) -> None:
    """Point files/index.csv's first row at `path`, and update the manifest's size and hash of index.csv to match, as
    whoever edits a directory can: only the path check can stop it."""
    index = d / "files/index.csv"
    lines = index.read_text().splitlines()
    lines[1] = f"{path},{lines[1].split(',')[1]}"
    index.write_text("\n".join(lines) + "\n")
    listed = lambda m: next(f for f in m["formats"]["files"]["files"] if f["path"] == "files/index.csv")  # noqa: E731
    size, sha = index.stat().st_size, hashlib.sha256(index.read_bytes()).hexdigest()
    edit_manifest(d, lambda m: listed(m).update(bytes=size, sha256=sha))


def refused(result, entry: str, source: str) -> None:
    assert result.exit_code != 0, result.output
    assert repr(entry) in result.output and source in result.output and RULE in result.output, result.output


def run_train(d: Path, loader: str, out: Path, *extra: str):
    return CliRunner().invoke(train, ["--data", str(d), "--loader", loader, "--out", str(out), *TRAIN.split(), *extra])


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink"])
def test_a_manifest_entry_leading_out_is_refused_by_verify(prepared_copy, how):
    """`dataprep verify` refuses a manifest entry leading out (`..`, absolute, or a link), naming it and
    manifest.json; the outside file is a valid copy, so without the check verify would read it and pass."""
    copy = prepared_copy.parent / "elsewhere" / "data.h5"
    if how == "symlink":
        move_out(prepared_copy, "data.h5")
        entry = "data.h5"
    else:
        shutil.copy(prepared_copy / "data.h5", copy)
        entry = "../elsewhere/data.h5" if how == "dotdot" else str(copy)
        edit_manifest(prepared_copy, lambda m: m["formats"]["hdf5"]["files"][0].update(path=entry))
    refused(CliRunner().invoke(dataprep_cli, ["verify", str(prepared_copy)]), entry, "manifest.json")


@pytest.mark.parametrize(
    "backend, rel",
    [
        ("torch", "files/00000/00000001.png"),
        ("hdf5", "data.h5"),
        ("gpu", "data.h5"),
        ("ffcv", "data.beton"),
        ("dali", "dali/shard-00000.idx"),
    ],
)
def test_a_listed_file_linking_out_is_refused_at_loader_open(prepared_copy, tmp_path, backend, rel):
    """`train` refuses, at the loader's open, a listed file of its format that links out of the directory, naming
    the entry and manifest.json; the target is the real file, so without the check training would run."""
    move_out(prepared_copy, rel)
    refused(run_train(prepared_copy, backend, tmp_path / "run"), rel, "manifest.json")
    assert not (tmp_path / "run" / "ckpt.pt").exists()


@pytest.mark.parametrize("fmt, rel", [("hdf5", "data.h5"), ("ffcv", "data.beton"), ("dali", "dali")])
def test_a_format_s_own_file_linking_out_is_refused_though_unlisted(prepared_copy, tmp_path, fmt, rel):
    """The file (or folder) a format opens by its own name is checked too, though the manifest no longer lists it:
    verify and the loader both refuse it."""
    move_out(prepared_copy, rel)
    edit_manifest(prepared_copy, lambda m: m["formats"][fmt].update(files=[]))
    refused(CliRunner().invoke(dataprep_cli, ["verify", str(prepared_copy)]), rel, str(prepared_copy))
    refused(run_train(prepared_copy, fmt, tmp_path / "run"), rel, str(prepared_copy))


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink"])
def test_an_index_row_leading_out_is_refused(prepared_copy, tmp_path, how):
    """A row of files/index.csv leading out (`..`, absolute, or an unlisted name that is a link) is refused by
    verify and by the torch loader, naming the row and index.csv; the target is the very sample, so without the check
    verify would read it and pass."""
    copy = prepared_copy.parent / "elsewhere" / "00000000.png"
    shutil.copy(prepared_copy / "files/00000/00000000.png", copy)
    row = {"dotdot": "../../elsewhere/00000000.png", "absolute": str(copy), "symlink": "00000/extra.png"}[how]
    if how == "symlink":
        (prepared_copy / "files" / row).symlink_to(copy)
    replace_first_row(prepared_copy, row)
    refused(CliRunner().invoke(dataprep_cli, ["verify", str(prepared_copy)]), row, "files/index.csv")
    refused(run_train(prepared_copy, "torch", tmp_path / "run"), row, "files/index.csv")


def test_an_index_row_naming_a_fifo_outside_is_never_opened(prepared_copy):
    """The outside target is a FIFO, which an open for reading waits on forever: verify returns at once with the
    refusal, so the row was never opened (a timeout fails the test instead of hanging it)."""
    fifo = prepared_copy.parent / "elsewhere" / "fifo.png"
    os.mkfifo(fifo)
    replace_first_row(prepared_copy, "../../elsewhere/fifo.png")
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    r = subprocess.run(
        [sys.executable, "-m", "dataprep", "verify", str(prepared_copy)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert r.returncode == 1 and "'../../elsewhere/fifo.png'" in r.stderr and RULE in r.stderr


def test_a_manifest_linking_out_is_refused(prepared_copy, tmp_path):
    """manifest.json itself linking out of the directory (to a valid manifest) is refused by info, verify and
    train, naming it."""
    move_out(prepared_copy, "manifest.json")
    for result in (
        CliRunner().invoke(dataprep_cli, ["info", str(prepared_copy)]),
        CliRunner().invoke(dataprep_cli, ["verify", str(prepared_copy)]),
        run_train(prepared_copy, "hdf5", tmp_path / "run"),
    ):
        refused(result, "manifest.json", str(prepared_copy))


def bench_record(results: Path, name: str = "hdf5-w0", model: str = "tiny") -> Path:
    """A finished loader run as bench.run_one writes it, with the fields report and fastest read."""
    from bench.grid.job import Job

    job = Job(
        kind="loader",
        data="d",
        backend="hdf5",
        workers=0,
        pin_memory=False,
        batch_size=64,
        model=model,
        steps=10,
        warmup=2,
        device="cpu",
        cpus=None,
        compile=False,
        grid_id="20261122T100000Z",
    )
    starvation = {
        "starvation": 0.001,
        "source": "host-wait",
        "wait_median_ms": 1.0,
        "wait_p95_ms": 1.0,
        "wait_max_ms": 1.0,
    }
    rec = {
        "name": name,
        "job": job.to_dict(),
        "data": {"digest": "ab" * 32},
        "figures": {"samples_per_s": 1000.0, "cpu_cores": 1.0, "starvation": starvation},
    }
    results.mkdir(parents=True, exist_ok=True)
    (results / f"{name}.json").write_text(json.dumps(rec))
    return results / f"{name}.json"


@pytest.fixture
def bench_data(tmp_path) -> Path:
    """A manifest whose digest matches the records, so `fastest` takes them."""
    d = tmp_path / "bench-data"
    d.mkdir()
    m = {
        "kind": "image",
        "formats": {"hdf5": {}},
        "digest": {"total": "ab" * 32},
        "sample_shape": [32, 32, 3],
        "dtype": "uint8",
        "count": 1000,
        "classes": ["a", "b"],
    }
    (d / "manifest.json").write_text(json.dumps(m))
    return d


def fastest(d: Path, *extra: str):
    args = ["fastest", "--data", str(d), "--model", "tiny", "--batch-size", "64", "--device", "cpu", *extra]
    return CliRunner().invoke(bench_cli, args)


def test_a_result_linking_out_is_refused_by_report_and_fastest(bench_data, tmp_path):
    """A results directory's JSON that links out (to a valid record) is refused by `bench report` and `bench
    fastest`, naming it; without the check both would use the record."""
    results = tmp_path / "r"
    bench_record(results, "hdf5-w0")
    (tmp_path / "elsewhere").mkdir()
    target = shutil.move(bench_record(results, "hdf5-w2"), tmp_path / "elsewhere" / "hdf5-w2.json")
    (results / "hdf5-w2.json").symlink_to(target)
    refused(CliRunner().invoke(bench_cli, ["report", str(results)]), "hdf5-w2.json", str(results))
    assert not (results / "results.md").exists()
    refused(fastest(bench_data, "--results", str(results)), "hdf5-w2.json", str(results))


def test_a_plot_name_leading_out_is_refused_by_report(tmp_path):
    """A record whose model would name its plot outside the results directory is refused by `bench report`, naming
    the run; the folder the name climbs through exists, so without the check the plot would be written outside."""
    results = tmp_path / "r"
    (tmp_path / "elsewhere").mkdir()
    (results / "plot-..").mkdir(parents=True)
    bench_record(results, "evil", model="../../elsewhere/stolen")
    result = CliRunner().invoke(bench_cli, ["report", str(results)])
    assert result.exit_code != 0 and "(run evil)" in result.output and RULE in result.output, result.output
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_a_watched_run_linking_out_is_refused_by_report(tmp_path):
    """A `bench watch` run folder (DIR/*/watch.json) that links out of the results directory is refused by `bench
    report`, naming it."""
    (tmp_path / "elsewhere" / "run").mkdir(parents=True)
    (tmp_path / "elsewhere" / "run" / "watch.json").write_text(json.dumps({"kind": "watch", "samples_per_s": 1.0}))
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "run").symlink_to(tmp_path / "elsewhere" / "run")
    refused(CliRunner().invoke(bench_cli, ["report", str(tmp_path / "r")]), "run/watch.json", str(tmp_path / "r"))


def test_a_default_results_folder_linking_out_is_refused_by_fastest(bench_data, tmp_path, monkeypatch):
    """DATA/.gpufeed-bench, where `fastest` reads results by default, linking out of the data directory (to
    valid results) is refused."""
    monkeypatch.delenv("GPUFEED_BENCH_RESULTS", raising=False)
    bench_record(tmp_path / "elsewhere" / "results")
    (bench_data / ".gpufeed-bench").symlink_to(tmp_path / "elsewhere" / "results")
    refused(fastest(bench_data), ".gpufeed-bench", str(bench_data))


def test_a_checkpoint_linking_out_is_refused_by_resume(prepared, tmp_path):
    """`train --resume` refuses a ckpt.pt that links out of the run directory to a valid checkpoint, which it would
    otherwise resume from."""
    assert run_train(prepared, "hdf5", tmp_path / "other").exit_code == 0
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / CKPT_NAME).symlink_to(tmp_path / "other" / CKPT_NAME)
    refused(run_train(prepared, "hdf5", tmp_path / "run", "--resume", "--steps", "3"), CKPT_NAME, str(tmp_path / "run"))


class _CreatesAFile:
    """Unpickling this calls pathlib.Path.touch(target): what any payload (os.system, eval) would do first."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self):
        return (Path.touch, (self.target,))


def test_a_checkpoint_carrying_a_callable_is_refused_and_nothing_runs(prepared, tmp_path):
    """A ckpt.pt whose pickle would create a file is refused by `train --resume` and the file is never created;
    an unrestricted torch.load of it does create it (so the payload is real)."""
    marker = tmp_path / "pwned"
    (tmp_path / "run").mkdir()
    torch.save({"format": FORMAT, "model": _CreatesAFile(marker)}, tmp_path / "run" / CKPT_NAME)
    result = run_train(prepared, "hdf5", tmp_path / "run", "--resume")
    assert result.exit_code == 1 and "not a readable checkpoint" in result.output, result.output
    assert not marker.exists()
    torch.load(tmp_path / "run" / CKPT_NAME, weights_only=False)  # the control
    assert marker.exists()


def test_links_and_names_that_stay_inside_are_allowed(tmp_path):
    """A link to another file of the directory and a name containing '..' inside a component pass."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x..y.png").write_bytes(b"")
    (tmp_path / "a" / "link.png").symlink_to(tmp_path / "a" / "x..y.png")
    all_inside(tmp_path, ["a/x..y.png", "a/link.png", "a/missing.png"], source="test")
    (tmp_path / "a" / "out.png").symlink_to("/")
    with pytest.raises(OutsideError, match="'a/out.png'"):
        all_inside(tmp_path, ["a/x..y.png", "a/out.png"], source="test")


@pytest.mark.parametrize("links, listings", [(True, 40), (False, 0)])
def test_the_check_resolves_each_folder_once_not_each_file(tmp_path, monkeypatch, links, listings):
    """Checking 10,000 names in 40 folders of 250 (as the files format lays out 50,000) costs one realpath and one
    listing per folder, nothing per file; without the listings (the loaders' open check tells links apart by the
    lstat it makes of every file anyway), one realpath per folder."""
    import common.paths as paths

    entries = [f"files/{i // 250:05d}/{i:08d}.png" for i in range(10_000)]
    calls = {"realpath": 0, "scandir": 0}
    real_realpath, real_scandir = os.path.realpath, os.scandir

    def count(name, fn):
        def wrapped(*a, **k):
            calls[name] += 1
            return fn(*a, **k)

        return wrapped

    monkeypatch.setattr(paths.os.path, "realpath", count("realpath", real_realpath))
    monkeypatch.setattr(paths.os, "scandir", count("scandir", real_scandir))
    all_inside(tmp_path, entries, source="test", links=links)
    assert calls == {"realpath": 41, "scandir": listings}  # the root once, then each folder
