"""Running torchrun jobs in tests and acting on one of their ranks: find a rank's process, wait for a line of output,
wait for processes to end. Gloo on the CPU, one thread per process."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def node_command(port: int, rank: int) -> list[str]:
    """torchrun as node `rank` of two on this machine, meeting the other at 127.0.0.1:`port` through the c10d
    rendezvous: the README's two-host command, each launcher with one rank."""
    rendezvous = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "gpufeed-test"]
    nodes = ["--nnodes", "2", "--nproc_per_node", "1", "--max-restarts", "0", "--node-rank", str(rank)]
    return [*TORCHRUN, *nodes, *rendezvous]


def env(**extra: str) -> dict[str, str]:
    # faulthandler: a rank that aborts prints every thread's Python stack, not just "Signal 6"; the repository first
    # on the path, then what was there (packages installed with `pip install --target` on a machine without a venv)
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return os.environ | {"OMP_NUM_THREADS": "1", "PYTHONPATH": path, "PYTHONFAULTHANDLER": "1"} | extra


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Job:
    """A command started in its own process group, its stderr collected by a thread as it comes."""

    def __init__(self, cmd: list[str], **env_extra: str) -> None:
        self.proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            env=env(**env_extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.err: list[str] = []
        self.out: list[str] = []
        for stream, into in ((self.proc.stderr, self.err), (self.proc.stdout, self.out)):
            threading.Thread(target=self._read, args=(stream, into), daemon=True).start()

    @staticmethod
    def _read(stream, into: list[str]) -> None:
        for line in iter(stream.readline, ""):
            into.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self.err)

    def wait_for(self, pattern: str, timeout: float = 180) -> re.Match:
        """The first match of `pattern` in stderr, waiting for it; an AssertionError if the job ends without it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(pattern, self.stderr)
            if m:
                return m
            if self.proc.poll() is not None:
                time.sleep(0.5)  # the reader threads' last lines
                if m := re.search(pattern, self.stderr):
                    return m
                break
            time.sleep(0.05)
        raise AssertionError(f"{pattern!r} not seen (exit {self.proc.poll()}): {self.stderr[-3000:]}")

    def rank_pid(self, rank: int) -> int:
        """The process of `rank` among this job's descendants (torchrun sets RANK in each worker's environment)."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for p in psutil.Process(self.proc.pid).children(recursive=True):
                try:
                    if p.environ().get("RANK") == str(rank) and p.environ().get("TORCHELASTIC_RUN_ID") is not None:
                        return p.pid
                except psutil.Error:
                    continue
            time.sleep(0.1)
        raise AssertionError(f"no process of rank {rank} under {self.proc.pid}")

    def signal_all(self, sig: int) -> None:
        """`sig` to the job and every process under it: torchrun starts each worker in a session of its own, so a
        signal to the job's process group does not reach them."""
        try:
            tree = [psutil.Process(self.proc.pid), *psutil.Process(self.proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        for p in tree:
            try:
                p.send_signal(sig)
            except psutil.NoSuchProcess:
                pass

    def kill_all(self) -> None:
        """SIGKILL the job and every process under it, then reap it."""
        self.signal_all(signal.SIGKILL)
        self.proc.wait(timeout=60)


def gone_within(pid: int, seconds: float) -> float | None:
    """Seconds until `pid` ended (a zombie counts as ended), or None if it still runs after `seconds`."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return time.monotonic() - t0
        except psutil.NoSuchProcess:
            return time.monotonic() - t0
        time.sleep(0.1)
    return None


def wait_listening(port: int, timeout: float = 60) -> None:
    """Until something accepts connections on 127.0.0.1:`port` (a rendezvous endpoint's store is up)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on port {port} after {timeout} s")
