#!/usr/bin/env bash
# `pytest -m gpu` on a host of 2 H200s (32 cores), in calls of at most 9 minutes. ffcv, DALI, soundfile and soxr were
# staged as ../shared/device/README.md says; the text stack (bench/studies/text_carry.sh) and LitData with boto3
# (bench/studies/stream_carry.sh) unpacked beside them; the CIFAR-10 and spoken-digit tarballs in ../shared/datasets.
# Each test had 150 s (120 s in the second call), through pytest-timeout; the second call left out every test the
# first had run (--deselect each) and took the loaders, then integration and training, first. Logs: call1.txt.xz and
# call2.txt.xz (pytest -rA: each test's outcome at the end).
set -u
export PYTHONPATH=$PWD:/tmp/site:/tmp/textsite:/tmp/streamsite PYTHONUNBUFFERED=1
timeout -s INT 545 python3 -m pytest -m gpu -p no:cacheprovider -q -rA --timeout 150 > call1.txt 2>&1
des=(); for id in $(grep -E "^(PASSED|FAILED|ERROR) tests/" call1.txt | awk '{print $2}' | sort -u); do
  des+=(--deselect "$id")
done
timeout -s INT 515 python3 -m pytest -m gpu -p no:cacheprovider -q -rA --timeout 120 "${des[@]}" \
  tests/loaders/test_loaders_conformance.py tests/loaders/test_loaders_conformance_text.py tests/integration \
  tests/training > call2.txt 2>&1
