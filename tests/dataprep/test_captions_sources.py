"""Captions read from where people keep them: caption files beside images or clips, Hugging Face's imagefolder
metadata, WebDataset's `json`, and templates from class names; bad caption files are one-line errors naming them."""

from __future__ import annotations

import csv
import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from dataprep_helpers import make_cifar_pickles, stored_order

from dataprep.cli import cli
from dataprep.formats import module
from dataprep.manifest import load_manifest
from dataprep.sources.captions import Templates
from dataprep.sources.files import list_files

N = 12


def convert(src: Path, out: Path, *extra: str):
    args = ["convert", "--input", str(src), "--output", str(out), "--format", "stream", "--quiet", "--workers", "1"]
    return CliRunner().invoke(cli, [*args, *extra])


def captions_of(out: Path) -> list[str]:
    chunks = module("stream").read_chunks(out, load_manifest(out), 256)
    return [t for c in chunks for t in c.text]


def jpegs(cifar_jpg_root: Path, folder: Path, n: int = N) -> list[Path]:
    """`n` real CIFAR-10 JPEGs copied flat into `folder`."""
    folder.mkdir(parents=True)
    return [Path(shutil.copy(p, folder)) for p in list_files(cifar_jpg_root / "train" / "cat")[:n]]


def test_caption_files_beside_images(cifar_jpg_root, tmp_path):
    """`cat.jpg` + `cat.txt`: each image gets its own caption file's text, in the stored order, none a sample."""
    images = jpegs(cifar_jpg_root, tmp_path / "in")
    for p in images:
        p.with_suffix(".txt").write_text(f"  a cat called {p.stem}\n")
    r = convert(tmp_path / "in", tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert captions_of(tmp_path / "out") == [f"a cat called {p.stem}" for p in stored_order(images)]
    assert load_manifest(tmp_path / "out")["count"] == N


@pytest.mark.parametrize("name", ["metadata.jsonl", "metadata.csv"])
def test_hugging_face_metadata(cifar_jpg_root, tmp_path, name):
    """imagefolder's metadata.jsonl/csv: the row's `text` is the caption of the file its `file_name` names."""
    images = jpegs(cifar_jpg_root, tmp_path / "in")
    rows = [{"file_name": p.name, "text": f'photo, {p.stem}, "quoted"'} for p in images]
    if name.endswith("jsonl"):
        (tmp_path / "in" / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        with open(tmp_path / "in" / name, "w", newline="") as f:
            w = csv.DictWriter(f, ["file_name", "text"])
            w.writeheader()
            w.writerows(rows)
    r = convert(tmp_path / "in", tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert captions_of(tmp_path / "out") == [f'photo, {p.stem}, "quoted"' for p in stored_order(images)]


def test_caption_files_beside_clips(fsdd_root, tmp_path):
    """A folder of spoken-digit clips with `X.txt` beside each: labels from the prefix, captions from the files."""
    (tmp_path / "in").mkdir()
    clips = [Path(shutil.copy(p, tmp_path / "in")) for p in list_files(fsdd_root / "recordings")[:N]]
    for p in clips:
        p.with_suffix(".txt").write_text(f"someone says {p.stem.split('_')[0]} ({p.stem})")
    r = convert(tmp_path / "in", tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert captions_of(tmp_path / "out") == [
        f"someone says {p.stem.split('_')[0]} ({p.stem})" for p in stored_order(clips)
    ]


def test_missing_caption_file_is_named(cifar_jpg_root, tmp_path):
    """Some images with a caption file and one without: an error naming that image, nothing written."""
    images = jpegs(cifar_jpg_root, tmp_path / "in")
    for p in images[1:]:
        p.with_suffix(".txt").write_text("a cat")
    r = convert(tmp_path / "in", tmp_path / "out")
    assert r.exit_code == 1 and f"{images[0].name}: no caption (1 of {N}" in r.output, r.output
    assert "Traceback" not in r.output and not (tmp_path / "out").exists()


def test_undecodable_caption_file_is_named(cifar_jpg_root, tmp_path):
    """A caption file that is not UTF-8: an error naming it and saying to save it as UTF-8."""
    images = jpegs(cifar_jpg_root, tmp_path / "in")
    for p in images:
        p.with_suffix(".txt").write_bytes(b"caf\xe9" if p == images[3] else b"cafe")
    r = convert(tmp_path / "in", tmp_path / "out")
    assert r.exit_code == 1 and f"{images[3].stem}.txt: caption file is not UTF-8" in r.output, r.output


def test_metadata_row_naming_a_missing_file(cifar_jpg_root, tmp_path):
    """A metadata row whose file_name is not in the folder: an error naming the metadata file and the name."""
    images = jpegs(cifar_jpg_root, tmp_path / "in")
    rows = [{"file_name": p.name, "text": "a cat"} for p in images] + [{"file_name": "gone.jpg", "text": "x"}]
    (tmp_path / "in" / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = convert(tmp_path / "in", tmp_path / "out")
    assert r.exit_code == 1 and "metadata.jsonl: names 'gone.jpg', which is not a sample" in r.output, r.output


def test_templates_from_class_names(tmp_path):
    """CIFAR-10 with two templates: each caption one of them filled with the sample's class, both drawn, the same
    captions on a second conversion, and the templates in the manifest."""
    _, y, classes = make_cifar_pickles(tmp_path / "in")
    templates = ["a photo of a {label}", "a blurry {label}"]
    flags = [a for t in templates for a in ("--caption-template", t)]
    outs = [tmp_path / "a", tmp_path / "b"]
    for out in outs:
        r = convert(tmp_path / "in", out, *flags)
        assert r.exit_code == 0, r.output
    got = captions_of(outs[0])
    assert len(got) == len(y) and got == captions_of(outs[1])
    assert all(c in {t.format(label=classes[k]) for t in templates} for c, k in zip(got, y))
    assert {c.startswith("a photo") for c in got} == {True, False}
    assert load_manifest(outs[0])["captions"]["templates"] == templates


def test_template_needs_label():
    """A template without {label}, or with another field, is refused with the fix."""
    for bad in ("a photo", "a {label} of {thing}"):
        with pytest.raises(ValueError, match="must hold {label} once"):
            Templates([bad])


def test_webdataset_json_caption(tmp_path):
    """img2dataset shards with the caption only in KEY.json's "caption": it is the sample's caption."""
    from PIL import Image

    (tmp_path / "shards").mkdir()
    with tarfile.open(tmp_path / "shards" / "00000.tar", "w") as tar:
        for k in range(4):
            buf = io.BytesIO()
            Image.new("RGB", (8, 8), (k, 0, 0)).save(buf, "PNG")
            for name, blob in ((f"{k:05d}.png", buf.getvalue()), (f"{k:05d}.json", json.dumps({"caption": f"c{k}"}))):
                data = blob if isinstance(blob, bytes) else blob.encode()
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    r = convert(tmp_path / "shards", tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert captions_of(tmp_path / "out") == [f"c{k}" for k in range(4)]
