"""Nothing hangs: an error from any thread or process of a conversion ends it promptly, a dying worker is an error,
and the first SIGINT or SIGTERM ends `dataprep convert`, `dataprep verify` and `bench loaders` within 5 s (exit 130
or 143), also while the command waits on workers that do not answer. Real processes, real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import psutil
import pytest
from PIL import Image

REPO = Path(__file__).resolve().parents[2]
PROMPT_S = 5.0


def _images(folder: Path, n: int) -> Path:
    """n random 32x32 PNGs in folder/cat (written fast: no compression)."""
    (folder / "cat").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(n):
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), np.uint8)).save(
            folder / "cat" / f"{i:05d}.png", compress_level=0
        )
    return folder


@pytest.fixture(scope="module")
def many_images(tmp_path_factory) -> Path:
    return _images(tmp_path_factory.mktemp("many"), 3000)


def _start(tool: str, *args: str) -> tuple[subprocess.Popen, str]:
    """`python -m TOOL ARGS` as a user runs it; the marker in its environment finds every process it starts."""
    mark = uuid.uuid4().hex
    env = dict(os.environ, PYTHONPATH=str(REPO), GPUFEED_TEST_MARK=mark)
    proc = subprocess.Popen(
        [sys.executable, "-m", tool, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    return proc, mark


def _marked(mark: str, but: int | None = None) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter():
        try:
            if p.pid != but and p.environ().get("GPUFEED_TEST_MARK") == mark:
                found.append(p)
        except (psutil.Error, OSError):
            pass
    return found


def _workers(proc: subprocess.Popen, mark: str, n: int, timeout: float = 90) -> list[psutil.Process]:
    """The conversion's n decoding processes (children of its fork server), once they all run."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        server = [p for p in _marked(mark, but=proc.pid) if "forkserver" in " ".join(p.cmdline())]
        kids = server[0].children() if server else []
        if len(kids) >= n:
            return kids
        assert proc.poll() is None, proc.stderr.read().decode()
        time.sleep(0.05)
    raise AssertionError("the decoding processes never started")


def _none_left(mark: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while _marked(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _marked(mark), [p.cmdline() for p in _marked(mark)]


def _ended_within(proc: subprocess.Popen, seconds: float) -> tuple[int, str, float]:
    t0 = time.monotonic()
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err.decode(), time.monotonic() - t0


@pytest.mark.slow  # ~8 s on 2 cores: make test-slow keeps CI under 12 minutes
def test_an_encoder_error_ends_the_command(many_images, audio_vae, tmp_path):
    """RGB images into a 1-channel autoencoder, decoded by 2 workers: the error is printed and the command exits 1
    within 5 s of it, with nothing left (it printed the error and then waited for ever on its abandoned workers)."""
    out = tmp_path / "o"
    proc, mark = _start(
        "dataprep",
        "convert",
        "--input",
        str(many_images),
        "--output",
        str(out),
        "--vae",
        str(audio_vae),
        "--device",
        "cpu",
        "--workers",
        "2",
        "--quiet",
    )
    first = ""
    while "Error" not in first and proc.poll() is None:
        first = proc.stderr.readline().decode()
    t0 = time.monotonic()
    code, rest, _ = _ended_within(proc, 60)
    took = time.monotonic() - t0
    assert "takes 1-channel input" in first and code == 1, first + rest
    assert took < PROMPT_S, f"exited {took:.1f} s after its error"
    assert list(tmp_path.iterdir()) == []
    _none_left(mark)


def test_a_dead_worker_is_an_error(many_images, tmp_path):
    """A decoding process SIGKILLed mid-conversion (as the out-of-memory killer would): exit 1 naming the death and
    the signal, no temporary output left, nothing left running. (With multiprocessing.Pool the lost result was
    waited for, for ever.)"""
    proc, mark = _start(
        "dataprep",
        "convert",
        "--input",
        str(many_images),
        "--output",
        str(tmp_path / "o"),
        "--format",
        "hdf5",
        "--workers",
        "2",
        "--quiet",
    )
    _workers(proc, mark, 2)[0].kill()
    code, err, took = _ended_within(proc, 60)
    assert code == 1 and "a worker process died" in err and "SIGKILL" in err, err
    assert "Traceback" not in err and took < 20
    assert list(tmp_path.iterdir()) == []
    _none_left(mark)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_signal_ends_convert_while_its_workers_hang(many_images, tmp_path, sig):
    """Both decoding processes SIGSTOPped (a hang: the conversion waits on them), then the signal: exit 128 + N
    within 5 s, the temporary output removed, no process left (stopped ones included)."""
    proc, mark = _start(
        "dataprep", "convert", "--input", str(many_images), "--output", str(tmp_path / "o"), "--workers", "2", "--quiet"
    )
    for worker in _workers(proc, mark, 2):
        worker.suspend()
    time.sleep(1.0)
    proc.send_signal(sig)
    code, err, took = _ended_within(proc, 60)
    assert code == 128 + sig and f"stopped by {sig.name}" in err, err
    assert took < PROMPT_S, f"{took:.1f} s"
    assert "Traceback" not in err
    _none_left(mark)
    assert list(tmp_path.iterdir()) == []


def test_a_stop_signal_ends_verify(many_images, tmp_path):
    """SIGTERM while `dataprep verify` re-reads 3,000 PNGs: exit 143 within 5 s."""
    from dataprep.convert import ConvertConfig, convert

    data = tmp_path / "d"
    convert(ConvertConfig(output=data, input=many_images, formats=("files",), workers=2, progress=False))
    proc, _ = _start("dataprep", "verify", str(data))
    reading = psutil.Process(proc.pid)
    while not any(f.path.startswith(str(data / "files")) for f in reading.open_files()):  # past start-up
        assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGTERM)
    code, err, took = _ended_within(proc, 60)
    assert code == 143 and took < PROMPT_S, (code, took, err)


def test_a_stop_signal_ends_bench_loaders(synthetic_images, tmp_path):
    """SIGTERM to `bench loaders` while a configuration runs in its own process group: exit 143 within 5 s, the
    configuration's processes gone, the finished results kept."""
    data = synthetic_images(1024, ("files", "hdf5"))
    out = tmp_path / "results"
    proc, mark = _start(
        "bench",
        "loaders",
        "--data",
        str(data),
        "--backends",
        "hdf5",
        "--workers",
        "0",
        "--pin-memory",
        "off",
        "--batch-size",
        "32",
        "--model",
        "tiny",
        "--steps",
        "100000",
        "--device",
        "cpu",
        "--out",
        str(out),
        "--no-progress",
    )
    deadline = time.monotonic() + 120
    while not any("bench.grid.run_one" in " ".join(p.cmdline()) for p in _marked(mark, but=proc.pid)):
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    time.sleep(2.0)
    proc.send_signal(signal.SIGTERM)
    code, err, took = _ended_within(proc, 60)
    assert code == 143 and took < PROMPT_S, (code, took, err[-2000:])
    assert "rerun with --resume" in err
    _none_left(mark)
