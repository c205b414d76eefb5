"""Source details the round-trip suite does not reach, and the DALI layout read by DALI's own native reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from dataprep_helpers import (
    FORMATS,
    decode_audio_truth,
    make_cifar_pickles,
    make_imagefolder,
    make_kaggle,
    read_all,
    stored_order,
)

from dataprep.convert import ConvertConfig, convert
from dataprep.sources import InputError, detect


def _convert(inp, out, **kw) -> dict:
    return convert(ConvertConfig(output=out, input=inp, progress=False, workers=1, **kw))


@pytest.mark.slow
def test_audio_labels_from_folders(tmp_path):
    """Clips in <label>/ folders take the folder name as label (not the file-name prefix), any rate or channels."""
    import soundfile as sf

    rng = np.random.default_rng(1)
    specs = [
        ("yes/1_a.flac", 44100, 2, 0.7),
        ("yes/b.wav", 8000, 1, 1.3),
        ("no/c.wav", 16000, 1, 0.4),
        ("no/2_d.ogg", 22050, 2, 0.9),
    ]
    for name, rate, ch, secs in specs:
        (tmp_path / "in" / name).parent.mkdir(parents=True, exist_ok=True)
        t = np.arange(int(rate * secs)) / rate
        wave = 0.2 * np.sin(2 * np.pi * 300 * t)[:, None] * np.linspace(1, 0.5, ch) + 0.01 * rng.random((len(t), ch))
        sf.write(tmp_path / "in" / name, wave.astype(np.float32), rate)
    m = _convert(tmp_path / "in", tmp_path / "out")
    assert m["source"]["kind"] == "audio" and m["classes"] == ["no", "yes"]
    paths = stored_order(list((tmp_path / "in").rglob("*.*")))
    truth = [decode_audio_truth(p) for p in paths]
    labels = [["no", "yes"].index(p.parent.name) for p in paths]
    for fmt in FORMATS:
        x, y, length = read_all(tmp_path / "out", fmt)
        assert np.array_equal(x, np.stack([t[0] for t in truth])), fmt
        assert np.array_equal(length, [t[1] for t in truth]) and np.array_equal(y, labels)


def test_layouts_are_detected(tmp_path):
    """Each known layout is recognised from its files alone; a stray file's error lists every known layout."""
    make_cifar_pickles(tmp_path / "p", n_per_batch=2)
    make_kaggle(tmp_path / "k", n=3)
    make_imagefolder(tmp_path / "f", n_per_class=1)
    assert detect(tmp_path / "p") == detect(tmp_path / "p" / "cifar-10-batches-py") == "cifar10"
    assert detect(tmp_path / "k") == "kaggle" and detect(tmp_path / "f") == "imagefolder"
    (tmp_path / "readme.md").write_text("hi")
    with pytest.raises(InputError, match=r"readme.md: a file that is not a tar or zip archive; known layouts: cifar10"):
        detect(tmp_path / "readme.md")


def test_forced_source_must_match(tmp_path):
    """--source names the layout to read; a mismatch says what that source expects instead of guessing."""
    make_imagefolder(tmp_path / "f", n_per_class=1)
    with pytest.raises(InputError, match=r"expected train/<id>.png and trainLabels.csv"):
        _convert(tmp_path / "f", tmp_path / "o", source="kaggle")
    with pytest.raises(InputError, match=r"no cifar-10-batches-py files"):
        _convert(tmp_path / "f", tmp_path / "o", source="cifar10")
    assert not (tmp_path / "o").exists()


def _dali_read(data_dir: Path, manifest: dict) -> tuple[np.ndarray, ...]:
    """Every sample through fn.readers.webdataset with the index files, on a CPU pipeline, as the loader does."""
    from nvidia.dali import fn, pipeline_def, types

    from dataprep.formats.dali import data_ext, shard_paths

    paths, index_paths = shard_paths(data_dir)
    audio = manifest["kind"] == "audio"
    exts = [data_ext(manifest["kind"]), "cls"] + (["len"] if audio else [])
    dtypes = [types.FLOAT if audio else types.UINT8, types.INT64] + ([types.INT64] if audio else [])

    @pipeline_def(batch_size=8, num_threads=1, device_id=None)
    def pipe():
        return tuple(fn.readers.webdataset(paths=paths, index_paths=index_paths, ext=exts, dtypes=dtypes, name="r"))

    p = pipe()
    p.build()
    out: list[list[np.ndarray]] = [[] for _ in exts]
    while sum(len(o) for o in out[1]) < manifest["count"]:
        for k, batch in enumerate(p.run()):
            out[k].append(np.stack([np.asarray(batch[i]) for i in range(len(batch))]))
    count = manifest["count"]
    x = np.concatenate(out[0])[:count].reshape(count, *manifest["sample_shape"])
    return (x,) + tuple(np.concatenate(o)[:count].reshape(-1) for o in out[1:])


@pytest.mark.parametrize("source", ["synthetic-images", "synthetic-audio"])
def test_dali_native_reader_reads_every_shard(tmp_path, monkeypatch, source):
    """DALI's own webdataset reader, given the .idx files, returns every sample in order across several shards."""
    import dataprep.formats.dali as dali

    monkeypatch.setattr(dali, "SHARD_SAMPLES", 7)  # 20 samples -> shards of 7, 7 and 6
    m = _convert(None, tmp_path / "o", source=source, limit=20, formats=("dali", "hdf5"))
    assert len(dali.shard_paths(tmp_path / "o")[0]) == 3
    got = _dali_read(tmp_path / "o", m)
    x, y, length = read_all(tmp_path / "o", "hdf5")
    assert np.array_equal(got[0], x) and np.array_equal(got[1], y)
    if length is not None:
        assert np.array_equal(got[2], length)
