"""Under DDP a rank waiting for another rank's input is starved too: the figures say which rank made the others wait
and how much of the lost rate that explains (training.metrics.waited_on, bench.records.verdicts.explained)."""

from __future__ import annotations

import json

import pytest
from ranks_helpers import TORCHRUN, Job

from bench.records.verdicts import explained
from training.metrics import waited_on


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


SLOW_RANK = """
import json, sys, time
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

import os
rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
inner = build_loader("hdf5", sys.argv[1], batch_size=8, workers=0, pin_memory=False, device="cpu", rank=rank,
                     world_size=size)
cfg = TrainConfig(data=sys.argv[1], out=sys.argv[2], loader="hdf5", model="tiny", batch_size=8, steps=24,
                  timing_warmup=4, device="cpu", precision="fp32", sample_every=0, ckpt_every=0, progress=False)
s = main(cfg, loader=Late(inner, 0.15 if rank == 1 else 0.0))
if rank == 0:
    print(json.dumps(s.to_dict()["starvation"] | {"ranks": s.ranks}))
"""


@pytest.mark.slow
def test_a_late_rank_is_named_and_its_wait_is_every_ranks(synthetic_images, tmp_path):
    """Rank 1's batches come 0.15 s late: rank 1 starves, rank 0 does not wait for its own input at all, yet the group
    loses the same time at every step. The figures name rank 1 and count its waits as the group's."""
    script = tmp_path / "slow_rank.py"
    script.write_text(SLOW_RANK)
    job = Job(
        [
            *TORCHRUN,
            "--standalone",
            "--nproc_per_node",
            "2",
            str(script),
            str(synthetic_images(256)),
            str(tmp_path / "run"),
        ]
    )
    assert job.proc.wait(timeout=300) == 0, job.stderr[-3000:]
    s = json.loads("".join(job.out).strip().splitlines()[-1])
    own = {r["rank"]: r["starvation"] for r in s["ranks"]}
    assert s["waited_on_rank"] == 1 and s["waited_on_share"] > 0.95
    assert own[1] > 0.1 and own[0] < own[1] / 5, own  # rank 0 held inside its steps, not waiting for input
    assert s["starvation_any"] == pytest.approx(own[1], rel=0.15)
    assert s["starvation_any"] > s["starvation_mean"]  # the mean over ranks halves what every rank lost
