"""Text encoders (dataprep.textenc): the tiny CLIP, T5 and CLAP encoders built from config load by path, encode as
transformers' own model and tokenizer do, mark each caption's tokens in the mask, and refuse what is not one."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from dataprep.cli import cli
from dataprep.textenc import TextEncoderError, load_text_encoder, make_text_encoder, pad

CAPTIONS = ["a photo of a cat", "", "An airplane flying low over the CITY at night, seen from the river bank!!"]
KINDS = ("clip", "t5", "clap")


@pytest.fixture(scope="module")
def encoders(text_encoders) -> dict:
    """Each tiny encoder loaded once for this module."""
    return {kind: load_text_encoder(folder) for kind, folder in text_encoders.items()}


@pytest.fixture(scope="module")
def reference(text_encoders) -> dict:
    """Per kind, each caption alone (no padding) through transformers' own tokenizer and model: (tokens (L, D),
    pooled (P,)); T5's pooled is the mean of its tokens."""
    import transformers

    classes = {
        "clip": transformers.CLIPTextModelWithProjection,
        "t5": transformers.T5EncoderModel,
        "clap": transformers.ClapTextModelWithProjection,
    }
    out = {}
    for kind, folder in text_encoders.items():
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
        model = classes[kind].from_pretrained(folder).eval()
        out[kind] = []
        for caption in CAPTIONS:
            with torch.no_grad():
                result = model(input_ids=tokenizer([caption], return_tensors="pt")["input_ids"])
            tokens = result.last_hidden_state[0]
            out[kind].append((tokens, tokens.mean(0) if kind == "t5" else result.text_embeds[0]))
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_tiny_encoder_loads_by_path(encoders, kind):
    """A folder make_text_encoder wrote loads as the encoder its config.json names, with its sizes."""
    encoder = encoders[kind]
    assert (encoder.kind, encoder.dim, encoder.pooled_dim) == (kind, 32, 32)
    assert encoder.max_tokens == {"clip": 77, "t5": 120, "clap": 77}[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_encode_equals_transformers_own(encoders, reference, kind):
    """Each caption's valid tokens and pooled vector equal transformers' encoding of it alone, to fp16 rounding."""
    got = encoders[kind].encode(CAPTIONS)
    for i, (tokens, pooled) in enumerate(reference[kind]):
        torch.testing.assert_close(got.tokens[i, : len(tokens)], tokens, rtol=1e-3, atol=1e-3)
        torch.testing.assert_close(got.pooled[i], pooled, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("kind", KINDS)
def test_mask_marks_each_captions_tokens(encoders, reference, kind):
    """The mask is True on exactly each caption's own token count, the batch padded to its longest, and padded
    positions hold zeros, so the batch equals pad() of the valid tokens (what a cache stores)."""
    lengths = [len(tokens) for tokens, _ in reference[kind]]
    got = encoders[kind].encode(CAPTIONS)
    assert got.tokens.shape[1] == max(lengths) == got.mask.shape[1]
    assert got.lengths.tolist() == lengths
    assert all(bool(got.mask[i, :n].all()) and not bool(got.mask[i, n:].any()) for i, n in enumerate(lengths))
    again = pad([got.tokens[i, :n] for i, n in enumerate(lengths)], got.pooled)
    assert torch.equal(again.tokens, got.tokens) and torch.equal(again.mask, got.mask)


@pytest.mark.parametrize("kind", KINDS)
def test_padding_to_a_graphs_length_changes_no_valid_token(text_encoders, kind):
    """A CUDA-graphed encoder pads captions up to a multiple of 16 tokens (one graph per length): the model run on the
    longer padding (here on the CPU, without a graph) gives the same valid tokens, mask and pooled vectors."""
    eager, padded = load_text_encoder(text_encoders[kind]), load_text_encoder(text_encoders[kind])
    seen, want_lengths = [], []
    padded.graphs = lambda ids, mask: seen.append(ids.shape[1]) or padded.forward(ids, mask)
    for captions in (CAPTIONS, CAPTIONS[:2]):
        want, got = eager.encode(captions), padded.encode(captions)
        assert got.tokens.shape == want.tokens.shape and torch.equal(got.mask, want.mask)
        torch.testing.assert_close(got.tokens, want.tokens, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got.pooled, want.pooled, rtol=1e-5, atol=1e-5)
        want_lengths.append(min(-(-want.tokens.shape[1] // 16) * 16, eager.max_tokens))
    assert seen == want_lengths and seen[0] > seen[1]


@pytest.mark.gpu
@pytest.mark.parametrize("warm_batch", [None, 3], ids=["warm-at-first-capture", "warm-soon"])
@pytest.mark.parametrize("kind", KINDS)
def test_cuda_graphs_replay_what_the_eager_encoder_gives(text_encoders, kind, warm_batch, monkeypatch):
    """On a GPU, use_cuda_graphs captures one graph per padded length (none falls back to eager) after one eager
    warm-up in all (at the first capture, or on a thread from the start) and each replay encodes its own captions as
    the eager encoder does, to bf16 rounding."""
    from dataprep.graphed import Graphed

    warm_ups = []
    warm = Graphed._warm
    monkeypatch.setattr(Graphed, "_warm", lambda self, *a: warm_ups.append(1) or warm(self, *a))
    eager = load_text_encoder(text_encoders[kind], "cuda", torch.bfloat16)
    graphed = load_text_encoder(text_encoders[kind], "cuda", torch.bfloat16)
    graphed.use_cuda_graphs(warm_batch)
    for captions in (CAPTIONS, CAPTIONS[::-1], ["a dog", "two dogs"]):
        want, got = eager.encode(captions), graphed.encode(captions)
        assert torch.equal(got.mask, want.mask)
        torch.testing.assert_close(got.tokens, want.tokens, rtol=2e-2, atol=2e-2)
        torch.testing.assert_close(got.pooled, want.pooled, rtol=2e-2, atol=2e-2)
    assert len(graphed.graphs.graphs) == 2 and None not in graphed.graphs.graphs.values()
    assert len(warm_ups) == 1 and graphed.graphs.warm_s > 0


def test_clip_ids_are_openai_clips(encoders):
    """The CLIP tokenizer converted from open_clip's BPE gives open_clip's own ids, between start and end of text."""
    from open_clip.tokenizer import SimpleTokenizer

    encoder = encoders["clip"]
    reference = SimpleTokenizer()
    for caption in CAPTIONS:
        ids = encoder.tokenizer(caption)["input_ids"]
        assert ids == [49406, *reference.encode(caption), 49407]


def test_max_tokens_cuts_long_captions(text_encoders):
    """A caption longer than max_tokens keeps max_tokens tokens; a limit beyond CLIP's position table is refused."""
    encoder = load_text_encoder(text_encoders["t5"], max_tokens=5)
    assert encoder.encode(CAPTIONS).lengths.tolist() == [5, 1, 5]
    with pytest.raises(TextEncoderError, match="at most 77 tokens"):
        load_text_encoder(text_encoders["clip"], max_tokens=78)


def test_pad_pads_per_batch():
    """pad() pads to the longest caption of the batch, zeros after each caption's tokens, mask True on its tokens."""
    batch = pad([torch.ones(3, 4), torch.full((1, 4), 2.0)], torch.zeros(2, 6))
    assert batch.tokens.shape == (2, 3, 4) and batch.pooled.shape == (2, 6)
    assert batch.mask.tolist() == [[True, True, True], [True, False, False]]
    assert batch.tokens[1, 1:].abs().sum() == 0 and batch.tokens[1, 0].tolist() == [2.0] * 4


def test_build_is_deterministic(text_encoders, tmp_path):
    """Two builds of the same encoder write byte-identical weights and tokenizer."""
    again = make_text_encoder("t5", tmp_path / "t5")
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (again / name).read_bytes() == (text_encoders["t5"] / name).read_bytes(), name


def test_not_a_text_encoder_is_one_clear_error(tmp_path):
    """A missing folder, one without config.json, and one holding another model each give one error naming the folder
    and what it holds."""
    with pytest.raises(TextEncoderError, match="no such folder"):
        load_text_encoder(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "weights.bin").write_bytes(b"")
    with pytest.raises(TextEncoderError, match=r"empty: no config.json \(it holds weights.bin\)"):
        load_text_encoder(tmp_path / "empty")
    (tmp_path / "vae").mkdir()
    (tmp_path / "vae" / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    with pytest.raises(TextEncoderError, match=r"vae: holds a bert model \(BertModel\), not a text encoder"):
        load_text_encoder(tmp_path / "vae")


def test_damaged_weights_are_one_clear_error(text_encoders, tmp_path):
    """A folder whose weights file is cut short is refused with the folder named, not a library traceback."""
    import shutil

    copy = shutil.copytree(text_encoders["clap"], tmp_path / "clap")
    (copy / "model.safetensors").write_bytes((copy / "model.safetensors").read_bytes()[:100])
    with pytest.raises(TextEncoderError, match="cannot load the clap text encoder"):
        load_text_encoder(copy)


def test_make_text_encoder_command(tmp_path):
    """`dataprep make-text-encoder` writes a loadable folder; an existing path is a one-line error, exit 1."""
    runner = CliRunner()
    result = runner.invoke(cli, ["make-text-encoder", "clap", str(tmp_path / "enc")])
    assert result.exit_code == 0, result.output
    assert load_text_encoder(tmp_path / "enc").kind == "clap"
    again = runner.invoke(cli, ["make-text-encoder", "clap", str(tmp_path / "enc")])
    assert again.exit_code == 1 and "already exists" in again.output and "Traceback" not in again.output
