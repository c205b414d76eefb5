"""Damaged converted data: truncated files, flipped bits and a broken manifest reach the user as one LoaderError that
names the file and the fix, at loader open where the damage shows in sizes or headers, and `dataprep verify` names
every damaged file. Flipped bits run in a process of their own (damage_trials.py beside this file), so that a crash
or a hang would show as that."""

from __future__ import annotations

import collections
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dataprep.convert import ConvertConfig, convert
from dataprep.manifest import ManifestError
from dataprep.verify import verify
from loaders import BACKENDS, LoaderError, build_loader

REPO = Path(__file__).resolve().parents[2]
# the files each backend reads: what the tests damage
TARGETS = {
    "torch": ["files/00000/00000007.png", "files/index.csv"],
    "hdf5": ["data.h5"],
    "gpu": ["data.h5"],
    "ffcv": ["data.beton"],
    "dali": ["dali/shard-00000.tar", "dali/shard-00000.idx"],
    "stream": ["stream/chunk-0-0.bin", "stream/index.json"],
}
CASES = [(b, rel) for b, rels in TARGETS.items() for rel in rels]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("damage") / "img"
    convert(
        ConvertConfig(
            output=out, source="synthetic-images", limit=120, formats=("all", "stream"), progress=False, workers=1
        )
    )
    return out


def damaged_copy(src: Path, dst: Path, rel: str, change) -> Path:
    """A hard-linked copy of `src` whose file `rel` is replaced by change(its bytes)."""
    shutil.copytree(src, dst, copy_function=os.link)
    raw = (dst / rel).read_bytes()
    (dst / rel).unlink()  # a new inode: the shared original stays intact
    if change is not None:
        (dst / rel).write_bytes(change(raw))
    return dst


def open_loader(backend: str, data: Path):
    return build_loader(backend, data, batch_size=40, workers=0, device="cpu", shuffle=False, augment=False)


@pytest.mark.parametrize("how", ["truncated", "missing"])
@pytest.mark.parametrize("backend,rel", CASES, ids=[f"{b}-{Path(r).name}" for b, r in CASES])
def test_a_truncated_or_missing_file_is_refused_at_open(prepared, tmp_path, backend, rel, how):
    data = damaged_copy(prepared, tmp_path / "d", rel, (lambda b: b[: len(b) // 2]) if how == "truncated" else None)
    with pytest.raises(LoaderError) as caught:
        open_loader(backend, data)
    message = str(caught.value)
    assert str(data / rel) in message and f"dataprep verify {data}" in message
    assert ("the manifest says" if how == "truncated" else "no such file") in message
    assert any(rel in p for p in verify(data)), "verify names the damaged file"


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_a_damaged_manifest_is_refused_by_every_loader(prepared, tmp_path, backend):
    """Truncated: not JSON. A flipped digit in a recorded size: the size check names the file it now disagrees with."""
    truncated = damaged_copy(prepared, tmp_path / "t", "manifest.json", lambda b: b[: len(b) // 2])
    with pytest.raises(LoaderError, match=r"manifest.json: not valid JSON .*dataprep verify"):
        open_loader(backend, truncated)
    with pytest.raises(ManifestError, match="manifest.json: not valid JSON"):
        verify(truncated)

    rel = TARGETS[backend][0]
    fmt = {"torch": "files", "gpu": "hdf5"}.get(backend, backend)
    listed = json.loads((prepared / "manifest.json").read_text())["formats"][fmt]["files"]
    size = next(f["bytes"] for f in listed if f["path"] == rel)
    text = (prepared / "manifest.json").read_text()
    flipped = text.replace(f'"bytes": {size},', f'"bytes": {size ^ 1},', 1)
    assert flipped != text
    changed = damaged_copy(prepared, tmp_path / "f", "manifest.json", lambda _: flipped.encode())
    with pytest.raises(LoaderError, match=f"{rel}: .* the manifest says {size ^ 1:,}"):
        open_loader(backend, changed)
    assert any(rel in p for p in verify(changed))


def flip_positions(size: int, rng: random.Random) -> list[tuple[int, int]]:
    """(byte, bit) pairs: headers and tables live at the ends of these files, so most flips go there."""
    head = [rng.randrange(min(size, 4096)) for _ in range(2)]
    tail = [rng.randrange(max(0, size - 4096), size)]
    return [(b, rng.randrange(8)) for b in head + tail + [rng.randrange(size)]]


@pytest.mark.slow
@pytest.mark.parametrize("backend", list(BACKENDS))
def test_flipped_bits_never_crash_hang_or_pass_verify(prepared, tmp_path, backend):
    """Four flips per file, each in a fresh copy: the loader refuses at open, fails naming the file, or delivers the
    samples (the same or damaged ones); it never crashes, hangs or leaves a foreign exception. verify always names the
    file (its sha256 changed)."""
    rng = random.Random(f"flips-{backend}")
    sizes = {rel: (prepared / rel).stat().st_size for rel in TARGETS[backend]}
    trials = [[rel, b, bit] for rel, size in sizes.items() for b, bit in flip_positions(size, rng)]
    args = {"data": str(prepared), "work": str(tmp_path), "backend": backend, "trials": trials}
    env = os.environ | {"PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve().parent / "damage_trials.py"), json.dumps(args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    results = [r for r in lines if r.get("status") != "started"]
    assert proc.returncode == 0 and len(results) == len(trials), (
        f"exit {proc.returncode} during {lines[-1] if lines else 'start-up'}: {proc.stderr[-3000:]}"
    )
    outcomes = collections.Counter(r["loader"] for r in results)
    print(f"{backend}: {len(results)} flips: {dict(outcomes)}")
    for r in results:
        assert not r["loader"].startswith("unclear"), r
        assert r["verify_names_file"], r
        if "message" in r:
            assert Path(r["file"]).name in r["message"] or "cannot read" in r["message"], r
            assert "dataprep verify" in r["message"], r


def test_a_worker_failing_on_damaged_bytes_says_to_verify(tmp_path):
    """A library's own error in a DataLoader worker (here LitData's on a flipped bit of a chunk, as PyTorch reports
    it: the worker's traceback as text) becomes one line naming the loader, the data, the error and `dataprep verify`;
    an error that is not a worker's is left alone."""
    from loaders.workers import worker_failure

    error = RuntimeError(
        "Caught SystemError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n"
        '  File "litdata/streaming/item_loader.py", line 1, in load_item\n'
        "SystemError: Negative size passed to PyBytes_FromStringAndSize"
    )
    said = worker_failure(error, "stream", tmp_path)
    assert said == (
        f"the stream loader failed reading {tmp_path}: Negative size passed to PyBytes_FromStringAndSize; run "
        f"`dataprep verify {tmp_path}` to see what is damaged, or convert the data again"
    )
    assert worker_failure(ValueError("something else"), "stream", tmp_path) is None
