"""A rank that dies or freezes under torchrun stops the others within a minute, with a message naming it, never a
silent wait in a collective: `dataprep convert --vae` and `train` (gloo on the CPU, one thread per rank). A frozen
rank (SIGSTOP: its connections stay open, as a host that vanished leaves them) is found by the heartbeat of
common.ranks; a killed one by its closed connections and torchrun."""

from __future__ import annotations

import json
import os
import re
import signal
import time

import pytest
from ranks_helpers import TORCHRUN, Job, gone_within, node_command

PEER_TIMEOUT = "5"  # seconds of silence before the others give up on a rank (30 by default)


def convert_job(image_vae, out, limit: int = 20_000) -> Job:
    args = [
        "convert",
        "--source",
        "synthetic-images",
        "--limit",
        str(limit),
        "--vae",
        str(image_vae),
        "--batch-size",
        "16",
        "--format",
        "hdf5",
        "--device",
        "cpu",
        "--workers",
        "1",
        "--output",
        str(out),
    ]
    cmd = [*TORCHRUN, "--standalone", "--nproc_per_node", "2", "--max-restarts", "0", "-m", "dataprep", *args]
    return Job(cmd, GPUFEED_PEER_TIMEOUT=PEER_TIMEOUT)


@pytest.mark.slow
@pytest.mark.parametrize("how, victim", [("SIGKILL", 1), ("SIGSTOP", 0)])
def test_convert_stops_every_rank_when_one_dies_or_freezes(image_vae, tmp_path, how, victim):
    """Mid-conversion, rank `victim` is killed (the other's collective fails, torchrun ends the job) or frozen (the
    other's heartbeat finds it silent): the other rank ends within 60 s saying which rank, and no output appears."""
    out = tmp_path / "latents"
    job = convert_job(image_vae, out)
    try:
        job.wait_for(r"convert: +\d+%.*\b([1-9]\d{3,})/20000")  # a thousand samples or more encoded and written
        pid, other = job.rank_pid(victim), job.rank_pid(1 - victim)
        os.kill(pid, getattr(signal, how))
        took = gone_within(other, 60)
        assert took is not None, (
            f"rank {1 - victim} still runs 60 s after rank {victim} got {how}: {job.stderr[-3000:]}"
        )
        if how == "SIGSTOP":
            job.wait_for(rf"rank {1 - victim}: rank {victim} has not answered for \d+ s")
        else:
            job.wait_for(rf"rank\s*: {victim} \(local_rank: {victim}\)")  # torchrun's summary of the failure
    finally:
        job.kill_all()
    assert job.proc.returncode != 0 and not out.exists()
    print(f"{how} to rank {victim}: rank {1 - victim} ended {took:.1f} s later")


def train_args(data, out, steps: int, *extra: str) -> list[str]:
    opts = f"--loader hdf5 --model tiny --batch-size 8 --steps {steps} --precision fp32 --device cpu --workers 0"
    opts += " --no-pin-memory --sample-every 0 --log-every 1 --timing-warmup 1 --lr 1e-3 --warmup 0 --no-progress"
    return ["-m", "training", "--data", str(data), "--out", str(out), *opts.split(), *extra]


def losses(out) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())]


@pytest.fixture(scope="module")
def uninterrupted(images64, tmp_path_factory) -> dict[int, float]:
    """Every step's loss of a 2-rank run that nothing stopped."""
    out = tmp_path_factory.mktemp("whole") / "run"
    job = Job([*TORCHRUN, "--standalone", "--nproc_per_node", "2", *train_args(images64, out, STEPS)])
    assert job.proc.wait(timeout=300) == 0, job.stderr[-3000:]
    return dict(losses(out))


STEPS = 40  # long enough that a signal sent at step 5 finds the run still going


def resumed_matches(uninterrupted: dict[int, float], out, cmd: list[str]) -> None:
    """Resume with `cmd` (both nodes' commands, or one): every logged loss, the lost steps and their reruns alike,
    equals the uninterrupted run's loss of that step, and every step is there."""
    jobs = [Job(c) for c in cmd]
    for job in jobs:
        assert job.proc.wait(timeout=300) == 0, job.stderr[-3000:]
    logged = losses(out)
    assert {s for s, _ in logged} == set(uninterrupted)
    assert [(s, v) for s, v in logged if v != uninterrupted[s]] == []


@pytest.mark.slow
def test_train_rank_killed_stops_the_other_then_resume_matches(images64, uninterrupted, tmp_path):
    """SIGKILL to rank 1 at step 5 or later: rank 0 ends within 60 s, torchrun names rank 1 as the failure, and
    `--resume` continues from the last checkpoint with the losses of the uninterrupted run."""
    out = tmp_path / "run"
    two = [*TORCHRUN, "--standalone", "--nproc_per_node", "2", "--max-restarts", "0"]
    job = Job([*two, *train_args(images64, out, STEPS, "--ckpt-every", "2")])
    try:
        victim, survivor = job.rank_pid(1), job.rank_pid(0)
        job.wait_for(r"step ([5-9]|1\d): checkpoint written")
        os.kill(victim, signal.SIGKILL)
        took = gone_within(survivor, 60)
        assert took is not None, f"rank 0 still runs 60 s after rank 1 was killed: {job.stderr[-3000:]}"
        assert job.proc.wait(timeout=60) != 0
        job.wait_for(r"rank\s*: 1 \(local_rank: 1\)")
    finally:
        job.kill_all()
    resumed_matches(uninterrupted, out, [[*two, *train_args(images64, out, STEPS, "--ckpt-every", "2", "--resume")]])


@pytest.mark.slow
def test_sigterm_to_torchrun_writes_one_checkpoint(images64, uninterrupted, tmp_path):
    """SIGTERM to torchrun mid-run: it passes the signal on, the ranks agree on a step, rank 0 writes one checkpoint
    (no other: --ckpt-every is past the end) and says so, and `--resume` ends with the uninterrupted run's losses."""
    out = tmp_path / "run"
    two = [*TORCHRUN, "--standalone", "--nproc_per_node", "2"]
    job = Job([*two, *train_args(images64, out, STEPS, "--ckpt-every", "1000")])
    deadline = time.monotonic() + 180
    while not ((out / "metrics.jsonl").exists() and len(losses(out)) >= 3) and time.monotonic() < deadline:
        time.sleep(0.05)
    job.proc.send_signal(signal.SIGTERM)
    assert job.proc.wait(timeout=120) != 0
    written = re.findall(r"step (\d+): checkpoint written", job.stderr)
    assert len(written) == 1 and 3 <= int(written[0]) < STEPS, job.stderr[-3000:]
    assert "continue with --resume" in job.stderr
    resumed_matches(uninterrupted, out, [[*two, *train_args(images64, out, STEPS, "--ckpt-every", "1000", "--resume")]])


def node(port: int, rank: int, data, out, *extra: str) -> list[str]:
    return [*node_command(port, rank), *train_args(data, out, STEPS, "--ckpt-every", "2", *extra)]


@pytest.mark.slow
def test_two_nodes_one_vanishes_the_other_stops_then_both_resume(images64, uninterrupted, tmp_path):
    """The README's two-host command as two torchrun launchers on one machine (c10d rendezvous): once they train, node
    1 vanishes (every process of it frozen, its connections left open, as a host that lost power leaves them). Node
    0's rank says that rank 1 stopped answering and ends within 60 s; both nodes then `--resume` and end with the
    uninterrupted run's losses."""
    from ranks_helpers import free_port, wait_listening

    port, out = free_port(), tmp_path / "run"
    first = Job(node(port, 0, images64, out), GPUFEED_PEER_TIMEOUT=PEER_TIMEOUT)
    wait_listening(port)  # node 0 holds the rendezvous endpoint's store, as the README's HOST0 does
    second = Job(node(port, 1, images64, out), GPUFEED_PEER_TIMEOUT=PEER_TIMEOUT)
    try:
        survivor = first.rank_pid(0)
        first.wait_for(r"step [4-9]: checkpoint written")
        second.signal_all(signal.SIGSTOP)
        took = gone_within(survivor, 60)
        assert took is not None, f"node 0's rank still runs 60 s after node 1 vanished: {first.stderr[-3000:]}"
        first.wait_for(r"rank 0: rank 1 has not answered for \d+ s")
        assert first.proc.wait(timeout=120) != 0
    finally:
        second.kill_all()
        first.kill_all()
    port = free_port()
    resumed_matches(uninterrupted, out, [node(port, r, images64, out, "--resume") for r in (0, 1)])
