"""The faster forms of training.model compute what the forms they replaced (bench/studies/speedups.py) compute,
gradients included, with the same parameters; the UNet trains the same with either (CPU, fp32, tiny model)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bench.studies.speedups import PREVIOUS, GatherUpsample, GroupStatsGroupNorm, SlicedGradCatUNet, revert
from training.diffusion import GaussianDiffusion
from training.model import GroupNorm, UNet, Upsample2x, tiny

CL = torch.channels_last


def grads(y: torch.Tensor, inputs: list[torch.Tensor], seed: int = 1) -> list[torch.Tensor]:
    """Gradients of a random linear function of y, the same function for every y of this shape; its gradient with
    respect to y has y's layout, as in the UNet."""
    w = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed)).to(y.dtype)
    w = w.contiguous(memory_format=CL) if y.dim() == 4 and y.is_contiguous(memory_format=CL) else w
    return list(torch.autograd.grad((y * w).sum(), inputs))


@pytest.mark.parametrize("groups, channels", [(4, 16), (8, 64), (32, 128)])
def test_channel_stats_group_norm_matches_group_norm(groups, channels):
    """Output and gradients (input, weight, bias) match the per-group form and float64 F.group_norm."""
    torch.manual_seed(0)
    ours, cur = GroupNorm(groups, channels), GroupStatsGroupNorm(groups, channels)
    with torch.no_grad():
        ours.weight.normal_(), ours.bias.normal_()
    cur.load_state_dict(ours.state_dict())
    x = (3 * torch.randn(3, channels, 8, 8) + 2).contiguous(memory_format=CL).requires_grad_()
    params = [ours.weight, ours.bias]
    y = ours._channels_last_forward(x)
    assert y.is_contiguous(memory_format=CL) and y.dtype == torch.float32
    x64, p64 = x.detach().double().requires_grad_(), [p.detach().double().requires_grad_() for p in params]
    ref = F.group_norm(x64, groups, *p64, eps=ours.eps)
    torch.testing.assert_close(y, ref.float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(y, cur._channels_last_forward(x), atol=1e-5, rtol=1e-5)
    ours_grads = grads(y, [x, *params])
    assert ours_grads[0].is_contiguous(memory_format=CL)
    for g, r in zip(ours_grads, grads(ref, [x64, *p64])):
        torch.testing.assert_close(g, r.float(), atol=1e-4, rtol=1e-5)


def test_channel_stats_group_norm_under_compile_and_autocast():
    """Under torch.compile the module takes its layout path; under bf16 autocast it returns float32, as nn.GroupNorm."""
    torch.manual_seed(0)
    ours, ref = GroupNorm(8, 64), nn.GroupNorm(8, 64)
    ref.load_state_dict(ours.state_dict())
    x = torch.randn(2, 64, 4, 4).contiguous(memory_format=CL)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = torch.compile(ours, backend="eager")(x.bfloat16())
    assert y.dtype == torch.float32 and y.is_contiguous(memory_format=CL)
    torch.testing.assert_close(y, ref(x.bfloat16().float()), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("layout", [CL, torch.contiguous_format])
def test_broadcast_upsample_matches_nn_upsample(layout):
    """The same pixels, the input's layout kept, the same gradient (each input pixel sums its 2x2 block)."""
    x = torch.randn(2, 6, 4, 5).contiguous(memory_format=layout).requires_grad_()
    y, ref = Upsample2x()(x), nn.Upsample(scale_factor=2)(x)
    assert torch.equal(GatherUpsample()(x), ref)
    assert torch.equal(y, ref) and y.is_contiguous(memory_format=layout)
    torch.testing.assert_close(grads(y, [x])[0], grads(ref, [x])[0], atol=1e-6, rtol=1e-6)


def test_dense_grad_cat_matches_torch_cat():
    """The same concatenation and gradients; h's gradient is a dense channels_last tensor, not a channel slice."""
    h = torch.randn(2, 4, 3, 3).contiguous(memory_format=CL).requires_grad_()
    skip = torch.randn(2, 5, 3, 3).contiguous(memory_format=CL).requires_grad_()
    y, ref = UNet._cat(h, skip), SlicedGradCatUNet._cat(h, skip)
    assert torch.equal(y, ref)
    (gh, gs), (rh, rs) = grads(y, [h, skip]), grads(ref, [h, skip])
    assert torch.equal(gh, rh) and torch.equal(gs, rs)
    assert gh.is_contiguous(memory_format=CL) and not rh.is_contiguous(memory_format=CL)


def train(names: tuple[str, ...], steps: int = 3, device: str = "cpu", backend: str = "eager", dropout: float = 0.1):
    """`steps` Adam steps of the diffusion loss on the compiled tiny UNet (channels_last, fp32): the losses, the first
    step's gradients and the final state_dict."""
    torch.manual_seed(0)
    model = revert(UNet(tiny(dropout=dropout)).to(device, memory_format=CL), names)
    net, diffusion = torch.compile(model, backend=backend), GaussianDiffusion().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=2e-4)
    x = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(1)).to(device, memory_format=CL)
    losses, first = [], []
    for _ in range(steps):
        loss = diffusion.loss(net, x)
        loss.backward()
        first = first or [p.grad.clone() for p in model.parameters()]
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses, first, model.state_dict()


@pytest.mark.slow
def test_unet_trains_like_the_unet_of_the_previous_forms():
    """Same parameters (names, shapes, init), same losses over 3 steps and same first gradients within fp32 rounding."""
    losses, first, state = train(tuple(PREVIOUS))
    fast_losses, fast_first, fast_state = train(())
    assert [(k, v.shape) for k, v in state.items()] == [(k, v.shape) for k, v in fast_state.items()]
    torch.testing.assert_close(fast_losses, losses, atol=0, rtol=1e-5)
    for g, r in zip(fast_first, first):
        torch.testing.assert_close(g, r, atol=1e-5, rtol=1e-4)
    # Adam moves a weight by about lr (2e-4) whatever its gradient's size, so where a gradient is near zero, rounding
    # can move it differently by a fraction of lr (seen: 1.5e-5 in 1 of 4,608 weights); a wrong form moves many by ~lr
    for k in state:
        torch.testing.assert_close(fast_state[k], state[k], atol=1e-4, rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.slow
def test_faster_forms_compiled_by_inductor_on_cuda_match(monkeypatch):
    """The kernels Inductor generates for the faster forms compute what it generates for the previous ones (fp32,
    TF32 off, dropout off so both draw nothing from the generator inside the graph)."""
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    losses, first, _ = train(tuple(PREVIOUS), steps=2, device="cuda", backend="inductor", dropout=0.0)
    fast_losses, fast_first, _ = train((), steps=2, device="cuda", backend="inductor", dropout=0.0)
    torch.testing.assert_close(fast_losses, losses, atol=0, rtol=1e-4)
    for g, r in zip(fast_first, first):
        torch.testing.assert_close(g, r, atol=1e-4, rtol=1e-3)


def test_unknown_previous_form_names_the_valid_ones():
    with pytest.raises(ValueError, match="unknown previous form.*turbo.*valid: gn_group_stats"):
        revert(UNet(tiny()), ["turbo"])
