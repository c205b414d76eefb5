"""WebDataset tar shards as `dataprep convert --input`: img2dataset's layout, local or s3://, brace patterns, into
every format, with --size, labels from `cls` and captions from `txt` kept in the stream shards."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
from click.testing import CliRunner
from PIL import Image

from dataprep.cli import cli
from dataprep.formats import module
from dataprep.manifest import load_manifest
from dataprep.sources.webdataset import expand_braces

N_SHARDS, PER_SHARD = 3, 7


def image(k: int, size: tuple[int, int] = (12, 10)) -> np.ndarray:
    rng = np.random.default_rng(k)
    return rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)


def write_shards(folder: Path, sizes=None, broken: int | None = None) -> list[np.ndarray]:
    """img2dataset's layout: KEY.png (or .jpg for odd keys, decoded back for the truth), KEY.cls, KEY.txt, KEY.json."""
    folder.mkdir(parents=True, exist_ok=True)
    truth = []
    for s in range(N_SHARDS):
        with tarfile.open(folder / f"{s:05d}.tar", "w") as tar:
            for j in range(PER_SHARD):
                k = s * PER_SHARD + j
                pixels = image(k, sizes[k] if sizes else (12, 10))
                buf = io.BytesIO()
                Image.fromarray(pixels).save(buf, "PNG")
                data = buf.getvalue() if k != broken else b"not an image"
                members = {
                    f"{k:09d}.png": data,
                    f"{k:09d}.cls": str(k % 3 * 5).encode(),
                    f"{k:09d}.txt": f"caption {k}".encode(),
                    f"{k:09d}.json": json.dumps({"k": k}).encode(),
                }
                for name, blob in members.items():
                    info = tarfile.TarInfo(name)
                    info.size = len(blob)
                    tar.addfile(info, io.BytesIO(blob))
                truth.append(pixels)
    return truth


def convert(args: list[str]):
    return CliRunner().invoke(cli, ["convert", *args, "--quiet", "--workers", "1"])


def test_braces_expand_in_order():
    """Zero-padded ranges keep their width; lists and several braces expand left to right."""
    assert expand_braces("s/{00008..00011}.tar") == [f"s/{i:05d}.tar" for i in range(8, 12)]
    assert expand_braces("{a,b}-{1..2}") == ["a-1", "a-2", "b-1", "b-2"]


def test_local_shards_into_every_format_with_labels_and_captions(tmp_path):
    """A brace pattern over local shards converts to all formats and stream: pixels exact, labels from cls (classes
    sorted numerically), captions in the stream shards and the manifest's schema."""
    truth = write_shards(tmp_path / "shards")
    out = tmp_path / "out"
    r = convert(
        [
            "--input",
            str(tmp_path / "shards" / "{00000..00002}.tar"),
            "--output",
            str(out),
            "--format",
            "hdf5,dali,stream",
        ]
    )
    assert r.exit_code == 0, r.output
    m = load_manifest(out)
    assert m["count"] == N_SHARDS * PER_SHARD and m["classes"] == ["0", "5", "10"]
    assert m["schema"]["txt"].startswith("utf-8 caption")
    for fmt in ("hdf5", "dali", "stream"):
        chunk = next(module(fmt).read_chunks(out, m, 1000))
        assert np.array_equal(chunk.x, np.stack(truth)), fmt
        assert chunk.y.tolist() == [k % 3 for k in range(len(truth))]
    chunk = next(module("stream").read_chunks(out, m, 1000))
    assert chunk.text == [f"caption {k}" for k in range(len(truth))]
    assert CliRunner().invoke(cli, ["verify", str(out)]).exit_code == 0


def test_size_resizes_mixed_sizes_and_bad_members_are_named(tmp_path):
    """Images of several sizes need --size; a member that is not an image is named as SHARD:MEMBER."""
    sizes = {k: (12 + k % 4, 10 + k % 3) for k in range(N_SHARDS * PER_SHARD)}
    write_shards(tmp_path / "shards", sizes)
    r = convert(["--input", str(tmp_path / "shards"), "--output", str(tmp_path / "o"), "--format", "hdf5"])
    assert r.exit_code == 1 and "--size" in r.output
    r = convert(
        ["--input", str(tmp_path / "shards"), "--output", str(tmp_path / "o"), "--format", "hdf5", "--size", "8"]
    )
    assert r.exit_code == 0, r.output
    assert load_manifest(tmp_path / "o")["sample_shape"] == [8, 8, 3]
    write_shards(tmp_path / "bad", broken=9)
    r = convert(["--input", str(tmp_path / "bad"), "--output", str(tmp_path / "b"), "--format", "hdf5"])
    assert r.exit_code == 1 and "00001.tar:000000009.png" in r.output


def test_s3_shards_convert_as_local_ones(seaweed, tmp_path):
    """The same shards in object storage, by pattern and by prefix, give the same samples as the local ones."""
    write_shards(tmp_path / "shards")
    bucket, s3 = seaweed.bucket(), seaweed.client()
    for p in sorted((tmp_path / "shards").glob("*.tar")):
        s3.upload_file(str(p), bucket, f"wds/{p.name}")
    assert (
        convert(
            ["--input", str(tmp_path / "shards"), "--output", str(tmp_path / "local"), "--format", "hdf5"]
        ).exit_code
        == 0
    )
    digest = load_manifest(tmp_path / "local")["digest"]["total"]
    for source in (f"s3://{bucket}/wds/{{00000..00002}}.tar", f"s3://{bucket}/wds"):
        out = tmp_path / f"remote{len(source)}"
        r = convert(["--input", source, "--output", str(out), "--format", "hdf5"])
        assert r.exit_code == 0, r.output
        assert load_manifest(out)["digest"]["total"] == digest
