"""Under DDP a rank waiting for another rank's input is starved too: the figures say which rank made the others wait
and how much of the lost rate that explains (training.metrics.waited_on, bench.records.verdicts.explained)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from ranks_helpers import TORCHRUN, Job

from bench.grid.ranks import merge_figures
from bench.records.rows import flat
from bench.records.verdicts import explained
from training.metrics import group_headline, merged, waited_on
from training.summary import lines


def test_the_group_loses_each_steps_longest_wait():
    """Three ranks, four steps: each step costs the group its longest wait, charged to the rank that waited; rank 2
    waited longest on two steps (0.3 s of the 0.45 s lost)."""
    idle = [[0.1, 0.0, 0.0, 0.0], [0.05, 0.15, 0.0, 0.0], [0.0, 0.1, 0.2, 0.1]]
    got = waited_on(idle, span_s=1.0)
    assert got["starvation_any"] == pytest.approx(0.55)
    assert got["waited_on_rank"] == 2 and got["waited_on_share"] == pytest.approx(0.3 / 0.55)
    assert waited_on([[0.0, 0.0], [0.0, 0.0]], 1.0) == {
        "starvation_any": 0.0,
        "waited_on_rank": None,
        "waited_on_share": None,
    }


@pytest.mark.parametrize(
    "any_rank, ratio, share",
    [(0.2, 0.8, 1.0), (0.1, 0.8, 0.5), (0.1, 0.995, None), (None, 0.8, None), (0.2, None, None)],
)
def test_the_share_of_the_lost_rate_that_waiting_explains(any_rank, ratio, share):
    got = explained({"starvation_any": any_rank, "vs_data_free": ratio})
    assert got == (None if share is None else pytest.approx(share))


def rank_figures(rank: int, own: float, group: dict) -> dict:
    """One rank's figures as the training loop's MetricsLog.final gives them under 2 ranks (own starvation 0.005 on
    rank 0, 0.4 on rank 1); `group` the waited_on figures every rank holds alike."""
    ranks = [{"rank": 0, "starvation": 0.005}, {"rank": 1, "starvation": 0.4}]
    waits = {"wait_median_ms": 1.0 + 400 * own, "wait_p95_ms": 2.0 + 400 * own, "wait_max_ms": 3.0 + 400 * own}
    s = {"steps": 20, "wall_s": 10.0, "starvation": own, "source": "host-wait", "host_behind": None, **waits}
    s = group_headline(s | merged(ranks, "starvation") | group)
    return {"samples_per_s": 10.0, "starvation": s, "ranks": ranks}


GROUP = {"starvation_any": 0.41, "waited_on_rank": 1, "waited_on_share": 0.99}


def test_the_summary_line_leads_with_the_time_the_group_lost():
    """Under 2 ranks the summary line's starvation is the group's, then the rank the others waited for and each rank's
    own figures, also from an older record (rank 0's own as its starvation); one process's line is unchanged."""
    rec = {"config": {"world_size": 2, "device": "cpu", "model": "tiny"}, "steps": 24, "wall_s": 20.0}
    rec |= {"samples_per_s": 20.0, "final_loss": 1.0, "backend": "hdf5", "loader": {}, "files": {}}
    said = "starvation 41.0% (the share of time every rank waited for some rank's data; rank 1 made the others wait, "
    said += "99% of that time; each rank's own: rank 0 0.5%, mean over 2 ranks 20.2%, worst rank 1 40.0%)"
    now = rank_figures(0, 0.005, GROUP)["starvation"]
    before = {k: v for k, v in now.items() if k != "starvation_own"} | {"starvation": 0.005}
    for s in (now, before):
        assert said in lines(rec | {"starvation": s})[0]
    one = rec | {"config": rec["config"] | {"world_size": 1}, "starvation": {"starvation": 0.03}}
    assert ", starvation 3.0% (the share of time training waited for data), loss" in lines(one)[0]


def test_a_bench_record_under_ranks_quotes_the_time_the_group_lost():
    """bench's record of 2 ranks holds the group's starvation, the mean and worst of the ranks' own figures beside it
    and each rank's own under `ranks`; its row reads an older record (the mean as its starvation) alike."""
    figs = [rank_figures(r, own, GROUP) for r, own in ((0, 0.005), (1, 0.4))]
    got = merge_figures(figs)
    s = got["starvation"]
    assert s["starvation"] == 0.41 and s["starvation_mean"] == pytest.approx(0.2025) and s["starvation_max"] == 0.4
    assert s["starvation_worst_rank"] == 1 and [r["starvation"] for r in got["ranks"]] == [0.005, 0.4]
    job = {"nproc": 2, "device": "cpu", "backend": "hdf5"}
    before = {"name": "n", "job": job, "figures": got | {"starvation": s | {"starvation": 0.2025}}}
    for rec in ({"name": "n", "job": job, "figures": got}, before):
        row = flat(rec)
        assert row["starvation"] == 0.41 and row["starvation_mean"] == pytest.approx(0.2025)


SLOW_RANK = """
import json, os, sys, time
rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
cores = sorted(os.sched_getaffinity(0))
if len(cores) >= size:  # a core of its own, as each rank has its own GPU: no rank computes faster while another sleeps
    os.sched_setaffinity(0, [cores[rank]])
from loaders import build_loader
from training.config import TrainConfig
from training.loop import main
import torch.distributed as dist

class Late:
    '''The real hdf5 loader of this rank, each batch handed over DELAY seconds late on rank 1 only.'''
    def __init__(self, inner, delay):
        self.inner, self.delay = inner, delay
    def __iter__(self):
        for batch in self.inner:
            time.sleep(self.delay)
            yield batch
    def __len__(self):
        return len(self.inner)
    def set_epoch(self, epoch):
        self.inner.set_epoch(epoch)
    def close(self):
        self.inner.close()

delay, steps, batch = float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
inner = build_loader("hdf5", sys.argv[1], batch_size=batch, workers=0, pin_memory=False, device="cpu", rank=rank,
                     world_size=size)
cfg = TrainConfig(data=sys.argv[1], out=sys.argv[2], loader="hdf5", model="tiny", batch_size=batch, steps=steps,
                  timing_warmup=4, device="cpu", precision="fp32", sample_every=0, ckpt_every=0, log_every=12,
                  progress=False)
s = main(cfg, loader=Late(inner, delay if rank == 1 else 0.0))
if rank == 0:  # what `train` does at the end of a run
    from training.summary import lines, record, write
    rec = record(s.to_dict(), cfg.out)
    write(cfg.out, rec)
    print("\\n".join(lines(rec)))
    print(json.dumps(s.to_dict()["starvation"] | {"ranks": s.ranks}))
"""


def late_run(data: Path, run: Path, delay: float, steps: int = 24, batch: int = 8) -> tuple[list[str], Job]:
    """SLOW_RANK under torchrun on 2 ranks, rank 1's batches `delay` s late: the lines it printed, and the job."""
    script = run.parent / "slow_rank.py"
    script.write_text(SLOW_RANK)
    command = [*TORCHRUN, "--standalone", "--nproc_per_node", "2", str(script), str(data), str(run), str(delay)]
    job = Job([*command, str(steps), str(batch)])
    assert job.proc.wait(timeout=300) == 0, job.stderr[-3000:]
    return "".join(job.out).strip().splitlines(), job


@pytest.mark.slow
def test_a_late_rank_is_named_and_its_wait_is_every_ranks(synthetic_images, tmp_path):
    """Rank 1's batches come 0.15 s late: rank 1 starves, rank 0 does not wait for its own input at all, yet the group
    loses the same time at every step. The figures name rank 1 and count its waits as the group's."""
    out, _ = late_run(synthetic_images(256), tmp_path / "run", 0.15)
    s = json.loads(out[-1])
    own = {r["rank"]: r["starvation"] for r in s["ranks"]}
    assert s["waited_on_rank"] == 1 and s["waited_on_share"] > 0.95
    assert own[1] > 0.1 and own[0] < own[1] / 5, own  # rank 0 held inside its steps, not waiting for input
    assert s["starvation_any"] == pytest.approx(own[1], rel=0.15)
    assert s["starvation_any"] > s["starvation_mean"]  # the mean over ranks halves what every rank lost


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two ranks on a core each need 2 cores")
def test_the_printed_starvation_is_the_rate_a_late_rank_costs(synthetic_images, tmp_path):
    """Rank 1's batches 2 s late on 2 ranks: the starvation that summary.json, the summary line and the last log line
    give is the group's, so it accounts for the share of the rate lost against the same run on time (within 10
    points), and the line names rank 1 as the rank the others waited for."""
    data = synthetic_images(256)
    late_run(data, tmp_path / "on_time", 0.0, steps=14, batch=2)
    printed, job = late_run(data, tmp_path / "late", 2.0, steps=14, batch=2)
    on_time, late = (json.loads((tmp_path / run / "summary.json").read_text()) for run in ("on_time", "late"))
    headline = late["starvation"]["starvation"]
    # The time outside the waits is a step's work in both runs, so the rates' ratio is (1 - s late) / (1 - s on
    # time). On a loaded CPU a step's work takes down to 0.4x as long when the ranks compute one at a time, as they
    # do while one sleeps: the lost share is then off by (1 - s late) x 1.5, under 10 points with ~0.1 s steps.
    lost = 1 - late["samples_per_s"] / on_time["samples_per_s"]
    accounted = 1 - (1 - headline) / (1 - on_time["starvation"]["starvation"])
    assert accounted == pytest.approx(lost, abs=0.1), (on_time["starvation"], late["starvation"])
    said = re.search(r"samples/s over \d+ timed steps, starvation\D*([\d.]+)%", printed[0])
    assert said and float(said.group(1)) == pytest.approx(100 * headline, abs=0.051), printed[0]
    assert "rank 1 made the others wait" in printed[0], printed[0]
    logged = re.findall(r"step 14: .* starved ([\d.]+)%", job.stderr)
    assert logged and float(logged[-1]) / 100 == pytest.approx(headline, abs=0.1), job.stderr[-3000:]
