"""Text-conditioned training on the CPU with the tiny encoders: a run learns and resumes exactly, with captions
cached (embeddings in the batch) or encoded in the step (`--text-encoder`); caption dropout draws the asked rate;
guided samples from prompts are drawn."""

from __future__ import annotations

import pytest
import torch
from training_helpers import tiny_cfg

from dataprep.textenc import load_text_encoder, pad
from loaders.base import Batch
from training.captions import PAD_TO, Captions, Guided, drop_captions, repeat
from training.data import DataError
from training.loop import main

COLOURS = {"red": (1.0, -1.0, -1.0), "green": (-1.0, 1.0, -1.0), "blue": (-1.0, -1.0, 1.0), "white": (1.0, 1.0, 1.0)}


class CaptionLoader:
    """32 flat images (32x32 unless `size`) of the colour their caption names, in a seeded order per epoch; the batch
    carries the raw captions, or their embeddings (each caption's valid tokens, padded per batch) as a cache would."""

    order_from_epoch = True

    def __init__(self, encoder=None, n: int = 32, batch_size: int = 8, channels: int = 3, size: int = 32) -> None:
        names = list(COLOURS)
        self.captions = [f"a {names[i % 4]} square" for i in range(n)]
        values = torch.tensor([(*COLOURS[names[i % 4]], 0.0)[:channels] for i in range(n)])
        self.x = values[:, :, None, None].expand(n, channels, size, size)
        self.cached = None
        if encoder is not None:  # each caption alone: its valid tokens, as stored once at conversion
            rows = [encoder.encode([c]) for c in self.captions]
            self.cached = [(r.tokens[0, : int(r.mask.sum())], r.pooled[0]) for r in rows]
        self.batch_size, self.epoch = batch_size, 0

    def __len__(self) -> int:
        return len(self.captions) // self.batch_size

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def close(self) -> None:
        pass

    def __iter__(self):
        order = torch.randperm(len(self.captions), generator=torch.Generator().manual_seed(self.epoch)).tolist()
        for b in range(len(self)):
            idx = order[b * self.batch_size : (b + 1) * self.batch_size]
            if self.cached is None:
                text = [self.captions[i] for i in idx]
            else:
                text = pad([self.cached[i][0] for i in idx], torch.stack([self.cached[i][1] for i in idx]))
            yield Batch(self.x[idx].contiguous(), torch.zeros(len(idx), dtype=torch.int64), text)


def _cfg(tmp_path, name: str, encoder, **overrides):
    text_encoder = str(encoder) if encoder else None
    base = dict(model="tiny_text", loader="torch", steps=6, batch_size=8, text_encoder=text_encoder, lr=3e-3)
    return tiny_cfg(tmp_path, tmp_path / name, **(base | overrides))


def test_text_run_learns_and_samples_prompts(text_encoders, tmp_path):
    """tiny_text on cached caption embeddings: the loss of the last steps is well below that of the first, and the
    last step writes a grid guided by the --sample-prompts, an image per prompt."""
    from PIL import Image

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a red square\n\na blue square\n")
    cfg = _cfg(
        tmp_path,
        "run",
        text_encoders["clip"],
        steps=16,
        ckpt_every=0,
        sample_every=16,
        sample_steps=2,
        sample_prompts=prompts,
        sample_count=2,
    )
    summary = main(cfg, CaptionLoader(load_text_encoder(text_encoders["clip"]), size=16))
    first, last = sum(summary.losses[:5]) / 5, sum(summary.losses[-5:]) / 5
    assert last < 0.7 * first, summary.losses
    grid = Image.open(tmp_path / "run" / "samples" / "step0000016.png")
    assert (grid.width, grid.height) == (2 * 16 + 3 * 2, 16 + 2 * 2)  # two images side by side, 2 px apart


def test_online_text_run_resumes_exactly(text_encoders, tmp_path):
    """dit_tiny_text with captions encoded in the step (--text-encoder), dropout on: 4 steps, then a resume to 6,
    give the losses and weights of 6 steps straight."""
    model, shape = "dit_tiny_text", dict(channels=4, size=32)  # the DiT preset takes 4x32x32 latents
    straight = main(_cfg(tmp_path, "straight", text_encoders["t5"], model=model), CaptionLoader(**shape))
    main(_cfg(tmp_path, "resumed", text_encoders["t5"], model=model, steps=4), CaptionLoader(**shape))
    resumed = main(_cfg(tmp_path, "resumed", text_encoders["t5"], model=model, resume=True), CaptionLoader(**shape))
    assert resumed.losses == straight.losses[4:]
    assert resumed.param_checksum == straight.param_checksum


def test_caption_dropout_rate():
    """Over 20,000 seeded draws about 10% of captions become the empty caption (within 4 standard deviations), and
    each row is either its own caption or the empty one, whole (tokens, mask and pooled)."""
    n, rate = 20_000, 0.1
    text = pad([torch.full((3, 2), 1.0)] * n, torch.ones(n, 5))
    empty = pad([torch.full((2, 2), -1.0)], -torch.ones(1, 5))
    out = drop_captions(text, empty, rate, torch.Generator().manual_seed(0))
    dropped = out.pooled[:, 0] < 0
    assert abs(dropped.float().mean().item() - rate) < 4 * (rate * (1 - rate) / n) ** 0.5
    assert (out.tokens[dropped, :2] == -1).all() and not out.mask[dropped, 2].any()
    assert (out.tokens[~dropped] == 1).all() and out.mask[~dropped].all()


def test_compiled_model_sees_one_caption_length(text_encoders):
    """With fix_length (a compiled run), captions of any length reach the step at the encoder's limit rounded up to
    PAD_TO, the padding masked; without it, at their batch's longest rounded up."""
    captions = Captions(str(text_encoders["clip"]), "cpu", 0.0)
    short, long = ["a cat"], [" ".join(["a big red cat"] * 12)]
    assert captions(short).tokens.shape[1] == PAD_TO
    captions.fix_length()
    limit = captions.encoder.max_tokens
    lengths = {captions(c).tokens.shape[1] for c in (short, long)}
    assert lengths == {-(-limit // PAD_TO) * PAD_TO} and limit > PAD_TO
    assert captions(short).mask.sum().item() == captions.encoder.encode(short).mask.sum().item()


def test_guidance_mixes_the_two_branches(text_encoders):
    """Guided eps at scale 0 is the empty caption's prediction, at scale 1 the prompt's, at 3 their extrapolation."""
    from training.model import model_config

    encoder = load_text_encoder(text_encoders["clap"])
    torch.manual_seed(0)
    net = model_config("dit_tiny_text", (3, 32, 32), 0, encoder.dim).build().eval()
    for p in net.parameters():  # the zero-initialised output layers would make every prediction 0
        torch.nn.init.normal_(p, std=0.05) if p.dim() > 1 else None
    text, empty = encoder.encode(["a red square", "a blue square"]), encoder.encode([""])
    x, t = torch.randn(2, 3, 32, 32), torch.tensor([10, 500])
    with torch.no_grad():
        cond, uncond = net(x, t, text=text), net(x, t, text=repeat(empty, 2))
        assert not torch.allclose(cond, uncond)
        for scale, want in [(0.0, uncond), (1.0, cond), (3.0, uncond + 3 * (cond - uncond))]:
            torch.testing.assert_close(Guided(net, text, empty, scale)(x, t), want, rtol=1e-4, atol=1e-5)


def test_no_empty_caption_is_refused_before_the_first_step(tmp_path):
    """Caption dropout with neither --text-encoder nor an empty caption from the data: one error naming the fix,
    before any step runs."""
    with pytest.raises(DataError, match="empty caption's embedding.*pass --text-encoder PATH"):
        main(_cfg(tmp_path, "run", None), CaptionLoader())
    assert not (tmp_path / "run" / "ckpt.pt").exists()
