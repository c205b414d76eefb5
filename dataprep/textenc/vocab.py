"""Tokenizers from a real vocabulary shipped in a PyPI wheel, so nothing is downloaded and every build is identical:
open_clip's CLIP BPE (`bpe_simple_vocab_16e6.txt.gz`, OpenAI's 49,408 tokens) as CLIPTokenizer's vocab.json and
merges.txt, and the same tokens, ranked as BPE learned them, as a unigram vocabulary for T5 and CLAP (whose own
vocabularies ship in no wheel). Scores from ranks, not a trainer: tokenizers' UnigramTrainer gives another vocabulary
on every run."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

from .base import TextEncoderError

CLIP_MERGES = 49152 - 256 - 2  # open_clip's SimpleTokenizer reads this many merges, so its ids equal OpenAI's
BOS, EOS = "<|startoftext|>", "<|endoftext|>"
METASPACE = "\u2581"  # sentencepiece's word-start mark, as T5's vocabulary spells a leading space


def _bpe_file() -> Path:
    try:
        import open_clip
    except ImportError:
        message = "building a text encoder needs open_clip's vocabulary: pip install 'gpufeed[text]'"
        raise TextEncoderError(message) from None
    return Path(open_clip.__file__).parent / "bpe_simple_vocab_16e6.txt.gz"


def _byte_chars() -> list[str]:
    """GPT-2's byte -> printable character table in CLIP's vocabulary order: printable bytes as themselves first,
    then the others mapped past 255."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in kept]
    return [chr(b) for b in kept] + [chr(256 + i) for i in range(len(others))]


def clip_merges() -> list[str]:
    """The merges ("a b" per line) in the order BPE learned them: the most frequent first."""
    lines = gzip.open(_bpe_file()).read().decode("utf-8").split("\n")
    return lines[1 : CLIP_MERGES + 1]


def write_clip_vocab(folder: Path) -> tuple[Path, Path]:
    """vocab.json and merges.txt in `folder`, as OpenAI's CLIP tokenizer files: ids equal open_clip's."""
    merges, base = clip_merges(), _byte_chars()
    vocab = base + [c + "</w>" for c in base] + ["".join(m.split()) for m in merges] + [BOS, EOS]
    vocab_file, merges_file = folder / "vocab.json", folder / "merges.txt"
    vocab_file.write_text(json.dumps({token: i for i, token in enumerate(vocab)}, ensure_ascii=False))
    merges_file.write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    return vocab_file, merges_file


def unigram_pieces() -> list[tuple[str, float]]:
    """CLIP's tokens as sentencepiece pieces: a word-final token `cat</w>` as `▁cat`, a word-start one kept as is;
    score -log(rank) so earlier (more frequent) merges win, single characters last as the fallback."""
    pieces: dict[str, float] = {}
    for rank, merge in enumerate(clip_merges(), start=2):
        token = "".join(merge.split())
        piece = METASPACE + token[: -len("</w>")] if token.endswith("</w>") else token
        pieces.setdefault(piece, -math.log(rank))
    floor = -math.log(len(pieces) + 2) - 1.0
    for c in [chr(c) for c in range(32, 127)] + [METASPACE]:
        pieces.setdefault(c, floor)
    return list(pieces.items())


def unigram_tokenizer(specials: list[str], template: str):
    """A `tokenizers.Tokenizer`: the unigram vocabulary after `specials` (ids 0..), NFKC and lower case,
    sentencepiece's spaces, and the post-processing `template` ("$A </s>" as T5, "<s> $A </s>" as RoBERTa)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    vocab = [(s, 0.0) for s in specials] + unigram_pieces()
    tokenizer = Tokenizer(models.Unigram(vocab, unk_id=specials.index("<unk>"), byte_fallback=False))
    # lower case: the vocabulary is CLIP's, which has no capitals
    tokenizer.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    used = [s for s in specials if s in template.split()]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=template, special_tokens=[(s, specials.index(s)) for s in used]
    )
    return tokenizer
