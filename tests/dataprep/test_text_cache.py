"""`dataprep convert --text-encoder`: each distinct caption encoded once, its valid tokens, mask and pooled vector
stored beside the samples, equal to an independent encoding of the same captions to the stored dtype's rounding;
the manifest records the encoder, verify checks the table, and captions are required."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from dataprep_helpers import make_cifar_pickles, make_imagefolder

from dataprep.cli import cli
from dataprep.formats import module
from dataprep.manifest import load_manifest
from dataprep.textcache import TextTable
from dataprep.textenc import load_text_encoder
from dataprep.verify import verify

TEMPLATES = ("a photo of a {label}", "a small {label} in a long caption about nothing in particular")
RELATIVE = {"fp16": 2**-10, "bf16": 2**-7}  # one rounding of the stored dtype, relative


def convert(src: Path, out: Path, *extra: str):
    args = ["convert", "--input", str(src), "--output", str(out), "--format", "hdf5", "--quiet", "--workers", "1"]
    flags = [a for t in TEMPLATES for a in ("--caption-template", t)]
    return CliRunner().invoke(cli, [*args, *flags, "--batch-size", "8", *extra])


@pytest.fixture(scope="module")
def cifar(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cifar-pickles")
    make_cifar_pickles(root, n_per_batch=8)  # 40 training images, 10 classes
    return root


def stored_captions(out: Path) -> list[str]:
    return [t for c in module("hdf5").read_chunks(out, load_manifest(out), 64) for t in c.text]


@pytest.mark.parametrize(("kind", "dtype"), [("clip", "fp16"), ("t5", "bf16")])
def test_cached_embeddings_equal_an_independent_encoding(cifar, text_encoders, tmp_path, kind, dtype):
    """Every sample's cached tokens, mask and pooled vector equal the encoder's own output for its caption, to one
    rounding of the stored dtype; each distinct caption stored once, the empty caption among them, and only its
    valid tokens."""
    r = convert(cifar, tmp_path / "out", "--text-encoder", str(text_encoders[kind]), "--text-dtype", dtype)
    assert r.exit_code == 0, r.output
    captions = stored_captions(tmp_path / "out")
    m = load_manifest(tmp_path / "out")
    got = TextTable(tmp_path / "out", m).lookup(captions)
    want = load_text_encoder(text_encoders[kind]).encode(captions)
    assert (
        torch.equal(got.mask, want.mask) and got.tokens.dtype == {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    )
    for a, b in ((got.tokens, want.tokens), (got.pooled, want.pooled)):
        assert torch.allclose(a.float(), b, rtol=RELATIVE[dtype], atol=1e-6)
    t = m["text"]
    distinct = [*set(captions), ""]  # the empty caption: caption dropout's, cached once
    assert t["captions"] == len(distinct) < len(captions) and "" not in captions
    want_all = load_text_encoder(text_encoders[kind]).encode(distinct)
    assert t["tokens"] == int(want_all.mask.sum())
    assert (t["encoder"]["name"], t["encoder"]["kind"], t["dtype"]) == (kind, kind, dtype)
    assert verify(tmp_path / "out") == []


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["clip", "t5"])
def test_a_gpu_conversion_caches_what_the_encoder_gives_there(cifar, text_encoders, tmp_path, kind):
    """On a GPU (bf16, CUDA graphs, each batch's copy to the host queued behind the next batch), every sample's
    cached embedding is the eager bf16 encoder's for its caption, to bf16 rounding."""
    r = convert(cifar, tmp_path / "out", "--text-encoder", str(text_encoders[kind]), "--device", "cuda")
    assert r.exit_code == 0, r.output
    captions = stored_captions(tmp_path / "out")
    got = TextTable(tmp_path / "out", load_manifest(tmp_path / "out")).lookup(captions)
    want = load_text_encoder(text_encoders[kind], "cuda", torch.bfloat16).encode(captions).to("cpu")
    torch.cuda.synchronize()  # TextEmbeddings.to copies without waiting
    assert torch.equal(got.mask, want.mask)
    for a, b in ((got.tokens, want.tokens), (got.pooled, want.pooled)):
        torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2)


def test_max_tokens_cuts_captions(cifar, text_encoders, tmp_path):
    """--text-max-tokens 5: no caption keeps more than 5 tokens, and the manifest says 5."""
    r = convert(cifar, tmp_path / "out", "--text-encoder", str(text_encoders["clip"]), "--text-max-tokens", "5")
    assert r.exit_code == 0, r.output
    m = load_manifest(tmp_path / "out")
    got = TextTable(tmp_path / "out", m).lookup(stored_captions(tmp_path / "out"))
    assert m["text"]["max_tokens"] == 5 and got.mask.sum(1).max() == 5


def test_verify_names_a_damaged_table(cifar, text_encoders, tmp_path):
    """A changed byte in text/tokens.bin is named by verify; so is an edited text entry of the manifest."""
    out = tmp_path / "out"
    assert convert(cifar, out, "--text-encoder", str(text_encoders["clip"])).exit_code == 0
    damaged = tmp_path / "damaged"
    shutil.copytree(out, damaged)
    data = bytearray((damaged / "text" / "tokens.bin").read_bytes())
    data[7] ^= 0xFF
    (damaged / "text" / "tokens.bin").write_bytes(bytes(data))
    assert any(p.startswith("text: text/tokens.bin sha256 differs") for p in verify(damaged)), verify(damaged)
    m = json.loads((out / "manifest.json").read_text())
    m["text"]["max_tokens"] = 1000
    (out / "manifest.json").write_text(json.dumps(m))
    assert any("text.max_tokens" in p for p in verify(out)), verify(out)


def test_the_encoders_weights_are_hashed_beside_the_encoding(text_encoders, tmp_path, monkeypatch):
    """The manifest's identity of the encoder (a sha256 over its weights: seconds for a T5-XL-sized one) is computed
    on a thread of its own from the writer's start, not after the last caption, where it held the conversion up."""
    import threading

    import dataprep.textenc.identity as identity
    from dataprep.textcache_write import TextCacheWriter

    real, seen = identity.encoder_sha256, []

    def recorded(folder):
        seen.append(threading.current_thread().name)
        return real(folder)

    monkeypatch.setattr(identity, "encoder_sha256", recorded)
    encoder = load_text_encoder(text_encoders["t5"])
    writer = TextCacheWriter(tmp_path, encoder, "bf16", batch_size=4)
    writer.add([f"caption {k}" for k in range(10)])
    _, text = writer.finish()
    assert len(seen) == 1 and seen[0].startswith("text-encoder-sha256"), seen
    assert text["encoder"]["sha256"] == real(text_encoders["t5"])


def test_a_conversion_hashes_the_encoder_before_it_loads_it(captioned, text_encoders, tmp_path, monkeypatch):
    """convert --text-encoder starts the encoder's hash before importing and loading the encoder (seconds each for a
    large one), on a thread of its own, once."""
    import threading

    import dataprep.textenc as textenc
    import dataprep.textenc.identity as identity

    real_hash, real_soon, real_load, events = (
        identity.encoder_sha256,
        identity.sha256_soon,
        textenc.load_text_encoder,
        [],
    )

    def hashed(folder):
        events.append(("hash", threading.current_thread().name))
        return real_hash(folder)

    def soon(folder):
        events.append(("start", threading.current_thread().name))
        return real_soon(folder)

    def loaded(*args, **kwargs):
        events.append(("load", threading.current_thread().name))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(identity, "encoder_sha256", hashed)
    monkeypatch.setattr(identity, "sha256_soon", soon)
    monkeypatch.setattr(textenc, "load_text_encoder", loaded)
    args = ["convert", "--input", str(captioned), "--format", "hdf5", "--quiet", "--output", str(tmp_path / "out")]
    r = CliRunner().invoke(cli, [*args, "--text-encoder", str(text_encoders["t5"]), "--device", "cpu"])
    assert r.exit_code == 0, r.output
    assert [e for e, _ in events if e != "hash"] == ["start", "load"], events
    assert [t for e, t in events if e == "hash"] == ["text-encoder-sha256"], events
    assert load_manifest(tmp_path / "out")["text"]["encoder"]["sha256"] == real_hash(text_encoders["t5"])


def test_text_encoder_needs_captions(text_encoders, tmp_path):
    """--text-encoder on samples without captions: one line saying how to give them some, nothing written."""
    make_cifar_pickles(tmp_path / "in", n_per_batch=4)
    args = ["convert", "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"), "--format", "hdf5"]
    r = CliRunner().invoke(cli, [*args, "--quiet", "--text-encoder", str(text_encoders["clip"])])
    assert r.exit_code == 1 and "no captions to encode with --text-encoder" in r.output, r.output
    assert "--caption-template" in r.output and not (tmp_path / "out").exists()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_vae_and_text_encoder_in_one_pass(cifar, text_encoders, image_vae, tmp_path, device):
    """--vae and --text-encoder together: latents and the caption table in one output, both verified; on a GPU both
    encoders capture their CUDA graphs, on two threads at once, and none falls back to eager."""
    extra = ["--vae", str(image_vae), "--device", device, "--text-encoder", str(text_encoders["clip"]), "--limit", "8"]
    r = convert(cifar, tmp_path / "out", *extra)
    assert r.exit_code == 0, r.output
    assert "no CUDA graph" not in r.output
    m = load_manifest(tmp_path / "out")
    assert (
        m["kind"] == "latent"
        and m["count"] == 8
        and m["text"]["captions"] == len(set(stored_captions(tmp_path / "out")) | {""})
    )
    assert verify(tmp_path / "out") == []


RANKS_CONVERT = """
import os, sys, torch
from dataprep import textcache_ranks
from dataprep.cli import cli
if os.environ.get("NO_SHARED_FOLDER"):  # as where the ranks see different file systems: rank 0 writes every batch
    textcache_ranks.shared_folder = lambda root: None
cli(sys.argv[1:], standalone_mode=False)  # the command as typed under torchrun, in this process
if torch.distributed.is_initialized():
    raise SystemExit("convert joined a process group and did not leave it")
"""


@pytest.fixture(scope="module")
def captioned(tmp_path_factory) -> Path:
    """An image folder of 24 images, each with a caption file of its own (the captions are listed before decoding)."""
    root = tmp_path_factory.mktemp("captioned")
    make_imagefolder(root, n_per_class=12)
    for k, image in enumerate(sorted(p for p in root.rglob("*") if p.suffix in (".jpg", ".png"))):
        image.with_suffix(".txt").write_text(f"{image.parent.name} number {k}, " + "and so on " * (k % 5))
    return root


def test_listed_captions_are_encoded_apart_from_the_samples_into_the_same_table(captioned, text_encoders, tmp_path):
    """Captions the listing holds are encoded on a thread of their own while the images decode; the table equals the
    one written from the decoded samples' captions (--on-bad-file skip, where a skipped file would drop one)."""
    args = ["convert", "--input", str(captioned), "--format", "hdf5", "--quiet", "--workers", "1", "--batch-size", "4"]
    args += ["--text-encoder", str(text_encoders["t5"]), "--device", "cpu"]
    for out, extra in (("ahead", []), ("streamed", ["--on-bad-file", "skip"])):
        r = CliRunner().invoke(cli, [*args, *extra, "--output", str(tmp_path / out)])
        assert r.exit_code == 0, r.output
    for name in ("captions.json", "tokens.bin", "offsets.bin", "pooled.bin"):
        assert (tmp_path / "ahead" / "text" / name).read_bytes() == (tmp_path / "streamed" / "text" / name).read_bytes()
    assert load_manifest(tmp_path / "ahead")["text"]["captions"] == 25  # 24 distinct and the empty one
    assert verify(tmp_path / "ahead") == []


def test_a_bad_image_stops_the_encoding_ahead_and_leaves_nothing(captioned, text_encoders, tmp_path):
    """A file that does not decode ends the conversion with its name while the listed captions are being encoded on
    their thread: that thread stops, and no output is left."""
    import threading

    bad = tmp_path / "in"
    shutil.copytree(captioned, bad)
    victim = sorted(bad.rglob("*.jpg"))[-1]
    victim.write_bytes(b"not a jpeg")
    args = ["convert", "--input", str(bad), "--format", "hdf5", "--quiet", "--batch-size", "2", "--workers", "1"]
    r = CliRunner().invoke(cli, [*args, "--text-encoder", str(text_encoders["t5"]), "--output", str(tmp_path / "out")])
    assert r.exit_code != 0 and victim.name in r.output, r.output
    assert not (tmp_path / "out").exists()
    ahead = [t for t in threading.enumerate() if t.name.startswith("text-encode")]
    for t in ahead:
        t.join(timeout=10)  # its last batch, at most
    assert not [t for t in ahead if t.is_alive()]


@pytest.mark.slow
@pytest.mark.parametrize("input_", ["templates", "caption files", "caption files, no shared folder"])
def test_torchrun_ranks_write_the_table_one_process_writes(captioned, text_encoders, tmp_path, input_):
    """Under torchrun with 2 ranks (gloo on the CPU) each rank encodes every other batch of distinct captions and
    writes it into the one table, byte for byte what one process writes: captions drawn from templates as the
    samples are read, and captions listed with the images, which the other rank encodes without decoding an image;
    where the ranks do not share the output folder, rank 0 receives the batches and writes them all."""
    if input_ == "templates":
        args = ["convert", "--source", "synthetic-images", "--limit", "100"]
        args += [a for t in TEMPLATES for a in ("--caption-template", t)]
    else:
        args = ["convert", "--input", str(captioned), "--timings"]
    args += ["--format", "hdf5", "--quiet", "--text-encoder", str(text_encoders["t5"]), "--batch-size", "4"]
    args += ["--device", "cpu"]
    env = os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[2]), "OMP_NUM_THREADS": "1"}
    one = subprocess.run([sys.executable, "-m", "dataprep", *args, "--output", str(tmp_path / "one")], env=env)
    assert one.returncode == 0
    (tmp_path / "ranks.py").write_text(RANKS_CONVERT)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    two = subprocess.run(
        [*torchrun, str(tmp_path / "ranks.py"), *args, "--output", str(tmp_path / "two")],
        capture_output=True,
        text=True,
        env=env | ({"NO_SHARED_FOLDER": "1"} if "no shared" in input_ else {}),
        timeout=300,
    )
    assert two.returncode == 0, two.stderr[-2000:]
    for name in ("captions.json", "tokens.bin", "offsets.bin", "pooled.bin"):
        assert (tmp_path / "one" / "text" / name).read_bytes() == (tmp_path / "two" / "text" / name).read_bytes()
    text = [load_manifest(tmp_path / d)["text"] for d in ("one", "two")]
    assert [t["processes"] for t in text] == [1, 2] and text[1]["captions"] > 8  # > one turn of 2 ranks x 4
    assert [t["writing_processes"] for t in text] == [1, 1 if "no shared" in input_ else 2]
    assert "rank 1: decoded" not in two.stderr  # listed captions: rank 1 reads no image; templates: none to count


def test_overwrite_replaces_a_dataset_with_cached_embeddings(cifar, text_encoders, tmp_path):
    """--overwrite of an output holding text/: its files are the manifest's, so it is replaced, not refused."""
    encoder = ["--text-encoder", str(text_encoders["clip"]), "--limit", "8"]
    assert convert(cifar, tmp_path / "out", *encoder).exit_code == 0
    r = convert(cifar, tmp_path / "out", *encoder, "--overwrite")
    assert r.exit_code == 0, r.output


def test_text_options_need_the_encoder(tmp_path):
    """--text-max-tokens or --text-dtype fp16 without --text-encoder: a usage error naming the option, not ignored."""
    for extra in (["--text-max-tokens", "5"], ["--text-dtype", "fp16"]):
        args = ["convert", "--source", "synthetic-images", "--limit", "4", "--output", str(tmp_path / "o"), *extra]
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 2 and f"Invalid value for {extra[0]}" in r.output and "add --text-encoder" in r.output
        assert not (tmp_path / "o").exists()


@pytest.fixture(scope="module")
def remote_captioned(seaweed, cifar, text_encoders) -> str:
    """The cifar pickles with CLIP embeddings cached, as hdf5 and stream, converted straight to s3://BUCKET/text."""
    url = f"s3://{seaweed.bucket()}/text"
    args = ["convert", "--input", str(cifar), "--output", url, "--format", "hdf5,stream", "--quiet", "--workers", "1"]
    flags = [a for t in TEMPLATES for a in ("--caption-template", t)]
    r = CliRunner().invoke(cli, [*args, *flags, "--batch-size", "8", "--text-encoder", str(text_encoders["clip"])])
    assert r.exit_code == 0, r.output
    return url


def test_stream_from_s3_delivers_the_cached_embeddings_read_locally(remote_captioned, tmp_path, monkeypatch):
    """The stream loader on s3:// data with cached embeddings: every batch's text (tokens, mask, pooled) equals, element
    by element, what the hdf5 loader delivers from the same dataset downloaded; its cache folder is gone after close."""
    from dataprep.remote import download_dataset
    from loaders import build_loader

    monkeypatch.setenv("GPUFEED_STREAM_CACHE", str(tmp_path / "caches"))
    local = tmp_path / "local"
    local.mkdir()
    download_dataset(remote_captioned, local)
    kw = dict(batch_size=8, workers=0, shuffle=False, augment=False, drop_last=False)
    with build_loader("hdf5", local, **kw) as loader:
        want = list(loader)
    with build_loader("stream", remote_captioned, **kw) as loader:
        got, cache = list(loader), loader.cache
    assert len(got) == len(want) == 5 and not cache.exists()
    for g, w in zip(got, want):
        assert torch.equal(g.y, w.y) and torch.equal(g.x, w.x)
        for name in ("tokens", "mask", "pooled"):
            assert torch.equal(getattr(g.text, name), getattr(w.text, name)), name


def copy_prefix(s3, bucket: str, src: str, dst: str) -> None:
    """Every object under `src/` copied to `dst/` inside the store."""
    for obj in s3.list_objects_v2(Bucket=bucket, Prefix=f"{src}/")["Contents"]:
        key = dst + obj["Key"][len(src) :]
        s3.copy_object(Bucket=bucket, Key=key, CopySource={"Bucket": bucket, "Key": obj["Key"]})


@pytest.mark.parametrize("fault", ["damaged", "missing"])
def test_a_bad_text_file_in_the_store_is_named_in_one_line(remote_captioned, seaweed, tmp_path, monkeypatch, fault):
    """A text/ file changed by one byte (or gone) in the store: the stream loader's open fails with one line naming
    that object and `dataprep verify`, and leaves no cache folder behind."""
    from dataprep.remote import S3Url, load_remote_manifest
    from loaders import LoaderError, build_loader

    monkeypatch.setenv("GPUFEED_STREAM_CACHE", str(tmp_path / "caches"))
    url, s3 = S3Url.parse(remote_captioned), seaweed.client()
    copy = f"s3://{url.bucket}/{fault}"
    copy_prefix(s3, url.bucket, url.prefix, fault)
    name = "text/tokens.bin" if fault == "damaged" else "text/captions.json"
    key = f"{fault}/{load_remote_manifest(copy)['generation']}/{name}"
    if fault == "damaged":
        data = bytearray(s3.get_object(Bucket=url.bucket, Key=key)["Body"].read())
        data[7] ^= 0xFF
        s3.put_object(Bucket=url.bucket, Key=key, Body=bytes(data))
    else:
        s3.delete_object(Bucket=url.bucket, Key=key)
    with pytest.raises(LoaderError) as e:
        build_loader("stream", copy, batch_size=8, workers=0)
    message = str(e.value)
    assert "\n" not in message and f"s3://{url.bucket}/{key}" in message, message
    assert f"dataprep verify {copy}" in message and ("sha256" in message) == (fault == "damaged"), message
    assert list((tmp_path / "caches").iterdir()) == []


def test_train_on_s3_data_with_cached_embeddings(remote_captioned, tmp_path, monkeypatch):
    """train --data s3://... --loader stream with a text model and caption dropout: the empty caption comes from the
    data's table in the store; the run ends with a sample grid drawn from it."""
    from training_helpers import tiny_cfg

    from training.loop import main

    monkeypatch.setenv("GPUFEED_STREAM_CACHE", str(tmp_path / "caches"))
    cfg = tiny_cfg(remote_captioned, tmp_path / "run", model="tiny_text", loader="stream", batch_size=8, steps=2)
    cfg.sample_every, cfg.sample_steps, cfg.sample_count, cfg.ckpt_every, cfg.timing_warmup = 2, 1, 1, 0, 0
    summary = main(cfg)
    assert len(summary.losses) == 2 and (tmp_path / "run" / "samples" / "step0000002.png").is_file()


def test_bench_loaders_on_s3_data_with_cached_embeddings(remote_captioned, tmp_path, monkeypatch):
    """bench loaders --data s3://... on a text model: the stream run and the data-free run both finish (the injected
    loader's run reads the store's manifest, whose table holds the empty caption for caption dropout)."""
    import json

    from bench.cli import cli as bench_cli

    monkeypatch.setenv("GPUFEED_STREAM_CACHE", str(tmp_path / "caches"))
    out = tmp_path / "grid"
    args = ["loaders", "--data", remote_captioned, "--model", "tiny_text", "--workers", "0", "--batch-size", "8"]
    r = CliRunner().invoke(
        bench_cli, [*args, "--steps", "2", "--timing-warmup", "1", "--device", "cpu", "--out", str(out)]
    )
    assert r.exit_code == 0, r.output
    runs = [json.loads(p.read_text()) for p in out.glob("*-r0.json")]
    assert sorted(run["name"].split("-")[0] for run in runs) == ["datafree", "stream"], runs
    assert all("error" not in run and run["figures"]["samples_per_s"] > 0 for run in runs), runs


def test_the_table_writer_places_every_array_in_order(tmp_path):
    """textcache_write._write_at: more arrays than one pwritev takes (1,024), empty ones and 16-bit rows among them,
    land in the file in order from the offset given, byte for byte, the later half written first (as ranks may)."""
    import numpy as np

    from dataprep.textcache_write import _write_at

    rng = np.random.default_rng(0)
    arrays = [rng.integers(-(2**15), 2**15, (int(rng.integers(0, 9)), 3), dtype="<i2") for _ in range(1500)]
    fd = os.open(tmp_path / "t.bin", os.O_WRONLY | os.O_CREAT)
    try:
        _write_at(fd, arrays[700:], sum(a.nbytes for a in arrays[:700]))
        _write_at(fd, arrays[:700], 0)
    finally:
        os.close(fd)
    assert (tmp_path / "t.bin").read_bytes() == b"".join(a.tobytes() for a in arrays)
