"""The Diffusion Transformer: its presets, shapes, adaLN-Zero start, class conditioning, and a compiled GPU step."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from training.diffusion import GaussianDiffusion
from training.dit import DiT, DiTConfig, dit_b2, dit_tiny


def perturbed(model: DiT, scale: float = 0.1) -> DiT:
    """The model with noise added to every parameter, so the zero-initialised layers no longer hide the rest."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * scale)
    return model


def train_steps(model: DiT, steps: int, *, n: int = 8, lr: float = 1e-3, seed: int = 0) -> list[float]:
    """Adam on the epsilon-prediction loss of one fixed batch (fixed x0, t, noise and labels); the losses."""
    g = torch.Generator().manual_seed(seed)
    c, (h, w) = model.cfg.in_channels, model.cfg.input_size
    x0, noise = torch.randn(n, c, h, w, generator=g), torch.randn(n, c, h, w, generator=g)
    t = torch.randint(0, 1000, (n,), generator=g)
    y = torch.randint(0, max(model.cfg.num_classes, 1), (n,), generator=g) if model.cfg.num_classes else None
    x_t = GaussianDiffusion().q_sample(x0, t, noise)
    opt, losses = torch.optim.Adam(model.parameters(), lr=lr), []
    for _ in range(steps):
        loss = F.mse_loss(model(x_t, t, y), noise)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_dit_b2_has_the_papers_parameter_count():
    """DiT-B/2 with 1000 classes and learned variance has the paper's 130.5M parameters (within 0.5%)."""
    with torch.device("meta"):  # shapes only: no memory, no initialisation cost
        model = dit_b2(num_classes=1000, out_channels=8).build()
    n = sum(p.numel() for p in model.parameters())
    assert abs(n - 130.5e6) / 130.5e6 < 0.005, n
    # the reference release counts its frozen position embedding as a parameter; here it is a buffer
    assert n + model.pos_embed.numel() == 130_512_416


def test_tiny_preset_is_small_and_takes_overrides():
    """dit_tiny stays CPU-sized, keyword overrides reach the config, and build() returns a DiT."""
    cfg = dit_tiny(in_channels=1, input_size=(64, 16), num_classes=10)
    assert (cfg.in_channels, cfg.input_size, cfg.num_classes, cfg.hidden) == (1, (64, 16), 10, dit_tiny().hidden)
    model = cfg.build()
    assert isinstance(model, DiT) and sum(p.numel() for p in model.parameters()) < 250_000
    assert "pos_embed" not in model.state_dict()  # fixed and rebuilt from the config, so not checkpointed


@pytest.mark.parametrize("shape", [(4, 8, 8), (8, 16, 4)], ids=["square", "non-square"])
def test_output_has_the_input_shape(shape):
    """The predicted noise has the input's shape, for square and non-square latents; out_channels sets its channels."""
    c, h, w = shape
    model = perturbed(dit_tiny(in_channels=c, input_size=(h, w)).build())
    x, t = torch.randn(2, c, h, w), torch.tensor([0, 999])
    assert model(x, t).shape == x.shape
    wide = dit_tiny(in_channels=c, input_size=(h, w), out_channels=2 * c).build()
    assert wide(x, t).shape == (2, 2 * c, h, w)


def test_channels_last_input_gives_the_same_output_in_its_layout():
    """A channels_last input gives the NCHW input's output, returned channels_last."""
    torch.manual_seed(0)
    model = perturbed(dit_tiny(input_size=(8, 12), num_classes=10).build()).eval()
    x, t, y = torch.randn(3, 4, 8, 12), torch.tensor([1, 500, 998]), torch.tensor([0, 3, 9])
    with torch.no_grad():
        ref, out = model(x, t, y), model(x.contiguous(memory_format=torch.channels_last), t, y)
    assert ref.is_contiguous() and out.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_untrained_model_outputs_zeros():
    """adaLN-Zero: with the final layer and every modulation zero-initialised, the output is exactly zero."""
    torch.manual_seed(0)
    for cfg in (dit_tiny(), dit_tiny(num_classes=10, input_size=(16, 8))):
        x = torch.randn(2, cfg.in_channels, *cfg.input_size)
        out = cfg.build()(x, torch.tensor([3, 700]), torch.tensor([1, 2]) if cfg.num_classes else None)
        assert torch.equal(out, torch.zeros_like(out))


def test_class_label_changes_the_prediction():
    """After a few steps, different labels give different outputs; in eval mode y=None is the null class."""
    torch.manual_seed(0)
    model = dit_tiny(input_size=(8, 8), num_classes=10).build()
    train_steps(model, 5)
    model.eval()
    x, t = torch.randn(2, 4, 8, 8), torch.tensor([100, 600])
    with torch.no_grad():
        a, b = model(x, t, torch.tensor([1, 1])), model(x, t, torch.tensor([7, 7]))
        null, again = model(x, t), model(x, t)
        explicit_null = model(x, t, torch.tensor([10, 10]))
    assert not torch.allclose(a, b, atol=1e-6)
    assert torch.equal(null, again) and torch.equal(null, explicit_null)
    assert not torch.allclose(null, a, atol=1e-6)


def test_full_label_dropout_ignores_the_label_in_training_only():
    """With class_dropout=1.0, training mode maps every label to the null class; eval mode still uses the label."""
    torch.manual_seed(0)
    trained = dit_tiny(input_size=(8, 8), num_classes=10, class_dropout=0.0).build()
    train_steps(trained, 5)  # without dropout, so the labels' embeddings differ from the null class
    model = dit_tiny(input_size=(8, 8), num_classes=10, class_dropout=1.0).build()
    model.load_state_dict(trained.state_dict())
    x, t = torch.randn(2, 4, 8, 8), torch.tensor([100, 600])
    with torch.no_grad():
        model.train()
        a, b, none = model(x, t, torch.tensor([1, 1])), model(x, t, torch.tensor([7, 7])), model(x, t)
        model.eval()
        a_eval = model(x, t, torch.tensor([1, 1]))
    assert torch.equal(a, b) and torch.equal(a, none)
    assert not torch.allclose(a_eval, a, atol=1e-6)


def test_it_learns_a_fixed_batch():
    """Forty Adam steps of the epsilon-prediction loss on one fixed batch cut the loss at least in half."""
    torch.manual_seed(0)
    losses = train_steps(dit_tiny(input_size=(8, 8), num_classes=10).build(), 40)
    assert losses[0] == pytest.approx(1.0, abs=0.3)  # the zero output's loss is the noise's variance
    assert losses[-1] < 0.5 * losses[0], losses


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"input_size": (32, 31)}, "not divisible by patch_size"),
        ({"hidden": 64, "heads": 3}, "not divisible by heads"),
        ({"class_dropout": 1.5}, "outside"),
    ],
)
def test_bad_config_raises_value_error(overrides, message):
    """Configs the model cannot build are refused with a ValueError saying why."""
    with pytest.raises(ValueError, match=message):
        DiTConfig(**overrides)


def test_wrong_input_size_is_refused():
    """An input of another size than the config's (the position embedding's grid) raises a ValueError."""
    with pytest.raises(ValueError, match="input_size"):
        dit_tiny(input_size=(8, 8)).build()(torch.randn(1, 4, 16, 16), torch.tensor([0]))


@pytest.mark.gpu
@pytest.mark.slow
def test_dit_b2_trains_compiled_in_bf16_on_cuda():
    """DiT-B/2, channels_last, bf16 autocast and torch.compile: 3 steps at batch 32 give finite losses and move
    the weights."""
    torch.manual_seed(0)
    model = dit_b2(in_channels=4, input_size=(32, 32), num_classes=10).build().cuda()
    model = model.to(memory_format=torch.channels_last)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    step_model = torch.compile(model)
    # no weight decay: a weight then moves only where a gradient reached it
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
    diffusion = GaussianDiffusion().cuda()
    losses = []
    for _ in range(3):
        x0 = torch.randn(32, 4, 32, 32, device="cuda").contiguous(memory_format=torch.channels_last)
        t, y = torch.randint(0, 1000, (32,), device="cuda"), torch.randint(0, 10, (32,), device="cuda")
        noise = torch.randn_like(x0)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            pred = step_model(diffusion.q_sample(x0, t, noise), t, y)
        loss = F.mse_loss(pred.float(), noise)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses))), losses
    changed = [k for k, v in model.named_parameters() if not torch.equal(v, before[k])]
    assert "final_layer.linear.weight" in changed and "blocks.0.attn.qkv.weight" in changed
    assert len(changed) > 0.9 * len(before), f"only {len(changed)} of {len(before)} parameters moved"
