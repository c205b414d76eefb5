"""`train --grad-sync`: every way of averaging gradients over the ranks trains with the losses of DDP as torch ships
it, to rounding, and keeps the ranks' weights identical (gloo on the CPU, two ranks under torchrun). Eager here: the
choices differ in how a compiled step is cut into graphs, which only a GPU can time (bench/studies/scaling.sh)."""

from __future__ import annotations

import json

import pytest
from ranks_helpers import TORCHRUN, Job

from training import config, grad_sync

EVERY_WAY = """
import json, sys
import torch.distributed as dist
from training.config import TrainConfig
from training.config import GRAD_SYNC_WAYS
from training.loop import main
dist.init_process_group("gloo")  # one group for every run: the loop trains in it and leaves it to this script
out = {}
for how in GRAD_SYNC_WAYS:
    s = main(TrainConfig(data=sys.argv[1], out=f"{sys.argv[2]}/{how}", loader="hdf5", model=sys.argv[3],
                         batch_size=8, steps=8, device="cpu", precision="fp32", workers=0, pin_memory=False,
                         sample_every=0, ckpt_every=0, log_every=1, lr=1e-3, warmup=0, grad_sync=how, progress=False))
    out[how] = {"losses": s.losses, "checksums": [r["param_checksum"] for r in s.ranks]}
if dist.get_rank() == 0:
    print(json.dumps(out))
dist.destroy_process_group()
"""


def test_the_config_offers_every_way():
    """The config offers every way, and the GPU test of compiled ranks against DDP runs every other way."""
    from test_ranks_gpu import WAY_GROUPS

    assert sorted(["ddp", *",".join(WAY_GROUPS).split(",")]) == sorted(config.GRAD_SYNC_WAYS)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["tiny", "dit_tiny"])
def test_every_way_trains_as_ddp_does(synthetic_images, image_vae, tmp_path, model):
    """Eight steps of each way, grad clipping and EMA on: rank 0's losses equal DDP's to 1e-6 relative, and at the
    end both ranks hold the same weights (their checksums equal exactly) as close to DDP's as rounding allows.
    dit_tiny trains on latents and has a buffer (its position embedding), which `flat` broadcasts as DDP does."""
    if model == "dit_tiny":
        from dataprep.convert import ConvertConfig, convert

        data = tmp_path / "latents"
        convert(
            ConvertConfig(
                output=data,
                source="synthetic-images",
                limit=64,
                formats=("hdf5",),
                vae=str(image_vae),
                device="cpu",
                batch_size=32,
                workers=1,
                progress=False,
            )
        )
    else:
        data = synthetic_images(64)
    script = tmp_path / "every_way.py"
    script.write_text(EVERY_WAY)
    job = Job([*TORCHRUN, "--standalone", "--nproc_per_node", "2", str(script), str(data), str(tmp_path), model])
    assert job.proc.wait(timeout=600) == 0, job.stderr[-3000:]
    runs = json.loads("".join(job.out).strip().splitlines()[-1])
    ddp = runs.pop("ddp")
    assert len(ddp["losses"]) == 8 and ddp["checksums"][0] == ddp["checksums"][1]
    for how, run in runs.items():
        assert run["losses"] == pytest.approx(ddp["losses"], rel=1e-6), how
        assert run["checksums"][0] == run["checksums"][1], f"{how}: the ranks' weights differ"
        assert run["checksums"][0] == pytest.approx(ddp["checksums"][0], rel=1e-6), how
    print({how: run["losses"][-1] - ddp["losses"][-1] for how, run in runs.items()})


@pytest.mark.parametrize("set_to_none", [True, False])
def test_flat_leaves_the_averaged_gradients_in_one_buffer(tmp_path, set_to_none):
    """`flat` hands back views into its all-reduced buffer instead of copying into each gradient; with
    zero_grad(set_to_none=False) the backward adds into those views (the next sync copies them onto themselves). Either
    way every step's gradients are what a plain backward gives (one rank: the average of one), laid out as their
    parameters (a channels_last convolution, as on CUDA), so the fused optimizer takes them."""
    import torch
    import torch.distributed as dist

    def net() -> torch.nn.Module:
        conv = torch.nn.Sequential(torch.nn.Conv2d(2, 3, 3), torch.nn.Flatten(), torch.nn.Linear(12, 2))
        return conv.to(memory_format=torch.channels_last)

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model, plain = net(), net()
        plain.load_state_dict(model.state_dict())
        sync = grad_sync.FlatAllReduce(model, world_size=1)
        optimizer = torch.optim.Adam(model.parameters(), fused=True)
        for step in range(3):
            x = torch.randn(5, 2, 4, 4, generator=torch.Generator().manual_seed(step))
            for m in (model, plain):
                m.zero_grad(set_to_none=set_to_none)
                m(x).square().sum().backward()
            sync()
            flat = sync.buffers[torch.float32]
            for p, q in zip(model.parameters(), plain.parameters()):
                assert p.grad.untyped_storage().data_ptr() == flat.untyped_storage().data_ptr()
                assert p.grad.stride() == p.stride()
                torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=0)
            optimizer.step()
            plain.load_state_dict(model.state_dict())
    finally:
        dist.destroy_process_group()


def test_the_step_graph_refuses_a_batch_of_another_shape():
    """A replayed graph reads its inputs at fixed addresses and shapes: a batch of another size is an error naming
    both shapes, not a step on part of the data (on a CPU the step runs eagerly behind the same check)."""
    import torch

    from training.step_graph import StepGraph

    model = torch.nn.Linear(3, 1)
    graph = StepGraph(torch.optim.Adam(model.parameters()), "cpu")
    body = lambda x, y: model(x).square().mean()  # noqa: E731
    assert graph(body, torch.ones(4, 3), None).item() >= 0
    with pytest.raises(ValueError, match=r"got \(3, 3\) after \(4, 3\)"):
        graph(body, torch.ones(3, 3), None)
