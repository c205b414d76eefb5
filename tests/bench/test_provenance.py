"""Every raw result under bench/results says where it came from (host, versions, command, commit, date), itself or
through a provenance sidecar that names what was never recorded; a fresh record says all of it."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from bench.records.provenance import SIDECAR, check, results
from common.run_record import run_record

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


def test_every_committed_result_says_where_it_came_from():
    """Each JSON under bench/results, plain or archived, has every provenance field or a sidecar naming it unknown."""
    seen, lacking = 0, {}
    for path, obj in results(RESULTS):
        seen += 1
        if gaps := check(obj, path, RESULTS):
            lacking[path] = gaps
    assert seen > 500 and not lacking, f"{len(lacking)} results lack provenance: {dict(list(lacking.items())[:8])}"


def test_a_fresh_record_is_complete(tmp_path):
    """run_record names the host's memory and cores, torch, CUDA and NCCL versions, command, commit and date."""
    record = {"run": run_record("cpu"), "figure": 1.0}
    assert check(record, "r.json", tmp_path) == []
    assert record["run"]["hardware"]["memory_gib"] > 0 and "nccl" in record["run"]["versions"]
    if not os.environ.get("GPUFEED_COMMIT"):  # in a checkout: its HEAD, not "unknown"
        assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", record["run"]["commit"]), record["run"]["commit"]
    record["run"]["commit"] = "unknown"
    assert check(record, "r.json", tmp_path) == ["commit"]


def test_a_missing_field_fails_and_a_sidecar_must_name_it(tmp_path):
    """A result lacking the GPU's UUID fails until a sidecar in its folder or above lists it as unrecorded."""
    record = {"run": run_record("cpu")}
    record["run"]["hardware"] |= {"gpu": "H100", "cuda": "13.0"}
    record["run"]["versions"]["nccl"] = "2.27.3"
    (tmp_path / "f1").mkdir()
    assert check(record, "f1/a.json", tmp_path) == ["gpu_uuid"]
    side = {"entries": [{"files": ["f1/*"], "record": {}, "unrecorded": ["gpu_uuid"]}]}
    (tmp_path / SIDECAR).write_text(json.dumps(side))
    assert check(record, "f1/a.json", tmp_path) == []


def test_a_dirty_commit_needs_its_diff(tmp_path):
    """A result from an uncommitted tree (`+dirty`) fails unless it keeps the diff that ran."""
    record = run_record("cpu") | {"commit": "abc123+dirty"}
    record.pop("diff", None)
    assert check(record, "r.json", tmp_path) == ["diff"]
    assert check(record | {"diff": "--- a\n+++ b\n"}, "r.json", tmp_path) == []
