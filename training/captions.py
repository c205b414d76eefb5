"""Text conditioning in training: caption embeddings for the step (cached ones as the loader delivers them, or raw
captions encoded in the step by `train --text-encoder`, the online baseline), caption dropout for classifier-free
guidance (a share of captions replaced by the empty caption, encoded once), and guided samples from prompts."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from dataprep.textenc import TextEmbeddings, TextEncoderError, load_text_encoder

from .data import DataError

# captions are padded per batch, rounded up to a multiple of this: the attention's cost grows by less than one block.
# A compiled model takes every batch at the encoder's limit so rounded (CLIP's 77 -> 80): each new length would
# recompile it mid-run (tens of seconds, the GPU idle, and no input wait to show it)
PAD_TO = 16


def _longer(text: TextEmbeddings, length: int) -> TextEmbeddings:
    """`text` padded with masked zeros to `length` tokens."""
    extra = length - text.tokens.shape[1]
    if extra <= 0:
        return text
    return TextEmbeddings(F.pad(text.tokens, (0, 0, 0, extra)), F.pad(text.mask, (0, extra)), text.pooled)


def drop_captions(
    text: TextEmbeddings, empty: TextEmbeddings, rate: float, generator: torch.Generator | None = None
) -> TextEmbeddings:
    """Each caption replaced by `empty` (the empty caption's embedding, one row) with probability `rate`, drawn on
    the batch's device: the unconditional branch classifier-free guidance needs, learned by the same network."""
    if rate <= 0:
        return text
    n, device = len(text), text.tokens.device
    drop = torch.rand(n, device=device, generator=generator) < rate
    length = max(text.tokens.shape[1], empty.tokens.shape[1])
    text, empty = _longer(text, length), _longer(empty.to(device, text.tokens.dtype), length)
    return TextEmbeddings(
        torch.where(drop[:, None, None], empty.tokens, text.tokens),
        torch.where(drop[:, None], empty.mask, text.mask),
        torch.where(drop[:, None], empty.pooled, text.pooled),
    )


def repeat(text: TextEmbeddings, n: int) -> TextEmbeddings:
    """A one-row embedding as `n` rows."""
    return TextEmbeddings(*(t.expand(n, *t.shape[1:]) for t in (text.tokens, text.mask, text.pooled)))


def read_prompts(path: Path | str) -> list[str]:
    """The prompts of a UTF-8 text file, one a line; blank lines skipped."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(
            f"--sample-prompts {path}: cannot read it ({e}); pass a UTF-8 text file, a prompt a line"
        ) from None
    prompts = [line.strip() for line in lines if line.strip()]
    if not prompts:
        raise DataError(f"--sample-prompts {path}: no prompts in it; write one prompt a line")
    return prompts


class Guided(nn.Module):
    """The noise prediction of classifier-free guidance for fixed captions: eps(empty) + scale * (eps(caption) -
    eps(empty)), both branches in one batch. A module, so what samples a model (training.samples) samples this."""

    def __init__(self, model: nn.Module, text: TextEmbeddings, empty: TextEmbeddings, scale: float) -> None:
        super().__init__()
        self.model, self.scale = model, scale
        length = max(text.tokens.shape[1], empty.tokens.shape[1])
        both = [_longer(text, length), _longer(repeat(empty, len(text)), length)]
        self.text = TextEmbeddings(*(torch.cat(parts) for parts in zip(*((t.tokens, t.mask, t.pooled) for t in both))))

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        eps = self.model(torch.cat([x, x]), torch.cat([t, t]), text=self.text).float()
        cond, uncond = eps.chunk(2)
        return uncond + self.scale * (cond - uncond)


class Captions:
    """What a text-conditioned run does with `Batch.text`: encode raw captions (`encoder_path`, the online baseline),
    move them to the device, drop a share to the empty caption. The empty caption's embedding is encoded once: by
    the encoder, or given by the data (`empty`, as cached at conversion)."""

    def __init__(
        self,
        encoder_path: str | None,
        device: str,
        dropout: float,
        max_tokens: int | None = None,
        empty: TextEmbeddings | None = None,
        dim: int | None = None,
    ) -> None:
        self.device, self.dropout, self.encoder_path, self.max_tokens = device, dropout, encoder_path, max_tokens
        self.encoder = self._load(encoder_path) if encoder_path else None
        # the data's own empty caption first: a run on a cache is then the same with or without --text-encoder
        self.empty = empty if empty is not None or not self.encoder else self.encoder.encode([""])
        if self.empty is not None:
            self.empty = self.empty.to(device)
        self._dim = dim
        self.empty_from_loader = False  # the data's empty caption arrives with the loader (take_empty)
        self.fixed_length: int | None = None  # one caption length for every batch (a compiled model): fix_length()

    def fix_length(self) -> None:
        """Pad every batch's captions to the encoder's limit (rounded up to PAD_TO), so a compiled model sees one
        caption length."""
        limit = self.encoder.max_tokens if self.encoder is not None else self.max_tokens
        if limit is None:
            raise DataError("a compiled text model needs the captions' token limit: convert the data again")
        self.fixed_length = -(-limit // PAD_TO) * PAD_TO

    def _load(self, path: str):
        try:
            return load_text_encoder(path, self.device, max_tokens=self.max_tokens)
        except TextEncoderError as e:
            raise DataError(f"--text-encoder: {e}") from None

    @classmethod
    def for_data(cls, cfg, manifest: dict | None, device: str) -> Captions:
        """The run's captions: with embeddings cached in the data (convert --text-encoder), their width and empty
        caption from the manifest and its table, and a --text-encoder only where it is the one that made them."""
        text = (manifest or {}).get("text")
        if not isinstance(text, dict):
            return cls(cfg.text_encoder, device, cfg.caption_dropout)
        from dataprep.textenc.identity import check_encoder_identity

        captions = cls(
            cfg.text_encoder, device, cfg.caption_dropout, int(text["max_tokens"]), None, int(text["encoder"]["dim"])
        )
        if captions.encoder is not None:
            try:
                check_encoder_identity(captions.encoder, text, str(cfg.data))
            except TextEncoderError as e:
                raise DataError(f"--text-encoder: {e}") from None
        # the table is the loader's to read (from the store too): the empty caption comes with it (take_empty)
        captions.empty_from_loader = "empty_caption" in text
        return captions

    def take_empty(self, loader) -> None:
        """The data's cached empty caption from the opened loader's table (TextTable.empty()'s row)."""
        if self.empty_from_loader:
            self.empty = loader.text([""]).to(self.device)

    @property
    def dim(self) -> int | None:
        return self.encoder.dim if self.encoder else self._dim

    def missing(self, cfg) -> str | None:
        """What this run needs of the empty caption and cannot have, known before the first step; None when fine."""
        if self.empty is not None or self.empty_from_loader:
            return None
        needs = [
            what
            for what, on in [("--caption-dropout", cfg.caption_dropout > 0), ("sample grids", cfg.sample_every)]
            if on
        ]
        if not needs:
            return None
        verb = "needs" if len(needs) == 1 else "need"
        return (
            f"{' and '.join(needs)} {verb} the empty caption's embedding, which this data does not hold (convert it"
            " again to cache it); pass --text-encoder PATH (the encoder of the cached captions; it encodes it once),"
            " or --caption-dropout 0 --sample-every 0"
        )

    def embed(self, text) -> TextEmbeddings:
        """Batch.text as embeddings on the device: raw captions (a list of str) encoded, cached ones moved."""
        if text is None:
            raise DataError(
                "a text-conditioned model needs captions: train on data converted with captions (and --text-encoder"
                " for cached embeddings), or pick a model without _text"
            )
        if isinstance(text, (list, tuple)):
            if self.encoder is None:
                raise DataError("the data delivers raw captions: pass --text-encoder PATH to encode them in the step")
            return self.encoder.encode(list(text))
        return text.to(self.device)

    def __call__(self, text) -> TextEmbeddings:
        """The step's caption embeddings: embedded, padded to a multiple of PAD_TO tokens (or the fixed length), then
        `dropout` of them the empty caption."""
        text = self.embed(text)
        text = _longer(text, self.fixed_length or -(-text.tokens.shape[1] // PAD_TO) * PAD_TO)
        if self.dropout > 0 and self.empty is None:
            raise DataError(
                "caption dropout needs the empty caption's embedding, which this data does not hold: pass "
                "--text-encoder PATH (it encodes it once), or --caption-dropout 0"
            )
        return drop_captions(text, self.empty, self.dropout) if self.dropout > 0 else text

    def prompts(self, prompts: list[str]) -> tuple[TextEmbeddings, TextEmbeddings]:
        """(the prompts' embeddings, the empty caption's) for guided samples."""
        if self.encoder is None:
            raise DataError("--sample-prompts needs a text encoder to embed them: pass --text-encoder PATH")
        return self.encoder.encode(prompts), self.empty


def prompted(ema: nn.Module, captions: Captions, cfg, shape: tuple[int, ...]) -> tuple[nn.Module, tuple[int, ...]]:
    """(the model a sample grid draws from, the grid's shape): one image per prompt of --sample-prompts (the list
    repeated up to --sample-count), guided by --guidance-scale; without prompts, the empty caption's samples."""
    if cfg.sample_prompts is None:
        if captions.empty is None:
            raise DataError(
                "a text model's sample grid needs the empty caption: pass --text-encoder or --sample-every 0"
            )
        return Guided(ema, repeat(captions.empty, shape[0]), captions.empty, 1.0), shape
    prompts = read_prompts(cfg.sample_prompts)
    prompts = (prompts * cfg.sample_count)[: max(cfg.sample_count, len(prompts))]
    text, empty = captions.prompts(prompts)
    return Guided(ema, text, empty, cfg.guidance_scale), (len(prompts), *shape[1:])
