"""The Diffusion Transformer (DiT) of Peebles & Xie (2023), "Scalable Diffusion Models with Transformers": the latent
is cut into p x p patches, the tokens (plus a fixed 2-D sin-cos position embedding) pass through transformer blocks
conditioned on the timestep and class by adaLN-Zero, and a linear layer turns each token back into its patch.

Measured parameter counts of dit_b2() (DiT-B/2) at a (4, 32, 32) input: 130,315,808 with num_classes=1000 and
out_channels=8, the paper's 130.5M (its release counts the fixed position embedding, a frozen nn.Parameter there and
a buffer here, 256 x 768 = 196,608 more: 130,512,416); 129,543,184 with num_classes=10 and out_channels=4; 129,534,736
unconditional (out_channels=4). dit_tiny(): 180,432 unconditional."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(kw_only=True)
class DiTConfig:
    in_channels: int = 4  # Stable Diffusion VAE latents
    input_size: tuple[int, int] = (32, 32)  # latent (height, width): 256 px / 8; non-square works, e.g. (256, 16) audio
    patch_size: int = 2  # the paper's best (DiT-X/2): tokens = H*W/p^2, so compute grows ~4x per halving of p
    hidden: int = 768  # DiT-B width
    depth: int = 12  # DiT-B blocks
    heads: int = 12  # DiT-B: 64 channels per head
    mlp_ratio: float = 4.0  # the standard ViT MLP expansion
    num_classes: int = 0  # 0: unconditional; >0: class-conditional, plus a null class for classifier-free guidance
    class_dropout: float = 0.1  # the paper's label drop rate (to the null class); only used when num_classes > 0
    out_channels: int | None = None  # None: in_channels, epsilon prediction only (our diffusion learns no variance)

    def __post_init__(self) -> None:
        h, w = self.input_size
        p = self.patch_size
        problems = [
            (h % p == 0 and w % p == 0, f"input_size {self.input_size} is not divisible by patch_size {p}"),
            (self.hidden % self.heads == 0, f"hidden {self.hidden} is not divisible by heads {self.heads}"),
            (self.hidden % 4 == 0, f"hidden {self.hidden} must be a multiple of 4 (sin and cos for 2 axes)"),
            (self.num_classes >= 0, f"num_classes {self.num_classes} is negative; use 0 for unconditional"),
            (0.0 <= self.class_dropout <= 1.0, f"class_dropout {self.class_dropout} is outside [0, 1]"),
        ]
        refuse_problems("DiTConfig", problems)

    def build(self) -> DiT:
        return DiT(self)


def refuse_problems(name: str, checks: list[tuple[bool, str]]) -> None:
    """ValueError naming the model config `name` and the message of the first of `checks` (ok, message) that failed."""
    problem = next((message for ok, message in checks if not ok), None)
    if problem is not None:
        raise ValueError(f"{name}: {problem}")


def dit_b2(**overrides) -> DiTConfig:
    """DiT-B/2: 12 blocks of width 768, 12 heads, 2x2 patches (130.3M parameters with 1000 classes and out 8)."""
    return replace(DiTConfig(), **overrides)


def dit_tiny(**overrides) -> DiTConfig:
    """For tests and CPU runs: the same structure, two blocks of width 64 (0.18M parameters)."""
    return replace(DiTConfig(hidden=64, depth=2, heads=2, patch_size=2), **overrides)


def sincos_1d(dim: int, pos: torch.Tensor) -> torch.Tensor:
    """(len(pos), dim): sin of pos at dim/2 frequencies 1/10000^(i/(dim/2)), then cos (the MAE / DiT form)."""
    omega = 1.0 / 10000 ** (torch.arange(dim // 2, dtype=torch.float64) / (dim / 2))
    args = pos.double()[:, None] * omega[None]
    return torch.cat([torch.sin(args), torch.cos(args)], dim=1)


def sincos_2d(dim: int, grid_h: int, grid_w: int) -> torch.Tensor:
    """(grid_h * grid_w, dim), row-major: the first half encodes the column, the second the row (as in DiT)."""
    rows, cols = torch.meshgrid(torch.arange(grid_h), torch.arange(grid_w), indexing="ij")
    return torch.cat([sincos_1d(dim // 2, cols.flatten()), sincos_1d(dim // 2, rows.flatten())], dim=1).float()


def frequency_embedding(t: torch.Tensor, dim: int = 256, max_period: float = 10000) -> torch.Tensor:
    """(N, dim) sinusoidal features of integer timesteps: cos then sin, as DiT (not the DDPM UNet's sin then cos)."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=1)


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    # (1 + scale): a zero-initialised modulation leaves the normalised tokens as they are
    return x * (1 + scale[:, None]) + shift[:, None]


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.qkv, self.proj = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, tokens, dim = x.shape
        q, k, v = self.qkv(x).reshape(n, tokens, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        return self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(n, tokens, dim))


class DiTBlock(nn.Module):
    """Attention and MLP, each normalised, shifted and scaled by the conditioning, and gated (adaLN-Zero)."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        mlp = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp), nn.GELU(approximate="tanh"), nn.Linear(mlp, dim))
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim))

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift1, scale1, gate1, shift2, scale2, gate2 = self.adaLN_modulation(c).chunk(6, dim=1)
        x = x + gate1[:, None] * self.attn(modulate(self.norm1(x), shift1, scale1))
        return x + gate2[:, None] * self.mlp(modulate(self.norm2(x), shift2, scale2))


class FinalLayer(nn.Module):
    def __init__(self, dim: int, patch_values: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(dim, 2 * dim))
        self.linear = nn.Linear(dim, patch_values)

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift, scale = self.adaLN_modulation(c).chunk(2, dim=1)
        return self.linear(modulate(self.norm(x), shift, scale))


class PatchModel(nn.Module):
    """What DiT and its text form (training.dit_text) share: the latent cut into patch tokens plus the fixed position
    embedding, the timestep's embedder, and the tokens put back into a latent in the input's memory layout."""

    def __init__(self, cfg: DiTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d, p = cfg.hidden, cfg.patch_size
        self.out_channels = cfg.in_channels if cfg.out_channels is None else cfg.out_channels
        self.grid = (cfg.input_size[0] // p, cfg.input_size[1] // p)
        self.patch_embed = nn.Conv2d(cfg.in_channels, d, kernel_size=p, stride=p)
        # fixed, not learned (as in the paper), and rebuilt from the config: no reason to store it in checkpoints
        self.register_buffer("pos_embed", sincos_2d(d, *self.grid)[None], persistent=False)
        self.t_embedder = nn.Sequential(nn.Linear(256, d), nn.SiLU(), nn.Linear(d, d))

    def _init_linears_and_patches(self) -> None:
        """Xavier for every Linear, zero biases, and xavier for the patch embedding as the Linear it is (fan_in =
        C*p*p, fan_out = hidden); the subclass then sets its own layers."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
        w = self.patch_embed.weight.data
        nn.init.xavier_uniform_(w.view(w.shape[0], -1))
        nn.init.zeros_(self.patch_embed.bias)

    def _tokens(self, x: torch.Tensor) -> torch.Tensor:
        """x (N, C, H, W) to its patch tokens plus their positions, (N, tokens, hidden)."""
        if tuple(x.shape[2:]) != tuple(self.cfg.input_size):
            raise ValueError(f"DiT: input is {tuple(x.shape[2:])}, the config's input_size {self.cfg.input_size}")
        return self.patch_embed(x).flatten(2).transpose(1, 2) + self.pos_embed

    def _unpatchify(self, tokens: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """Tokens (N, tokens, p*p*out_channels) to (N, out_channels, H, W) in the memory layout of the input `like`."""
        (gh, gw), p, n = self.grid, self.cfg.patch_size, tokens.shape[0]
        x = tokens.reshape(n, gh, gw, p, p, self.out_channels)
        if like.is_contiguous(memory_format=torch.channels_last) and not like.is_contiguous():
            # one copy into NHWC memory, returned as an NCHW-shaped view like the input
            return x.permute(0, 1, 3, 2, 4, 5).reshape(n, gh * p, gw * p, -1).permute(0, 3, 1, 2)
        return x.permute(0, 5, 1, 3, 2, 4).reshape(n, -1, gh * p, gw * p)


class DiT(PatchModel):
    def __init__(self, cfg: DiTConfig) -> None:
        super().__init__(cfg)
        d = cfg.hidden
        # row num_classes is the null class: dropped labels in training, y=None (the unconditional branch) at sampling
        self.y_embedder = nn.Embedding(cfg.num_classes + 1, d) if cfg.num_classes > 0 else None
        self.blocks = nn.ModuleList(DiTBlock(d, cfg.heads, cfg.mlp_ratio) for _ in range(cfg.depth))
        self.final_layer = FinalLayer(d, cfg.patch_size**2 * self.out_channels)
        self._init_weights()

    def _init_weights(self) -> None:
        self._init_linears_and_patches()
        if self.y_embedder is not None:
            nn.init.normal_(self.y_embedder.weight, std=0.02)
        nn.init.normal_(self.t_embedder[0].weight, std=0.02)
        nn.init.normal_(self.t_embedder[2].weight, std=0.02)
        # adaLN-Zero: every block starts as the identity and the output as zero, which the paper found trains best
        for layer in [*(b.adaLN_modulation[1] for b in self.blocks), self.final_layer.adaLN_modulation[1]]:
            nn.init.zeros_(layer.weight)
            nn.init.zeros_(layer.bias)
        nn.init.zeros_(self.final_layer.linear.weight)
        nn.init.zeros_(self.final_layer.linear.bias)

    def _labels(self, y: torch.Tensor | None, n: int, device: torch.device) -> torch.Tensor:
        null = self.cfg.num_classes
        if y is None:
            return torch.full((n,), null, dtype=torch.long, device=device)
        if self.training and self.cfg.class_dropout > 0:
            # drawn on the device with torch.rand, so it stays in the graph under torch.compile and CUDA graphs
            y = torch.where(torch.rand(n, device=device) < self.cfg.class_dropout, null, y)
        return y

    def forward(self, x: torch.Tensor, t: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        """x (N, C, H, W) and int64 t in [0, 1000) to the predicted noise, (N, out_channels, H, W) in x's layout;
        y (N,) int64 labels, ignored when unconditional, None for the null class."""
        h = self._tokens(x)
        c = self.t_embedder(frequency_embedding(t).to(h.dtype))
        if self.y_embedder is not None:
            c = c + self.y_embedder(self._labels(y, x.shape[0], x.device))
        for block in self.blocks:
            h = block(h, c)
        return self._unpatchify(self.final_layer(h, c), x)
