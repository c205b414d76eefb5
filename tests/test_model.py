"""The Ho et al. UNet and the diffusion maths."""

from __future__ import annotations

import torch

from training.diffusion import GaussianDiffusion
from training.model import MODEL_PRESETS, UNet, ddpm_audio_mel, ddpm_cifar10, tiny


def test_cifar10_preset_has_the_papers_parameter_count():
    """ddpm_cifar10() has 35.7M parameters (35,746,307, as the reference implementation)."""
    assert sum(p.numel() for p in UNet(ddpm_cifar10()).parameters()) == 35_746_307


def test_presets_map_input_shape_to_itself():
    """Every preset predicts noise of the input's shape: images 3x32x32, log-mel 1x64x64."""
    for cfg in (tiny(), tiny(in_channels=1, image_size=64), ddpm_audio_mel(ch=32, groups=8)):
        x = torch.randn(2, cfg.in_channels, cfg.image_size, cfg.image_size)
        assert UNet(cfg)(x, torch.tensor([0, 999])).shape == x.shape
    assert set(MODEL_PRESETS) == {"ddpm_cifar10", "ddpm_audio_mel", "tiny"}


def test_forward_process_statistics():
    """q(x_t|x_0) has mean sqrt(abar_t) x_0 and variance 1 - abar_t."""
    d = GaussianDiffusion()
    x0 = torch.full((20000, 1, 1, 1), 0.5)
    t = torch.full((20000,), 300)
    xt = d.q_sample(x0, t, torch.randn_like(x0, generator=torch.Generator().manual_seed(0)))
    ab = d.alpha_bar[300]
    assert abs(xt.mean() - ab.sqrt() * 0.5) < 0.02 and abs(xt.var() - (1 - ab)) < 0.02
    assert 0.0 < d.alpha_bar[-1] < 1e-4 < d.alpha_bar[0] < 1  # x_T is almost pure noise


def test_oracle_epsilon_recovers_data():
    """Given the true noise as the model's answer, DDIM (eta=0) returns the data point exactly (up to clamping)."""
    d = GaussianDiffusion()
    target = torch.rand(1, 1, 4, 4) * 1.6 - 0.8

    class Oracle(torch.nn.Module):
        def forward(self, x, t):
            ab = d.alpha_bar[t][:, None, None, None]
            return (x - ab.sqrt() * target) / (1 - ab).sqrt()

    out = d.ddim_sample(Oracle(), (1, 1, 4, 4), steps=20, generator=torch.Generator().manual_seed(1))
    assert torch.allclose(out, target, atol=1e-4)


def test_samplers_shapes_and_range():
    """Ancestral and DDIM samplers return images of the asked shape in [-1, 1] and are seeded."""
    d, model = GaussianDiffusion(T=20), UNet(tiny()).eval()
    a = d.sample(model, (2, 3, 32, 32), generator=torch.Generator().manual_seed(0))
    b = d.ddim_sample(model, (2, 3, 32, 32), steps=5, generator=torch.Generator().manual_seed(0))
    c = d.ddim_sample(model, (2, 3, 32, 32), steps=5, generator=torch.Generator().manual_seed(0))
    assert a.shape == b.shape == (2, 3, 32, 32) and a.abs().max() <= 1 and torch.equal(b, c)


def test_loss_is_mse_of_noise_prediction():
    """A model that always predicts zero scores E[eps^2] = 1; training a few steps lowers the loss."""
    d = GaussianDiffusion()
    x0 = torch.zeros(256, 3, 8, 8)
    zero = lambda x, t: torch.zeros_like(x)  # noqa: E731
    assert abs(d.loss(zero, x0, torch.Generator().manual_seed(0)).item() - 1.0) < 0.02
