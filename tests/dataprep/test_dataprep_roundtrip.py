"""Every source kind converted to every format reads back sample-exact against independently decoded truth."""

from __future__ import annotations

import numpy as np
import pytest
from dataprep_helpers import (
    FORMATS,
    decode_audio_truth,
    make_audio,
    make_cifar_pickles,
    make_imagefolder,
    make_kaggle,
    read_all,
    stored_order,
)
from PIL import Image

from dataprep.convert import ConvertConfig, convert
from dataprep.sources.synthetic import SyntheticAudio, SyntheticImages
from dataprep.verify import verify

CIFAR_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
SOURCES = ["cifar10", "kaggle", "imagefolder", "audio", "synthetic-images", "synthetic-audio"]


def _convert(inp, out, **kw) -> dict:
    return convert(ConvertConfig(output=out, input=inp, progress=False, workers=2, **kw))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One conversion per source kind, to all formats; with the ground truth decoded by the test itself."""
    tmp = tmp_path_factory.mktemp("roundtrip")
    out = {}
    x, y, classes = make_cifar_pickles(tmp / "pickles")
    out["cifar10"] = (_convert(tmp / "pickles", tmp / "o_cifar"), tmp / "o_cifar", x, y, None)
    x, y = make_kaggle(tmp / "kaggle")
    out["kaggle"] = (_convert(tmp / "kaggle", tmp / "o_kaggle"), tmp / "o_kaggle", x, y, None)
    x, y = make_imagefolder(tmp / "folder")
    out["imagefolder"] = (_convert(tmp / "folder", tmp / "o_folder"), tmp / "o_folder", x, y, None)
    paths = make_audio(tmp / "clips")
    xs, lens = zip(*[decode_audio_truth(p) for p in stored_order(paths)])
    ys = np.array([int(p.name[0]) for p in stored_order(paths)])
    out["audio"] = (_convert(tmp / "clips", tmp / "o_audio"), tmp / "o_audio", np.stack(xs), ys, np.array(lens))
    for name, cls in (("synthetic-images", SyntheticImages), ("synthetic-audio", SyntheticAudio)):
        truth = next(cls(30).chunks(30, "error", 1))  # the generator itself, called directly
        manifest = _convert(None, tmp / name, source=name, limit=30)
        out[name] = (manifest, tmp / name, truth.x, truth.y, truth.length)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("source", SOURCES)
def test_round_trip_is_exact(built, source, fmt):
    """Samples, labels and lengths read back from each format equal the independently decoded source."""
    manifest, data_dir, x, y, length = built[source]
    assert manifest["source"]["kind"] == source
    gx, gy, glen = read_all(data_dir, fmt)
    assert gx.dtype == x.dtype and gx.shape == x.shape
    assert np.array_equal(gx, x), f"{fmt} differs from the decoded {source}"
    assert np.array_equal(gy, y)
    if length is not None:
        assert np.array_equal(glen, length)


def test_manifest_describes_the_set(built):
    """The manifest records count, shape, dtype, classes, file sizes and sha256 of every format."""
    manifest, data_dir, x, _, _ = built["cifar10"]
    assert manifest["count"] == len(x) == 100
    assert manifest["sample_shape"] == [32, 32, 3] and manifest["dtype"] == "uint8"
    assert manifest["classes"][0] == "airplane"
    assert set(manifest["formats"]) == set(FORMATS)
    for fmt in manifest["formats"].values():
        for f in fmt["files"]:
            assert (data_dir / f["path"]).stat().st_size == f["bytes"] and len(f["sha256"]) == 64
    audio = built["audio"][0]
    assert audio["audio"]["sample_rate"] == 16000 and audio["sample_shape"] == [16384]


def test_cifar_test_split_and_tarball(tmp_path):
    """The test split reads test_batch, and the .tar.gz form converts identically to the folder."""
    import tarfile

    make_cifar_pickles(tmp_path / "p", n_per_batch=10)
    with tarfile.open(tmp_path / "cifar-10-python.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "p" / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    a = _convert(tmp_path / "p", tmp_path / "a", split="test", formats=("hdf5",))
    b = _convert(tmp_path / "cifar-10-python.tar.gz", tmp_path / "b", split="test", formats=("hdf5",))
    assert a["count"] == b["count"] == 10
    assert a["digest"]["total"] == b["digest"]["total"]


def test_synthetic_sets_are_deterministic_prefixes(tmp_path):
    """Synthetic sample i depends only on i: a smaller --limit is a prefix of a larger one, and runs agree."""
    a = _convert(None, tmp_path / "a", source="synthetic-images", limit=40, formats=("hdf5",))
    _convert(None, tmp_path / "b", source="synthetic-images", limit=20, formats=("hdf5",))
    xa, _, _ = read_all(tmp_path / "a", "hdf5")
    xb, _, _ = read_all(tmp_path / "b", "hdf5")
    assert np.array_equal(xa[:20], xb)
    assert a["count"] == 40 and len(np.unique(xa.reshape(40, -1), axis=0)) == 40
    # structure, not noise: neighbouring pixels are strongly correlated
    diffs = np.abs(np.diff(xa.astype(int), axis=2)).mean()
    assert diffs < 30, "synthetic images should be smooth with texture, not white noise"


def test_synthetic_audio_is_padded_and_verifies(tmp_path):
    """Synthetic clips are zero after their true length, some are shorter than T, and verify passes on all formats."""
    m = _convert(None, tmp_path / "a", source="synthetic-audio", limit=12)
    x, _, length = read_all(tmp_path / "a", "hdf5")
    assert (length < 16384).any() and (length > 0).all()
    assert all((x[k, length[k] :] == 0).all() and x[k, length[k] - 1] != 0 for k in range(len(x)))
    assert verify(tmp_path / "a") == [] and m["count"] == 12


@pytest.mark.slow
def test_real_cifar_jpegs(cifar_jpg_root, tmp_path):
    """Real CIFAR-10 JPEGs: the formats hold exactly what PIL decodes from each JPEG, in the stored order."""
    m = _convert(cifar_jpg_root, tmp_path / "c", split="test", limit=2500)
    assert m["source"]["kind"] == "imagefolder" and m["count"] == 2500 and m["classes"] == CIFAR_CLASSES
    files = stored_order([p for c in CIFAR_CLASSES for p in (cifar_jpg_root / "test" / c).iterdir()])[:2500]
    truth = np.stack([np.asarray(Image.open(p).convert("RGB")) for p in files])
    labels = [CIFAR_CLASSES.index(p.parent.name) for p in files]
    for fmt in FORMATS:
        x, y, _ = read_all(tmp_path / "c", fmt)
        assert np.array_equal(x, truth) and np.array_equal(y, labels)
    assert verify(tmp_path / "c") == []


@pytest.mark.slow
def test_real_spoken_digits(fsdd_root, tmp_path):
    """Real spoken-digit clips: 8 kHz WAVs resampled to 16 kHz match the documented pipeline in every format."""
    m = _convert(fsdd_root / "recordings", tmp_path / "d", limit=300)
    assert m["classes"] == [str(d) for d in range(10)] and m["count"] == 300
    paths = stored_order(list((fsdd_root / "recordings").iterdir()))[:300]
    truth = [decode_audio_truth(p) for p in paths]
    for fmt in FORMATS:
        x, y, length = read_all(tmp_path / "d", fmt)
        assert np.array_equal(x, np.stack([t[0] for t in truth]))
        assert np.array_equal(length, [t[1] for t in truth])
        assert np.array_equal(y, [int(p.name[0]) for p in paths])


@pytest.mark.parametrize("channels", [1, 2])
def test_decoding_processes_send_clips_unpadded(tmp_path, channels):
    """What a decoding process returns holds the clip's own samples only (the padding of a short clip to 10.24 s
    would be most of the bytes through the pool's pipe); the chunks hold them padded, equal to the decoded truth."""
    from dataprep.sources.audio import AudioSource, decode_audio
    from dataprep.sources.base import AudioSpec

    paths = make_audio(tmp_path / "clips")
    spec = AudioSpec(16000, 10.24, channels)
    source = AudioSource(tmp_path / "clips", spec=spec)
    sent = [source.decode(p) for p, _ in source.items]
    assert [x.shape for x, _ in sent] == [(n, channels) for _, n in sent] and max(n for _, n in sent) == 24000  # 1.5 s
    (chunk,) = source.chunks(len(paths), "error", 2)
    truth = [decode_audio(p, spec) for p in stored_order(paths)]
    assert chunk.x.shape == (len(paths), *spec.sample_shape())
    assert np.array_equal(chunk.x, np.stack([x for x, _ in truth])) and list(chunk.length) == [n for _, n in truth]
