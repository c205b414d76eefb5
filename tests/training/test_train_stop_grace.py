"""A stop signal waits for the step in flight however slow the steps are: the grace follows the measured step time,
so a run whose steps outlast the base grace (a CPU's 4-5 s steps against 3 s) still checkpoints at the stop and
`--resume` continues from it. Real signals to a real training process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from common.stopping import GRACE_S, grace_for
from training.config import TrainConfig
from training.loop import main

REPO = Path(__file__).resolve().parents[2]
BASE_S, STEP_S = 0.2, 0.6  # the base grace against a step three times as long, as 3 s is against a CPU's 4.5 s step

# the real hdf5 loader, each batch costing STEP_S more, in a run with `train`'s deadline on its process and the base
# grace of the one stop policy set to argv[3]
SLOW = """
import os, sys, time
from pathlib import Path
import common.stopping as stopping
from loaders import build_loader
from training.config import TrainConfig
from training.loop import main

data, out, stopping.GRACE_S, step_s = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])

class Slow:
    def __init__(self, inner):
        self.inner, self.served = inner, 0
    def __len__(self):
        return len(self.inner)
    def set_epoch(self, epoch):
        self.inner.set_epoch(epoch)
    def close(self):
        self.inner.close()
    def __iter__(self):
        for batch in self.inner:
            print(f"fetching batch {self.served}", file=sys.stderr, flush=True)
            time.sleep(step_s)
            self.served += 1
            yield batch

stopping.stop_within_deadline()
cfg = TrainConfig(data=data, out=out, loader="hdf5", model="tiny", batch_size=8, steps=1000, precision="fp32",
                  device="cpu", workers=0, pin_memory=False, sample_every=0, log_every=1000, ckpt_every=1000,
                  timing_warmup=1, progress=False)
summary = main(cfg, loader=Slow(build_loader("hdf5", data, batch_size=8, workers=0, pin_memory=False, device="cpu")))
print(f"stopped by {summary.stopped_by} at step {summary.start_step + summary.steps}", file=sys.stderr, flush=True)
os._exit(0)
"""


def test_the_grace_is_two_steps_and_a_second_where_steps_are_longer():
    """Fast steps keep the base grace; a 4.5 s step gets 10 s: the step in flight, then the checkpoint."""
    assert grace_for(None) == GRACE_S and grace_for(0.05) == GRACE_S
    assert grace_for(4.5) == 10.0 and grace_for(0.6, base=0.2) == pytest.approx(2.2)


@pytest.mark.slow  # a training process: ~10 s on a quiet 2-core machine
def test_a_stop_during_a_step_longer_than_the_grace_checkpoints_and_resumes(images64, tmp_path):
    """SIGINT as a step longer than the base grace begins: the step ends, a checkpoint is written, --resume goes on."""
    out = tmp_path / "run"
    env = os.environ | {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-c", SLOW, str(images64), str(out), str(BASE_S), str(STEP_S)]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while not any("fetching batch 4" in line for line in lines):  # three steps measured, the fourth begins
        assert time.monotonic() < deadline and proc.poll() is None, "".join(lines)[-3000:]
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    reader.join(timeout=10)
    err = "".join(lines)
    assert proc.returncode == 0 and "stopped by SIGINT at step 5" in err, err[-3000:]
    assert "could not stop at a step boundary" not in err
    cfg = TrainConfig(data=images64, out=out, loader="hdf5", model="tiny", batch_size=8, steps=6, precision="fp32",
                      device="cpu", workers=0, pin_memory=False, sample_every=0, log_every=1000, ckpt_every=1000,
                      timing_warmup=1, progress=False, resume=True)  # fmt: skip
    summary = main(cfg)
    assert (summary.start_step, summary.steps) == (5, 1)
