"""Builders of the bad-input corpus (test_dataprep_corpus.py). Each adds one case file to a folder of good ones and
returns what `dataprep convert` must do with it: ("fails", words of the message) or ("converts", pixels...)."""

from __future__ import annotations

import csv
import io
import os
import struct
import zlib
from pathlib import Path

import numpy as np
from dataprep_helpers import stored_order
from PIL import Image

RNG = np.random.default_rng(2024)
PIXELS = RNG.integers(0, 256, (8, 8, 3), dtype=np.uint8)


def good_images(folder: Path) -> None:
    folder.mkdir(parents=True)
    for i in range(2):
        Image.fromarray(np.roll(PIXELS, i, axis=0)).save(folder / f"a{i}.png")


def _jpeg(path: Path, mode: str = "RGB") -> bytes:
    smooth = np.clip(np.linspace(0, 255, 64).reshape(8, 8)[..., None] + PIXELS * 0.1, 0, 255).astype(np.uint8)
    Image.fromarray(smooth).convert(mode).save(path, quality=95)
    return path.read_bytes()


def _flip(path: Path, at: int, bit: int = 0x10) -> None:
    blob = bytearray(path.read_bytes())
    blob[at] ^= bit
    path.write_bytes(bytes(blob))


def _decoded(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def truncated_jpeg(d: Path):
    p = d / "b.jpg"
    p.write_bytes(_jpeg(p)[:300])
    return p, ("fails", "corrupt or truncated image")


def flipped_jpeg_marker(d: Path):
    p = d / "b.jpg"
    _jpeg(p)
    _flip(p, 0)  # the start-of-image marker
    return p, ("fails", "not an image")


def flipped_jpeg_scan(d: Path):
    """JPEG has no checksum: a flipped bit in the compressed scan decodes to other pixels, with no error anywhere.
    The converted sample is what the damaged file decodes to (what any loader of the file would see)."""
    p = d / "b.jpg"
    blob = _jpeg(p)
    _flip(p, blob.rfind(b"\xff\xda") + 20)
    return p, ("converts", _decoded(p))


def truncated_png(d: Path):
    p = d / "b.png"
    Image.fromarray(PIXELS).save(p)
    p.write_bytes(p.read_bytes()[:-30])
    return p, ("fails", "corrupt or truncated image")


def flipped_png(d: Path):
    p = d / "b.png"
    Image.fromarray(PIXELS).save(p)
    _flip(p, p.read_bytes().find(b"IDAT") + 10)  # the chunk's CRC no longer matches
    return p, ("fails", "corrupt or truncated image")


def png_of_another_size(d: Path):
    """The first image stored sets the shape the others must have: named so that a good image is stored first."""
    p = next(d / n for n in ("b.png", "a00.png", "0.png") if stored_order([*d.iterdir(), d / n])[0] != d / n)
    Image.fromarray(np.zeros((8, 9, 3), np.uint8)).save(p)
    return p, ("fails", "inconsistent sample shape (8, 9, 3)")


def cmyk_jpeg(d: Path):
    p = d / "b.jpg"
    _jpeg(p, "CMYK")
    with Image.open(p) as im:
        assert im.mode == "CMYK"
    rgb = _decoded(p)
    original = np.asarray(Image.open(io.BytesIO(_jpeg(d / "ref.jpg"))).convert("RGB"))
    (d / "ref.jpg").unlink()
    assert np.abs(rgb.astype(int) - original).mean() < 8, "PIL's CMYK decode should be near the RGB source"
    return p, ("converts", rgb)


def grayscale_png(d: Path):
    p = d / "b.png"
    gray = PIXELS[..., 0]
    Image.fromarray(gray, "L").save(p)
    return p, ("converts", np.repeat(gray[..., None], 3, axis=2))


def gray16_png(d: Path):
    p = d / "b.png"
    wide = RNG.integers(0, 65536, (8, 8)).astype(np.uint16)
    Image.fromarray(wide).save(p)
    return p, ("converts", np.repeat((wide >> 8).astype(np.uint8)[..., None], 3, axis=2))


def rgb16_png(d: Path):
    """A 48-bit PNG (PIL cannot write one): written chunk by chunk here."""
    p = d / "b.png"
    wide = RNG.integers(0, 65536, (8, 8, 3)).astype(np.uint16)
    raw = b"".join(b"\x00" + row.astype(">u2").tobytes() for row in wide)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 8, 8, 16, 2, 0, 0, 0)
    p.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    )
    return p, ("converts", (wide >> 8).astype(np.uint8))


def palette_png(d: Path):
    p = d / "b.png"
    palette = RNG.integers(0, 256, (4, 3), dtype=np.uint8)
    index = RNG.integers(0, 4, (8, 8), dtype=np.uint8)
    im = Image.fromarray(index, "P")
    im.putpalette(palette.reshape(-1).tolist())
    im.save(p)
    return p, ("converts", palette[index])


def empty_file(d: Path):
    p = d / "b.png"
    p.write_bytes(b"")
    return p, ("fails", "not an image")


def non_utf8_name(d: Path):
    p = Path(os.fsdecode(os.fsencode(d) + b"/caf\xe9.png"))
    Image.fromarray(PIXELS[::-1]).save(p, format="PNG")
    return p, ("converts", PIXELS[::-1])


def non_utf8_name_damaged(d: Path):
    p = Path(os.fsdecode(os.fsencode(d) + b"/bad\xff.png"))
    p.write_bytes(b"")
    return p, ("fails", "not an image")


def symlink_loop(d: Path):
    p = d / "loop.png"
    p.symlink_to("loop.png")
    return p, ("fails", "symlink loop")


def unreadable(d: Path):
    p = d / "b.png"
    Image.fromarray(PIXELS).save(p)
    p.chmod(0)
    return p, ("fails", "permission denied")


IMAGES = {
    f.__name__.replace("_", " "): f
    for f in (
        truncated_jpeg,
        flipped_jpeg_marker,
        flipped_jpeg_scan,
        truncated_png,
        flipped_png,
        png_of_another_size,
        cmyk_jpeg,
        grayscale_png,
        gray16_png,
        rgb16_png,
        palette_png,
        empty_file,
        non_utf8_name,
        non_utf8_name_damaged,
        symlink_loop,
        unreadable,
    )
}


def _tone(rate: int, seconds: float, channels: int = 1) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (0.3 * np.sin(2 * np.pi * 330 * t)[:, None] * np.linspace(1, 0.4, channels)).astype(np.float32)


def good_audio(folder: Path) -> None:
    import soundfile as sf

    folder.mkdir(parents=True)
    for name in ("0_a.wav", "1_b.wav"):
        sf.write(folder / name, _tone(16000, 0.5), 16000)


def _audio_fails(name: str, data: bytes):
    def build(d: Path):
        (d / name).write_bytes(data)
        return d / name, ("fails", "corrupt or unreadable audio")

    return build


def _cut(fmt: str):
    def build(d: Path):
        import soundfile as sf

        p = d / f"2_cut.{fmt.lower()}"
        sf.write(p, _tone(16000, 2.0), 16000, format=fmt)
        p.write_bytes(p.read_bytes()[: p.stat().st_size * 6 // 10])
        return p, ("fails", "corrupt or unreadable audio")

    return build


def _clip(name: str, rate: int, seconds: float, channels: int, silent: bool = False):
    def build(d: Path):
        import soundfile as sf
        from dataprep_helpers import decode_audio_truth

        wave = _tone(rate, seconds, channels) * (0 if silent else 1)
        sf.write(d / name, wave, rate)
        truth, n = decode_audio_truth(d / name)
        return d / name, ("converts", truth, n)

    return build


AUDIO = {
    "text file named .wav": _audio_fails("2_text.wav", b"this is not audio\n"),
    "0-byte WAV": _audio_fails("2_empty.wav", b""),
    "FLAC that ends early": _cut("FLAC"),
    "OGG that ends early": _cut("OGG"),
    "48 kHz stereo": _clip("2_stereo.wav", 48000, 0.7, 2),
    "3-second clip": _clip("2_long.wav", 16000, 3.0, 1),
    "silence": _clip("2_silence.wav", 16000, 0.5, 1, silent=True),
}


def good_kaggle(root: Path) -> None:
    (root / "train").mkdir(parents=True)
    with open(root / "trainLabels.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "label"])
        for i in range(1, 5):
            Image.fromarray(np.roll(PIXELS, i, axis=1)).save(root / "train" / f"{i}.png")
            w.writerow([i, ["cat", "dog"][i % 2]])


def _labels(edit):
    def build(root: Path):
        lines = (root / "trainLabels.csv").read_text().splitlines()
        return edit(root, lines)

    return build


def _write(root: Path, lines: list[str], *result):
    (root / "trainLabels.csv").write_text("\n".join(lines) + "\n")
    return result


# name -> (the file named, words of the message, skippable)
KAGGLE = {
    "label file: a missing row": _labels(lambda r, ls: _write(r, ls[:3] + ls[4:], "train/3.png", "no entry", True)),
    "label file: a row without a label": _labels(
        lambda r, ls: _write(r, ls[:3] + ["3,"] + ls[4:], "trainLabels.csv", "line 4 needs", False)
    ),
    "label file: an id without an image": _labels(
        lambda r, ls: _write(r, ls + ["5,cat"], "train/5.png", "listed in trainLabels.csv, but missing", True)
    ),
    "label file: an id labelled twice": _labels(
        lambda r, ls: _write(r, ls + ["2,dog"], "trainLabels.csv", "line 6 labels id 2", False)
    ),
}


def _not_utf8(root: Path):
    (root / "trainLabels.csv").write_bytes(b"id,label\n1,c\xe9t\n")
    return "trainLabels.csv", "not a readable CSV", False


KAGGLE["label file: not UTF-8"] = _not_utf8
