"""CIFAR-10's pickled batches are read with a restricted unpickler: code a doctored batch carries never runs."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from dataprep_helpers import make_cifar_pickles, read_all

from dataprep import safe_pickle
from dataprep.cli import cli


class _CreatesAFile:
    """Unpickling this calls pathlib.Path.touch(target): what any payload (os.system, eval) would do first."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self):
        return (Path.touch, (self.target,))


def run(*args: str):
    return CliRunner().invoke(cli, ["convert", "--quiet", "--workers", "1", "--format", "hdf5", *args])


def test_a_doctored_batch_is_refused_and_nothing_runs(tmp_path):
    """A data_batch whose pickle would create a file is refused, naming the batch and the callable, and the file is
    never created; plain pickle.load on the same bytes does create it (so the payload is real)."""
    make_cifar_pickles(tmp_path / "p", n_per_batch=4)
    target = tmp_path / "pwned"
    batch = tmp_path / "p" / "cifar-10-batches-py" / "data_batch_3"
    data = pickle.loads(batch.read_bytes())
    data[b"labels"] = _CreatesAFile(target)
    batch.write_bytes(pickle.dumps(data))
    r = run("--input", str(tmp_path / "p"), "--output", str(tmp_path / "o"))
    assert r.exit_code == 1 and "data_batch_3" in r.output and "refused" in r.output and "Path.touch" in r.output
    assert not target.exists() and not (tmp_path / "o").exists()
    pickle.loads(batch.read_bytes())  # the control: the unrestricted loader runs the payload
    assert target.exists()


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_numpy_arrays_of_every_protocol_load(protocol):
    """Arrays pickled by this numpy with protocols 2-5 (as torchvision's and re-saved copies are) load unchanged."""
    x = np.arange(2 * 3072, dtype=np.uint8).reshape(2, 3072)
    blob = pickle.dumps({b"data": x, b"labels": [1, 2], b"batch_label": b"b", b"filenames": [b"a", b"c"]}, protocol)
    got = safe_pickle.load(io.BytesIO(blob))
    assert np.array_equal(got[b"data"], x) and got[b"labels"] == [1, 2]


def test_original_numpy1_names_are_admitted():
    """The original batches name numpy.core.multiarray._reconstruct (numpy 1.x); it resolves without a warning."""
    blob = pickle.dumps(np.zeros((1, 3072), np.uint8), 2).replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
    assert b"numpy.core.multiarray" in blob
    assert safe_pickle.load(io.BytesIO(blob)).shape == (1, 3072)


@pytest.mark.parametrize(
    "change, message",
    [
        ({b"data": np.zeros((4, 1024), np.uint8)}, "found uint8 (4, 1024)"),
        ({b"data": np.zeros((4, 3072), np.int64)}, "found int64 (4, 3072)"),
        ({b"labels": [0, 1, 2]}, "and 3 labels"),
        ({b"labels": [0, 1, 2, 10]}, "some labels are not"),
        ({b"data": [[0] * 3072] * 4}, "found list and list"),
    ],
    ids=["wrong-shape", "wrong-dtype", "too-few-labels", "label-out-of-range", "not-an-array"],
)
def test_a_batch_of_the_wrong_shape_is_named(tmp_path, change, message):
    """A batch whose data or labels do not have CIFAR-10's shape stops with the batch named and what was found."""
    make_cifar_pickles(tmp_path / "p", n_per_batch=4)
    batch = tmp_path / "p" / "cifar-10-batches-py" / "data_batch_2"
    data = pickle.loads(batch.read_bytes())
    data.update(change)
    batch.write_bytes(pickle.dumps(data))
    r = run("--input", str(tmp_path / "p"), "--output", str(tmp_path / "o"))
    assert r.exit_code == 1 and "data_batch_2" in r.output and message in r.output, r.output


def test_a_real_layout_still_converts(tmp_path):
    """The restricted reader converts a well-formed cifar-10-batches-py exactly."""
    x, y, _ = make_cifar_pickles(tmp_path / "p", n_per_batch=3)
    assert run("--input", str(tmp_path / "p"), "--output", str(tmp_path / "o")).exit_code == 0
    gx, gy, _ = read_all(tmp_path / "o", "hdf5")
    assert np.array_equal(gx, x) and np.array_equal(gy, y)
