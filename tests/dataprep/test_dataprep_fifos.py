"""A FIFO where a file is expected never blocks: `dataprep verify`, `info` and `convert`, and every loader's open,
refuse it at once naming the file. Each call runs in a thread that must finish within a few seconds: an open() on a
FIFO would wait for a writer for ever."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner
from dataprep_helpers import make_audio, make_cifar_pickles, make_imagefolder, random_images
from PIL import Image

from dataprep.cli import cli

LIMIT_S = 120  # a verify of every format takes 5-25 s on the 2-core machine, loaded; a FIFO blocks for ever


def _within(fn, *args, **kwargs):
    """fn(*args, **kwargs) in a daemon thread; its result, or a failure if it is still running after LIMIT_S."""
    box = []
    thread = threading.Thread(target=lambda: box.append(_call(fn, *args, **kwargs)), daemon=True)
    thread.start()
    thread.join(LIMIT_S)
    assert box, f"{fn.__name__} still blocked after {LIMIT_S} s"
    ok, value = box[0]
    if not ok:
        raise value
    return value


def _call(fn, *args, **kwargs):
    try:
        return True, fn(*args, **kwargs)
    except BaseException as e:  # re-raised in the test's thread
        return False, e


@pytest.fixture(scope="module")
def every_format(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fifo") / "set"
    r = CliRunner().invoke(
        cli,
        ["convert", "--source", "synthetic-images", "--limit", "40", "--output", str(out), "--workers", "1", "--quiet"],
    )
    assert r.exit_code == 0, r.output
    return out


# the file replaced by a FIFO, and the backend whose open must refuse it
CASES = {
    "files/index.csv": "torch",
    "files/00000/00000003.png": "torch",
    "data.h5": "hdf5",
    "data.beton": "ffcv",
    "dali/shard-00000.tar": "dali",
    "dali/shard-00000.idx": "dali",
    "manifest.json": "hdf5",
}


@pytest.mark.parametrize("name", CASES)
def test_fifo_in_a_prepared_directory(every_format, tmp_path, name):
    """The file replaced by a FIFO: `verify` fails naming it as a FIFO, `info` answers (or names the manifest), and
    the backend that reads the file refuses it at open with a LoaderError naming it."""
    from loaders import LoaderError, build_loader

    data = tmp_path / "set"
    shutil.copytree(every_format, data)
    (data / name).unlink()
    os.mkfifo(data / name)
    r = _within(CliRunner().invoke, cli, ["verify", str(data)])
    assert r.exit_code == 1 and name in r.output and "FIFO" in r.output, r.output
    r = _within(CliRunner().invoke, cli, ["info", str(data)])
    assert (r.exit_code == 1 and "FIFO" in r.output) if name == "manifest.json" else r.exit_code == 0, r.output
    with pytest.raises(LoaderError, match="FIFO") as caught:
        _within(build_loader, CASES[name], data, batch_size=8, workers=1, pin_memory=False, device="cpu")
    assert str(data / name) in str(caught.value)


def test_fifo_as_an_input_image(tmp_path):
    """A FIFO named like an image among the input: the conversion stops naming it (exit 1, nothing written); with
    --on-bad-file skip the other images are converted and the FIFO is listed as skipped."""
    make_imagefolder(tmp_path / "in", n_per_class=3)
    os.mkfifo(tmp_path / "in" / "cat" / "0009.png")
    args = ["convert", "--input", str(tmp_path / "in"), "--format", "hdf5", "--workers", "2", "--quiet"]
    r = _within(CliRunner().invoke, cli, [*args, "--output", str(tmp_path / "o")])
    assert r.exit_code == 1 and "cat/0009.png: is a FIFO (named pipe), not a regular file" in r.output, r.output
    assert not (tmp_path / "o").exists()
    r = _within(CliRunner().invoke, cli, [*args, "--output", str(tmp_path / "o"), "--on-bad-file", "skip"])
    assert r.exit_code == 0 and "wrote 6 samples" in r.output, r.output


def test_fifo_as_an_input_clip_and_cifar_batch(tmp_path):
    """A FIFO named like a clip in an audio folder, and a FIFO as a CIFAR-10 batch: each refused, named."""
    make_audio(tmp_path / "clips")
    os.mkfifo(tmp_path / "clips" / "1_f_6.wav")
    r = _within(
        CliRunner().invoke,
        cli,
        ["convert", "--input", str(tmp_path / "clips"), "--output", str(tmp_path / "o"), "--workers", "1", "--quiet"],
    )
    assert r.exit_code == 1 and "1_f_6.wav: is a FIFO" in r.output, r.output
    make_cifar_pickles(tmp_path / "cifar")
    (tmp_path / "cifar" / "cifar-10-batches-py" / "data_batch_3").unlink()
    os.mkfifo(tmp_path / "cifar" / "cifar-10-batches-py" / "data_batch_3")
    r = _within(
        CliRunner().invoke,
        cli,
        ["convert", "--input", str(tmp_path / "cifar"), "--output", str(tmp_path / "o2"), "--quiet"],
    )
    assert r.exit_code == 1 and "data_batch_3: is a FIFO" in r.output, r.output


def test_fifo_in_an_autoencoder_directory(image_vae, tmp_path):
    """--vae naming a directory whose weights file is a FIFO: refused naming it, before diffusers opens it."""
    vae = tmp_path / "vae"
    shutil.copytree(image_vae, vae)
    weights = next(p for p in vae.iterdir() if p.name != "config.json")
    weights.unlink()
    os.mkfifo(weights)
    img = tmp_path / "in" / "cat"
    img.mkdir(parents=True)
    Image.fromarray(random_images(1)[0]).save(img / "a.png")
    r = _within(
        CliRunner().invoke,
        cli,
        [
            "convert",
            "--input",
            str(tmp_path / "in"),
            "--output",
            str(tmp_path / "o"),
            "--vae",
            str(vae),
            "--device",
            "cpu",
            "--quiet",
        ],
    )
    assert r.exit_code == 1 and f"{weights}: is a FIFO" in r.output, r.output
