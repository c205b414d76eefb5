"""`python -m bench.objectstore serve` and SeaweedServer on a port that is not free: a real socket holding it, or
another real SeaweedFS server (conftest's `seaweed`) listening there. The command must refuse in one line naming the
port, never report success for, or create buckets on, the server that was already there."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bench.objectstore.seaweed import SeaweedServer, ServerError

REPO = Path(__file__).resolve().parents[2]


def serve(directory: Path, port: int, bucket: str) -> tuple[int, str]:
    """Run serve; its exit status and stderr, or (None, stderr) when it was still running after 60 s (stopped then)."""
    command = [sys.executable, "-m", "bench.objectstore", "serve", str(directory), "--port", str(port)]
    p = subprocess.Popen([*command, "--bucket", bucket], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _, err = p.communicate(timeout=60)
        return p.returncode, err.decode()
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGTERM)  # serve stops its server on SIGTERM, as on Ctrl-C
        _, err = p.communicate(timeout=30)
        return None, err.decode()


def test_serve_refuses_a_port_a_socket_holds(tmp_path):
    """A port some program listens on: serve exits non-zero at once with one line naming the port and the fix."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        code, err = serve(tmp_path / "s3", port, "gpufeed")
    assert code == 1 and "Traceback" not in err, err
    assert err.strip() == (
        f"python -m bench.objectstore serve: 127.0.0.1:{port} is taken (another program listens there); give "
        "another --port, or leave it out for a free one"
    )


@pytest.mark.slow  # a second server: 13 s with the next; a port held by a socket is checked in make test
def test_serve_refuses_the_port_of_another_server(seaweed, tmp_path):
    """The port of a running SeaweedFS server: serve refuses (instead of reporting success while its own weed has no
    listener), and creates no bucket on the server that answers there."""
    code, err = serve(tmp_path / "s3", seaweed.server.port, "made-by-serve")
    assert code == 1 and f"127.0.0.1:{seaweed.server.port} is taken" in err and "Traceback" not in err, err
    names = [b["Name"] for b in seaweed.client().list_buckets()["Buckets"]]
    assert "made-by-serve" not in names


class PortCheckSkipped(SeaweedServer):
    """A server whose port check has passed, and then another server took the port (the race the check leaves)."""

    def _check_ports(self) -> None:
        pass


@pytest.mark.slow
def test_a_server_answering_for_another_is_refused(seaweed, tmp_path):
    """Readiness is asked of the weed this started, not of whatever answers on its S3 port: a start whose port is
    answered by another server fails naming the port, and its own weed is stopped."""
    server = PortCheckSkipped(tmp_path / "s3", port=seaweed.server.port)
    try:
        with pytest.raises(ServerError, match=rf"127.0.0.1:{seaweed.server.port} is answered by another server"):
            server.start(wait=60)
        assert server.process is None  # stopped
    finally:
        server.stop()


def test_a_stopped_server_leaves_nothing_in_tmp(tmp_path):
    """weed makes a unix socket in /tmp for several listeners and writes its logs there unless told: while the server
    runs its sockets are there, after stop() none of them is, and its logs are in its own directory."""
    before = set(Path("/tmp").glob("weed.*"))
    server = SeaweedServer(tmp_path / "weed").start()
    try:
        running = server.sockets()
        assert len(running) >= 3, running  # filer, S3 and gRPC listeners at least
    finally:
        server.stop()
    assert server.sockets() == [] and not any(p.exists() for p in running)
    assert set(Path("/tmp").glob("weed.*")) == before and list((tmp_path / "weed").glob("weed.*INFO*"))
