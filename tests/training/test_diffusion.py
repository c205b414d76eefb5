"""The DDPM maths: forward process, loss, and both samplers, checked against closed forms on Gaussian data."""

from __future__ import annotations

import pytest
import torch

from training.diffusion import GaussianDiffusion
from training.model import UNet, tiny

MU, SIGMA = 0.2, 0.3  # data distribution N(MU, SIGMA^2): narrow enough that the samplers' clamps never bite


class ExactEps(torch.nn.Module):
    """The Bayes-optimal noise prediction E[eps | x_t] for data x_0 ~ N(MU, SIGMA^2): what a perfect model learns."""

    def __init__(self, d: GaussianDiffusion) -> None:
        super().__init__()
        self.d = d

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        ab = self.d.alpha_bar[t][:, None, None, None].double()
        return (1 - ab).sqrt() * (x - ab.sqrt() * MU) / (ab * SIGMA**2 + 1 - ab)


def seeded(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_schedule_is_the_papers_linear_one():
    """Betas run linearly from 1e-4 to 0.02 over T=1000, so x_T is almost pure noise."""
    d = GaussianDiffusion()
    assert d.betas.shape == (1000,) and d.betas[0].item() == pytest.approx(1e-4, rel=1e-6)
    assert d.betas[-1].item() == pytest.approx(0.02, rel=1e-6)
    assert torch.allclose(d.betas.diff(), torch.full((999,), (0.02 - 1e-4) / 999), atol=1e-8)
    assert 0.0 < d.alpha_bar[-1] < 1e-4 < d.alpha_bar[0] < 1


def test_forward_process_statistics():
    """q(x_t|x_0) has mean sqrt(abar_t) x_0 and variance 1 - abar_t, at an early and a late t."""
    d = GaussianDiffusion()
    x0 = torch.full((40000, 1, 1, 1), 0.5)
    for step in (10, 300, 900):
        t = torch.full((40000,), step)
        xt = d.q_sample(x0, t, torch.randn(x0.shape, generator=seeded(step)))
        ab = d.alpha_bar[step]
        assert abs(xt.mean() - ab.sqrt() * 0.5) < 0.01 and abs(xt.var() - (1 - ab)) < 0.02 * (1 - ab) + 1e-4


def test_loss_is_mse_of_noise_prediction():
    """A model that always predicts zero scores E[eps^2] = 1; the exact predictor scores the Bayes error, less."""
    d = GaussianDiffusion()
    x0 = MU + SIGMA * torch.randn(4096, 1, 4, 4, generator=seeded(1))
    zero = d.loss(lambda x, t: torch.zeros_like(x), x0, seeded(0)).item()
    exact = d.loss(ExactEps(d), x0, seeded(0)).item()
    assert abs(zero - 1.0) < 0.01 and exact < 0.5 * zero


def test_loss_is_seeded_and_differentiable():
    """The same generator gives the same loss, and gradients reach every UNet parameter."""
    d, model = GaussianDiffusion(), UNet(tiny(dropout=0.0))
    x0 = torch.rand(2, 3, 32, 32) * 2 - 1
    a, b = d.loss(model, x0, seeded(3)), d.loss(model, x0, seeded(3))
    assert a.item() == b.item() and a.ndim == 0
    a.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


@pytest.mark.parametrize("sampler", ["ancestral", "ddim_eta1_T_steps", "ddim_eta0_T_steps"])
def test_samplers_with_exact_model_reproduce_the_data_distribution(sampler):
    """With the exact eps of Gaussian data, ancestral DDPM and DDIM over all T steps (eta 1, 0) give N(MU, SIGMA^2)."""
    d = GaussianDiffusion()
    shape = (20000, 1, 1, 1)
    if sampler == "ancestral":
        x = d.sample(ExactEps(d), shape, generator=seeded())
    else:
        x = d.ddim_sample(ExactEps(d), shape, steps=d.T, eta=1.0 if "eta1" in sampler else 0.0, generator=seeded())
    assert abs(x.mean().item() - MU) < 0.01 and abs(x.std().item() - SIGMA) < 0.01


def test_ddim_with_oracle_epsilon_recovers_the_data_point():
    """Given the true noise as the model's answer, DDIM (eta=0, 20 steps) returns the data point exactly."""
    d = GaussianDiffusion()
    target = torch.rand(1, 1, 4, 4, generator=seeded(2)) * 1.6 - 0.8

    def oracle(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        ab = d.alpha_bar[t][:, None, None, None]
        return (x - ab.sqrt() * target) / (1 - ab).sqrt()

    assert torch.allclose(d.ddim_sample(oracle, (1, 1, 4, 4), steps=20, generator=seeded(1)), target, atol=1e-4)


def test_samplers_shapes_range_and_seeding():
    """Both samplers return the asked shape in [-1, 1]; the same generator gives the same samples."""
    d, model = GaussianDiffusion(T=20), UNet(tiny()).eval()
    a = d.sample(model, (2, 3, 32, 32), generator=seeded())
    b = d.ddim_sample(model, (2, 3, 32, 32), steps=5, generator=seeded())
    c = d.ddim_sample(model, (2, 3, 32, 32), steps=5, generator=seeded())
    assert a.shape == b.shape == (2, 3, 32, 32) and a.abs().max() <= 1 and torch.equal(b, c)


def test_schedule_buffers_move_with_the_module():
    """`.to(device)` carries the schedule; it stays out of state_dict so old checkpoints keep loading."""
    d = GaussianDiffusion().to("meta")
    assert d.alpha_bar.device.type == d.betas.device.type == "meta" and not GaussianDiffusion().state_dict()
