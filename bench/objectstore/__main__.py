"""`python -m bench.objectstore serve DIR [--port N]`: a SeaweedFS S3 server on 127.0.0.1 for trying the stream
format and for benchmarks, its data kept in DIR; prints the variables that reach it and runs until Ctrl-C."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from .seaweed import SeaweedServer, ServerError

BUCKET = "gpufeed"  # the bucket `serve` creates unless told another: the one README.md's commands use


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.objectstore", description=__doc__)
    p.add_argument("command", choices=["serve"])
    p.add_argument("directory", type=Path)
    p.add_argument("--port", type=int, default=None, help="S3 port [default: a free one]")
    p.add_argument("--bucket", default=BUCKET, help=f"a bucket to create at start [default: {BUCKET}]")
    a = p.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a SIGTERM stops the server too, as Ctrl-C does
    server = SeaweedServer(a.directory) if a.port is None else SeaweedServer(a.directory, port=a.port)
    try:
        server.start()
    except ServerError as e:
        sys.exit(f"python -m bench.objectstore serve: {e}")
    with server:
        env = server.env()
        s3 = server.client()
        if a.bucket not in [b["Name"] for b in s3.list_buckets().get("Buckets", [])]:
            s3.create_bucket(Bucket=a.bucket)
        print("\n".join(f"export {k}={v}" for k, v in env.items()), flush=True)
        print(f"# bucket s3://{a.bucket} is ready; Ctrl-C stops the server (its data stays in {a.directory})")
        try:
            while server.process.poll() is None:
                time.sleep(1)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
