"""The object store the stream tests share (conftest's `seaweed` fixture): a SeaweedFS server and fresh buckets."""

from __future__ import annotations

import itertools
from pathlib import Path

from bench.objectstore.seaweed import SeaweedServer

_names = itertools.count()


class TestStore:
    __test__ = False  # not a test class, whatever its name

    def __init__(self, directory: Path) -> None:
        self.server = SeaweedServer(directory)

    def __enter__(self) -> TestStore:
        self.server.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.stop(kill=True)

    def client(self, attempts: int | None = None):
        """A boto3 S3 client of the server; `attempts`: at most that many tries a request (boto3's default: 5)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.server.endpoint,
            region_name=self.server.region,
            aws_access_key_id=self.server.access_key,
            aws_secret_access_key=self.server.secret_key,
            config=Config(retries={"max_attempts": attempts}) if attempts else None,
        )

    def bucket(self) -> str:
        name = f"test-{next(_names):04d}"
        self.client().create_bucket(Bucket=name)
        return name

    def restart(self) -> None:
        """Bring a killed (or stopped) server back on the same ports and data."""
        if self.server.process is None or self.server.process.poll() is not None:
            self.server.process = None
            self.server.start()


def convert_synthetic(output: str, limit: int, formats: str) -> str:
    """`dataprep convert` of `limit` synthetic images to `output` (a folder or s3://BUCKET/PREFIX); returns it."""
    from click.testing import CliRunner

    from dataprep.cli import cli

    args = ["--source", "synthetic-images", "--limit", str(limit), "--format", formats, "--output", output]
    r = CliRunner().invoke(cli, ["convert", *args, "--quiet", "--workers", "1"])
    assert r.exit_code == 0, r.output
    return output
