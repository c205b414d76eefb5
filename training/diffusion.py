"""DDPM (Ho et al. 2020): linear betas 1e-4..0.02 over T=1000 steps, epsilon-prediction MSE, ancestral sampling,
and DDIM (Song et al. 2021) for fast previews."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class GaussianDiffusion(nn.Module):
    def __init__(self, T: int = 1000, beta_start: float = 1e-4, beta_end: float = 0.02) -> None:
        super().__init__()
        self.T = T
        betas = torch.linspace(beta_start, beta_end, T, dtype=torch.float64)
        alpha_bar = torch.cumprod(1 - betas, 0)
        # float64 for the schedule: 1 - alpha_bar near t=0 loses digits in float32
        for name, value in {
            "betas": betas,
            "alpha_bar": alpha_bar,
            "alpha_bar_prev": F.pad(alpha_bar[:-1], (1, 0), value=1.0),
        }.items():
            self.register_buffer(name, value.float(), persistent=False)

    def _at(self, values: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return values[t][:, None, None, None]

    def q_sample(self, x0: torch.Tensor, t: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """x_t ~ q(x_t | x_0) = N(sqrt(abar_t) x_0, (1 - abar_t) I)."""
        ab = self._at(self.alpha_bar, t)
        return ab.sqrt() * x0 + (1 - ab).sqrt() * noise

    def loss(
        self,
        model: nn.Module,
        x0: torch.Tensor,
        generator: torch.Generator | None = None,
        y: torch.Tensor | None = None,
        text=None,
    ) -> torch.Tensor:
        """The simplified objective: || eps - eps_theta(x_t, t[, y]) ||^2 with t uniform; y for class-conditional
        models, `text` (dataprep.textenc.TextEmbeddings) for text-conditioned ones."""
        t = torch.randint(0, self.T, (x0.shape[0],), device=x0.device, generator=generator)
        noise = torch.randn(x0.shape, device=x0.device, dtype=x0.dtype, generator=generator)
        x_t = self.q_sample(x0, t, noise).to(x0.dtype)
        pred = model(x_t, t, y, text=text) if text is not None else model(x_t, t) if y is None else model(x_t, t, y)
        return F.mse_loss(pred.float(), noise.float())

    @torch.no_grad()
    def sample(
        self,
        model: nn.Module,
        shape: tuple[int, ...],
        generator: torch.Generator | None = None,
        device: str | torch.device = "cpu",
    ) -> torch.Tensor:
        """Ancestral sampling over all T steps, sigma_t^2 = beta_t (the paper's CIFAR-10 choice)."""
        x = torch.randn(shape, device=device, generator=generator)
        for i in reversed(range(self.T)):
            t = torch.full((shape[0],), i, device=device, dtype=torch.long)
            eps = model(x, t).float()
            ab, beta = self._at(self.alpha_bar, t), self._at(self.betas, t)
            mean = (x - beta / (1 - ab).sqrt() * eps) / (1 - beta).sqrt()
            noise = torch.randn(shape, device=device, generator=generator) if i > 0 else 0.0
            x = mean + beta.sqrt() * noise
        return x.clamp(-1, 1)

    @torch.no_grad()
    def ddim_sample(
        self,
        model: nn.Module,
        shape: tuple[int, ...],
        steps: int = 50,
        eta: float = 0.0,
        generator: torch.Generator | None = None,
        device: str | torch.device = "cpu",
        y: torch.Tensor | None = None,
        clip: bool = True,
    ) -> torch.Tensor:
        """DDIM over `steps` evenly spaced timesteps; eta=0 is deterministic given the starting noise. `clip` holds
        the predicted x0 to [-1, 1], the range of pixels and mels; latents have no such range."""
        eps_of = model if y is None else (lambda x, t: model(x, t, y))
        x = torch.randn(shape, device=device, generator=generator)
        ts = torch.linspace(self.T - 1, 0, steps, device=device).round().long()
        for k, i in enumerate(ts):
            t = i.repeat(shape[0])
            ab = self._at(self.alpha_bar, t)
            ab_next = self._at(self.alpha_bar, ts[k + 1].repeat(shape[0])) if k + 1 < steps else torch.ones_like(ab)
            eps = eps_of(x, t).float()
            x0 = (x - (1 - ab).sqrt() * eps) / ab.sqrt()
            x0 = x0.clamp(-1, 1) if clip else x0
            sigma = eta * ((1 - ab_next) / (1 - ab) * (1 - ab / ab_next)).sqrt()
            noise = torch.randn(shape, device=device, generator=generator) if k + 1 < steps else 0.0
            x = ab_next.sqrt() * x0 + (1 - ab_next - sigma**2).clamp_min(0).sqrt() * eps + sigma * noise
        return x
