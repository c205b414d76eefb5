"""A dataset in object storage is opened with the checks a local directory gets: a manifest value edited after
conversion (its field digests) and a listed path leading out of the dataset are refused by `train` and, for the
paths, by `dataprep info`, naming the manifest object and the fix. Real SeaweedFS (conftest's `seaweed`), real
conversions, manifests edited as a user with write access to the bucket could."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from objectstore_helpers import convert_synthetic

from dataprep.cli import cli as dataprep_cli
from dataprep.remote import S3Url
from training.cli import train

N = 64  # synthetic 32x32 images: one shard
TRAIN = "--loader stream --model dit_tiny --batch-size 8 --steps 2 --precision fp32 --device cpu --workers 0"
TRAIN += " --no-pin-memory --sample-every 0 --no-progress --log-every 1 --timing-warmup 0 --no-compile"
OUTSIDE = {"dotdot": "../elsewhere/chunk-0-0.bin", "absolute": "/etc/passwd"}


@pytest.fixture(scope="module")
def converted(seaweed, tmp_path_factory) -> tuple[str, Path]:
    """(s3://BUCKET/images, the same dataset as a local directory), converted once; tests edit copies."""
    url = convert_synthetic(f"s3://{seaweed.bucket()}/images", N, "stream")
    local = tmp_path_factory.mktemp("local") / "images"
    convert_synthetic(str(local), N, "stream")
    return url, local


@pytest.fixture
def remote(seaweed, converted) -> str:
    """A fresh copy of the converted dataset in a bucket of its own."""
    src, dst = S3Url.parse(converted[0]), S3Url(seaweed.bucket(), "images")
    s3 = seaweed.client()
    for obj in s3.list_objects_v2(Bucket=src.bucket)["Contents"]:
        s3.copy_object(Bucket=dst.bucket, Key=obj["Key"], CopySource={"Bucket": src.bucket, "Key": obj["Key"]})
    return str(dst)


def edit_remote(seaweed, location: str, change) -> None:
    url, s3 = S3Url.parse(location), seaweed.client()
    manifest = json.loads(s3.get_object(Bucket=url.bucket, Key=url.key("manifest.json"))["Body"].read())
    change(manifest)
    s3.put_object(Bucket=url.bucket, Key=url.key("manifest.json"), Body=json.dumps(manifest).encode())


def edit_local(data_dir: Path, change) -> None:
    manifest = json.loads((data_dir / "manifest.json").read_text())
    change(manifest)
    (data_dir / "manifest.json").write_text(json.dumps(manifest))


def run_train(data: str, out: Path):
    return CliRunner().invoke(train, ["--data", data, "--out", str(out), *TRAIN.split()])


def cut_a_class(m: dict) -> None:
    m["classes"] = m["classes"][:-1]


def lead_out(entry: str):
    def change(m: dict) -> None:
        m["formats"]["stream"]["files"][0]["path"] = entry

    return change


def test_an_edited_class_list_is_refused_remotely_as_locally(seaweed, converted, remote, tmp_path):
    """`classes` cut by one in an s3:// manifest stops `train` before a step, naming the object and the field, with
    the message the same edit gets in a local directory."""
    local = Path(shutil.copytree(converted[1], tmp_path / "images"))
    edit_local(local, cut_a_class)
    edit_remote(seaweed, remote, cut_a_class)
    here, there = run_train(str(local), tmp_path / "local-run"), run_train(remote, tmp_path / "remote-run")
    assert here.exit_code == 1 and "classes" in here.output, here.output
    assert there.exit_code == 1 and f"{remote}/manifest.json: classes (now [" in there.output, there.output
    assert "differs from what was converted" in there.output and f"dataprep verify {remote}" in there.output
    assert there.output.replace(remote, "DATA") == here.output.replace(str(local), "DATA")
    assert "Traceback" not in there.output and not (tmp_path / "remote-run" / "ckpt.pt").exists()


@pytest.mark.parametrize("how", sorted(OUTSIDE))
def test_a_remote_manifest_entry_leading_out_is_refused(seaweed, remote, tmp_path, how):
    """An s3:// manifest listing a path outside the dataset (`..`, absolute) is refused by `dataprep info` and
    `train`, naming the manifest object, the entry and the rule."""
    entry = OUTSIDE[how]
    edit_remote(seaweed, remote, lead_out(entry))
    for result in (CliRunner().invoke(dataprep_cli, ["info", remote]), run_train(remote, tmp_path / "run")):
        assert result.exit_code != 0, result.output
        assert f"{remote}/manifest.json: entry {entry!r}" in result.output, result.output
        assert "must stay inside it" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("how", sorted(OUTSIDE))
def test_a_local_manifest_entry_leading_out_is_refused_by_info(converted, tmp_path, how):
    """`dataprep info` of a local directory refuses a listed path leading out as the remote check does."""
    local = Path(shutil.copytree(converted[1], tmp_path / "images"))
    edit_local(local, lead_out(OUTSIDE[how]))
    result = CliRunner().invoke(dataprep_cli, ["info", str(local)])
    assert result.exit_code == 1 and f"{local}/manifest.json: entry {OUTSIDE[how]!r}" in result.output, result.output
