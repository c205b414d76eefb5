"""The training loop on CPU with tiny(): it learns, reports, samples, and resumes exactly."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from training_helpers import tiny_cfg

from training.checkpoint import CKPT_NAME, CheckpointError
from training.config import TrainConfig
from training.loop import main


@pytest.mark.slow
def test_loss_falls_on_real_images(cifar_small, tmp_path):
    """tiny() on real CIFAR-10 images: the last steps' mean loss is well below the first steps'."""
    s = main(tiny_cfg(cifar_small, tmp_path / "run", steps=40, batch_size=16, log_every=20, ckpt_every=40))
    assert len(s.losses) == 40 and s.steps == 40
    first, last = sum(s.losses[:10]) / 10, sum(s.losses[-10:]) / 10
    assert last < 0.7 * first, (first, last)
    assert s.samples_per_s > 0 and 0 <= s.starvation["starvation"] <= 1 and s.first_batch_s > 0


def test_metrics_and_checkpoint_written(cifar_small, tmp_path):
    """Every log step gives a metrics.jsonl record with rates; the checkpoint holds the final step."""
    s = main(tiny_cfg(cifar_small, tmp_path / "run"))
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [4, 8, 12]
    assert all(r["images_per_s"] > 0 and 0 <= r["starvation"] <= 1 and r["loss"] > 0 for r in records)
    ckpt = torch.load(tmp_path / "run" / CKPT_NAME, weights_only=True)
    assert ckpt["step"] == 12 and ckpt["position"] == 12 and s.final_loss == s.losses[-1]


@pytest.mark.slow  # make test-slow, for CI's budget
def test_sampling_writes_png(cifar_small, tmp_path):
    """An EMA sample grid PNG of sample_count 32x32 RGB images appears at each sample step."""
    from PIL import Image

    main(tiny_cfg(cifar_small, tmp_path / "run", steps=4, sample_every=2, sample_count=4, sample_steps=3))
    pngs = sorted(p.name for p in (tmp_path / "run" / "samples").glob("*.png"))
    assert pngs == ["step0000002.png", "step0000004.png"]
    with Image.open(tmp_path / "run" / "samples" / pngs[-1]) as im:
        assert im.size == (2 * 32 + 3 * 2, 2 * 32 + 3 * 2) and im.mode == "RGB"  # 2x2 grid, 2 px padding


@pytest.mark.slow
def test_resume_gives_identical_losses(cifar_small, tmp_path):
    """Stopping at a checkpoint mid-epoch and resuming reproduces the uninterrupted run's losses exactly."""
    # 512 images / 16 = 32 batches per epoch: 40 steps cross an epoch boundary; the stop at 20 is mid-epoch
    full = main(tiny_cfg(cifar_small, tmp_path / "full", steps=40, ckpt_every=20))
    cut = tiny_cfg(cifar_small, tmp_path / "cut", steps=20, ckpt_every=20, precision="fp32")
    main(cut)
    resumed = main(dataclasses.replace(cut, steps=40, resume=True))
    assert resumed.start_step == 20 and len(resumed.losses) == 20
    assert resumed.losses == full.losses[20:]  # exact: same data order, RNG states and arithmetic on CPU


def test_existing_run_without_resume_is_refused(cifar_small, tmp_path):
    """A second run into a RUN_DIR with a checkpoint fails instead of overwriting it."""
    cfg = tiny_cfg(cifar_small, tmp_path / "run", steps=4)
    main(cfg)
    with pytest.raises(CheckpointError, match="pass --resume"):
        main(cfg)


def test_bad_config_values_are_rejected(tmp_path):
    """Invalid TrainConfig values raise ValueError naming the valid choices."""
    with pytest.raises(ValueError, match="precision must be one of bf16, fp32"):
        TrainConfig(data=tmp_path, precision="fp8")
    with pytest.raises(ValueError, match="loader must be one of"):
        TrainConfig(data=tmp_path, loader="nope")
    with pytest.raises(ValueError, match="step-graph .* without --vae's encoder"):
        TrainConfig(data=tmp_path, grad_sync="step-graph", vae="stabilityai/sd-vae-ft-mse", loader="hdf5")


@pytest.mark.gpu
def test_host_runs_ahead_of_the_gpu(cifar_small, tmp_path):
    """Reading the loss never waits for the step just queued, so the host begins each step before the GPU finishes
    the previous one (Tensor.item() made this 100% behind). At batch 128 an eager ddpm_cifar10 step takes the host
    longer to launch (~60-90 ms measured on the H100) than the GPU to run, so the host is rightly behind there; at batch
    512 the GPU's work is ~4x larger and the launches are the same."""
    cfg = tiny_cfg(
        cifar_small,
        tmp_path / "run",
        model="ddpm_cifar10",
        batch_size=512,
        steps=30,
        timing_warmup=10,
        precision="bf16",
        device="cuda",
        log_every=30,
        ckpt_every=0,
    )
    s = main(cfg)
    assert len(s.losses) == 30 and all(0 < v < 10 for v in s.losses)
    assert s.starvation["host_behind"] < 0.2 and s.starvation["starvation"] < 0.01, s.starvation


@pytest.mark.parametrize("weight", [0.5, torch.tensor(0.5)], ids=["number", "tensor"])
def test_ema_update_stays_outside_autograd(weight):
    """The EMA weights move toward the model's and never join the autograd graph: recorded, every update chained a
    node to the previous one through them, and host memory grew with every step of a long run. A tensor weight (a
    CUDA graph's) moves them alike."""
    from training.ema import ema_update

    params = [torch.randn(4, requires_grad=True) for _ in range(3)]
    ema = [torch.zeros(4) for _ in range(3)]
    for _ in range(3):
        ema_update(ema, params, weight)
    assert all(e.grad_fn is None and not e.requires_grad for e in ema)
    torch.testing.assert_close(ema[0], params[0].detach() * (1 - 0.5**3))


@pytest.mark.slow  # ~25 s on 2 cores; the GPU form runs under -m gpu
def test_the_step_graphs_late_ema_is_every_steps_ema(cifar_small, tmp_path):
    """The step graph updates the EMA one step late, beside the next step's work (training.step_graph), and brings it
    up to date before a checkpoint. On the CPU (the same step, not captured) its weights equal the launched step's
    exactly and its EMA to rounding, at a checkpoint mid-run and at the end, and a run resumed from the mid-run
    checkpoint ends with the uninterrupted run's EMA exactly (an update lost or applied twice at the checkpoint would
    move the EMA by about 1e-3 here)."""
    ckpts = {}
    for name, how, steps, resume in [
        ("launched", "ddp", 4, False),
        ("launched", "ddp", 8, True),
        ("cut", "step-graph", 4, False),
        ("cut", "step-graph", 8, True),
        ("graph", "step-graph", 8, False),
    ]:
        main(tiny_cfg(cifar_small, tmp_path / name, steps=steps, grad_sync=how, resume=resume))
        ckpts[name, steps] = torch.load(tmp_path / name / CKPT_NAME, weights_only=True)
    for (launched, graph), exact in [
        ((ckpts["launched", 4], ckpts["cut", 4]), False),
        ((ckpts["launched", 8], ckpts["graph", 8]), False),
        ((ckpts["graph", 8], ckpts["cut", 8]), True),
    ]:
        for k, w in launched["model"].items():
            torch.testing.assert_close(graph["model"][k], w, rtol=0, atol=0)
        for k, w in launched["ema"].items():
            torch.testing.assert_close(graph["ema"][k], w, rtol=0 if exact else 1e-6, atol=0 if exact else 1e-7)


@pytest.mark.gpu
@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compiled"])
def test_the_step_graph_trains_as_the_launched_step(cifar_small, tmp_path, compile):
    """--grad-sync step-graph on one GPU: 3 eager steps, then the whole step captured once and replayed. Over a
    learning-rate warm-up (a rate frozen into the graph at its capture would show in the weights) its losses and final
    weights are those of the step launched op by op (CUDA graphs from torch.compile where compiled), to rounding. In
    fp32 that rounding (TF32 matmuls, cuDNN's algorithms chosen per run, which Adam's normalisation carries into a few
    weights) moved 6 of 1,024 elements of one weight by up to 4.6e-6 on an H200, and 1 of 18,432 of another by 2.4e-5
    on an H100; so at most 0.1% of all the elements may differ by more than 1e-5 (and 1e-3 relative), none by 1e-4.
    A rate frozen at the 4th step moves 99.7% of the weights by more than 1e-5 (median 2e-3, measured on the CPU).
    Compiled bf16 kernels are not bitwise reproducible between compiles."""
    runs = {}
    for how in ("ddp", "step-graph"):
        cfg = tiny_cfg(cifar_small, tmp_path / how, device="cuda", steps=16, warmup=12, ckpt_every=16, log_every=16)
        cfg = dataclasses.replace(cfg, grad_sync=how, compile=compile, precision="bf16" if compile else "fp32")
        losses = main(cfg).losses
        ckpt = torch.load(tmp_path / how / CKPT_NAME, weights_only=True)
        assert isinstance(ckpt["optimizer"]["param_groups"][0]["lr"], float)  # any run resumes from it
        runs[how] = (losses, ckpt["model"])
    (launched, want), (graphed, got) = runs["ddp"], runs["step-graph"]
    if compile:
        torch.testing.assert_close(torch.tensor(graphed), torch.tensor(launched), rtol=2e-2, atol=2e-4)
        for name, w in want.items():
            torch.testing.assert_close(got[name], w, rtol=2e-2, atol=2e-4, msg=lambda m, name=name: f"{name}: {m}")
        return
    torch.testing.assert_close(torch.tensor(graphed), torch.tensor(launched), rtol=1e-3, atol=1e-5)
    w, g = (torch.cat([t[k].flatten().double() for k in want if t[k].is_floating_point()]) for t in (want, got))
    apart = (g - w).abs()
    assert (apart > 1e-5 + 1e-3 * w.abs()).double().mean() < 1e-3 and apart.max() < 1e-4, apart.max()


def test_the_waits_at_epoch_starts_are_told_apart(synthetic_images, tmp_path):
    """The plain DataLoader starts its worker processes again every epoch: over 3 epochs of 4 steps, most of the time
    training waited for input fell at the first batch of an epoch, and the summary says how much."""
    data = synthetic_images(64, ("files",))
    cfg = tiny_cfg(data, tmp_path / "run", loader="torch", workers=2, steps=16, timing_warmup=4, ckpt_every=0)
    share = main(cfg).starvation["epoch_start_idle"]
    assert share is not None and share > 0.5, share
