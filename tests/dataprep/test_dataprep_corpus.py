"""The bad-input corpus: every kind of damaged or unusual input file, generated here, through `dataprep convert`.

Each case either converts with its values checked, or fails with exit code 1 naming the file, and then converts
with `--on-bad-file skip`, listing the file in the manifest. The last test prints the tally (`pytest -rA` shows it)."""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from corpus_cases import AUDIO, IMAGES, KAGGLE, good_audio, good_images, good_kaggle
from dataprep_helpers import read_all, stored_order

from dataprep.cli import cli

OUTCOMES: dict[str, str] = {}


def _convert(inp: Path, out: Path, *extra: str, as_unprivileged: bool = False):
    """(exit code, output). Unprivileged: a process without the capability to read any file, so that permissions
    bind even when the tests run as root (CI); the capability is dropped from its bounding set before exec."""
    args = ["convert", "--quiet", "--workers", "1", "--format", "hdf5", "--input", str(inp), "--output", str(out)]
    if not as_unprivileged:
        r = CliRunner().invoke(cli, [*args, *extra])
        return r.exit_code, r.output
    drop = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"] if os.geteuid() == 0 else []
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    done = subprocess.run([*drop, sys.executable, "-m", "dataprep", *args, *extra], capture_output=True, env=env)
    return done.returncode, (done.stdout + done.stderr).decode("utf-8", "backslashreplace")


def _shown(path: Path) -> str:
    """How a file name appears in a message: bytes that are not UTF-8 escaped as \\xNN."""
    return os.fsencode(path.name).decode("utf-8", "backslashreplace")


def _check_fails(case: str, inp: Path, bad: Path, out: Path, good: int, problem: str, **kw) -> None:
    code, output = _convert(inp, out, **kw)
    assert code == 1 and _shown(bad) in output and problem in output, f"{case}: {output}"
    assert not out.exists(), f"{case}: output left behind"
    code, output = _convert(inp, out, "--on-bad-file", "skip", **kw)
    assert code == 0, f"{case} (skip): {output}"
    manifest = json.loads((out / "manifest.json").read_text())
    listed = [os.fsencode(s["path"]).endswith(os.fsencode(bad.name)) for s in manifest["skipped"]]
    assert manifest["count"] == good and any(listed), f"{case}: {manifest['skipped']}"
    OUTCOMES[case] = "failed naming the file; skipped and listed"


def _check_converts(case: str, inp: Path, out: Path, index: int, expected: np.ndarray, length=None) -> None:
    code, output = _convert(inp, out)
    assert code == 0, f"{case}: {output}"
    x, _, lengths = read_all(out, "hdf5")
    assert np.array_equal(x[index], expected), f"{case}: values differ"
    if length is not None:
        assert lengths[index] == length, f"{case}: length {lengths[index]}, expected {length}"
    OUTCOMES[case] = "converted, values checked"


@pytest.mark.parametrize("case", sorted(IMAGES))
def test_image_case(tmp_path, case):
    inp = tmp_path / "in"
    good_images(inp)
    bad, expect = IMAGES[case](inp)
    if expect[0] == "fails":
        _check_fails(case, inp, bad, tmp_path / "o", 2, expect[1], as_unprivileged=case == "unreadable")
    else:
        _check_converts(case, inp, tmp_path / "o", stored_order(list(inp.iterdir())).index(bad), expect[1])


@pytest.mark.parametrize("case", sorted(AUDIO))
def test_audio_case(tmp_path, case):
    inp = tmp_path / "in"
    good_audio(inp)
    bad, expect = AUDIO[case](inp)
    if expect[0] == "fails":
        _check_fails(case, inp, bad, tmp_path / "o", 2, expect[1])
    else:
        _check_converts(case, inp, tmp_path / "o", stored_order(list(inp.iterdir())).index(bad), *expect[1:])


@pytest.mark.parametrize("case", sorted(KAGGLE))
def test_label_file_case(tmp_path, case):
    inp = tmp_path / "k"
    good_kaggle(inp)
    named, problem, skippable = KAGGLE[case](inp)
    if skippable:
        good = 3 if case == "label file: a missing row" else 4  # that image has no label; the others convert
        _check_fails(case, inp, inp / named, tmp_path / "o", good, problem)
        return
    code, output = _convert(inp, tmp_path / "o")
    assert code == 1 and named in output and problem in output and not (tmp_path / "o").exists(), output
    OUTCOMES[case] = "failed naming the file and line (the label file is not skippable)"


def test_wav_with_a_lying_header_keeps_only_the_samples_it_has(tmp_path):
    """A WAV whose data chunk claims ten times the samples it holds: the samples present, and their true length."""
    import soundfile as sf
    from dataprep_helpers import decode_audio_truth

    good_audio(tmp_path / "in")
    wave = (0.3 * np.sin(np.arange(8000) * 0.05)).astype(np.float32)
    buf = io.BytesIO()
    sf.write(buf, wave, 16000, format="WAV", subtype="FLOAT")
    blob = bytearray(buf.getvalue())
    at = blob.find(b"data")
    blob[at + 4 : at + 8] = struct.pack("<I", 10 * 4 * len(wave))
    lying = tmp_path / "in" / "2_lying.wav"
    lying.write_bytes(bytes(blob))
    (tmp_path / "truth.wav").write_bytes(buf.getvalue())
    truth, n = decode_audio_truth(tmp_path / "truth.wav")
    index = stored_order(list(lying.parent.iterdir())).index(lying)
    _check_converts("WAV with a lying header", tmp_path / "in", tmp_path / "o", index, truth, n)
    assert n == 8000


def test_corpus_summary():
    """Tally of the cases above (run after them, in this file's order): every case ran and had an outcome."""
    if len(OUTCOMES) < len(IMAGES) + len(AUDIO) + len(KAGGLE) + 1:
        pytest.skip("run the whole file for the tally")
    cases = {*IMAGES, *AUDIO, *KAGGLE, "WAV with a lying header"}
    assert set(OUTCOMES) == cases, f"cases without an outcome: {sorted(cases - set(OUTCOMES))}"
    tally: dict[str, int] = {}
    for outcome in OUTCOMES.values():
        tally[outcome] = tally.get(outcome, 0) + 1
    print(f"bad-input corpus: {len(OUTCOMES)} cases: " + "; ".join(f"{n} {o}" for o, n in sorted(tally.items())))
    for case, outcome in sorted(OUTCOMES.items()):
        print(f"  {case}: {outcome}")
