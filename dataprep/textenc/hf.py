"""What the three transformers-backed encoders share: loading a save_pretrained folder (model and tokenizer) and
encoding captions through the tokenizer and the model, padded to the longest caption of the call. Each encoder
module says which model class it loads and what its pooled vector is."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch

from common.noreplace import rename_new
from common.paths import NotRegularError, require_regular

from .base import TextEmbeddings, TextEncoder, TextEncoderError

GRAPH_TOKENS = 16  # caption lengths a CUDA-graphed encoder pads to a multiple of: CLIP's 77 tokens take 5 graphs


class TransformersEncoder(TextEncoder):
    """A transformers text model and its tokenizer, in eval mode on one device."""

    def __init__(self, folder: Path, model: torch.nn.Module, tokenizer, max_tokens: int) -> None:
        self.name, self.model, self.tokenizer, self.max_tokens = str(folder), model, tokenizer, max_tokens
        self.device = next(model.parameters()).device
        self.dim = int(model.config.hidden_size if hasattr(model.config, "hidden_size") else model.config.d_model)
        self.pooled_dim = self.pooled_size(model.config)
        self.graphs = None  # dataprep.graphed.Graphed of forward, after use_cuda_graphs on a GPU

    def use_cuda_graphs(self, batch_size: int | None = None) -> None:
        """Encode each batch as one replay of a CUDA graph of the model, its tokens copied from pinned memory, as
        `convert --text-encoder` does. Eager, a batch is hundreds of launches, and transformers' mask helpers read
        the mask back from the GPU (a wait for the batch before): CLIP-L-sized encoding was bound by its host, and
        lost 6-9% of its rate to the writer's threads. Captions are padded up to a multiple of GRAPH_TOKENS (at most
        max_tokens): a few graphs, each captured once. `batch_size`: the batches to come; the one eager warm-up
        before the first capture starts now, on a thread. Online encoding stays as the scripts that encode without
        a cache run it: eager, its tokens copied from pageable memory."""
        if self.device.type == "cuda":
            from ..graphed import Graphed

            self.graphs = Graphed(self.forward, None, warm_each_shape=False)  # bf16 weights: no autocast
            if batch_size:
                ids, mask, _ = self.tokenize([""] * batch_size)
                self.graphs.warm_soon(ids.to(self.device), mask.to(self.device))

    model_name = ""  # the transformers class that loads this kind's folders
    pooled_field = ""  # the config field that is the pooled vector's width

    @classmethod
    def model_class(cls, config: dict):
        """The transformers class that loads a folder with this config.json."""
        import transformers

        return getattr(transformers, cls.model_name)

    @classmethod
    def pooled_size(cls, config) -> int:
        return int(getattr(config, cls.pooled_field))

    @staticmethod
    def token_limit(config) -> int | None:
        """The most tokens the model's position table takes (None: no limit), and the default max_tokens."""
        return None

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(tokens (n, L, D), pooled (n, P)) for token ids and their attention mask."""
        raise NotImplementedError

    def tokenize(self, captions: list[str]) -> tuple[torch.Tensor, torch.Tensor, int]:
        """(token ids, attention mask, the longest caption's length), padded for the graphs and pinned on a GPU. The
        tokenizer's Rust half releases the GIL: a conversion runs this a batch ahead on a thread of its own."""
        batch = self.tokenizer(
            list(captions), padding="longest", truncation=True, max_length=self.max_tokens, return_tensors="pt"
        )
        ids, mask = batch["input_ids"], batch["attention_mask"]
        longest = ids.shape[1]
        if self.graphs is not None:  # padding tokens after the caption's end change no valid token's state
            extra = min(self.max_tokens, -(-longest // GRAPH_TOKENS) * GRAPH_TOKENS) - longest
            ids = torch.nn.functional.pad(ids, (0, extra), value=self.tokenizer.pad_token_id)
            mask = torch.nn.functional.pad(mask, (0, extra))
            if self.device.type == "cuda":  # pinned: a copy from pageable memory waits for every batch already
                # queued, and the GPU would sit idle while the host tokenizes the next batch
                ids, mask = ids.pin_memory(), mask.pin_memory()
        return ids, mask, longest

    @torch.no_grad()
    def encode(self, captions: list[str], tokenized: tuple | None = None) -> TextEmbeddings:
        ids, mask, longest = tokenized or self.tokenize(captions)
        graphed = self.graphs is not None
        ids, mask = ids.to(self.device, non_blocking=graphed), mask.to(self.device, non_blocking=graphed)
        tokens, pooled = (self.graphs or self.forward)(ids, mask)
        # padded positions zeroed: what the model computed there depends on the batch, so a cache stores valid
        # tokens only and pads with zeros, and encoding online must give that same batch
        mask = mask[:, :longest].bool()
        pooled = pooled.clone() if graphed else pooled  # a graph's output: the next replay's too
        return TextEmbeddings(tokens[:, :longest] * mask[..., None].to(tokens.dtype), mask, pooled)

    @classmethod
    def load(cls, folder: Path, config: dict, device, dtype: torch.dtype, max_tokens: int | None) -> TextEncoder:
        limit = cls.token_limit(config)
        if max_tokens is not None and limit is not None and max_tokens > limit:
            raise TextEncoderError(
                f"{folder}: the model takes at most {limit} tokens, not {max_tokens}; pass --text-max-tokens {limit} "
                "or less"
            )
        for entry in folder.iterdir():  # a FIFO in place of the weights would block the loader's open for ever
            try:
                if not entry.is_dir():
                    require_regular(entry, "file of the text encoder")
            except (NotRegularError, OSError) as e:
                raise TextEncoderError(str(e)) from None
        try:
            from transformers import AutoTokenizer
            from transformers.utils import logging

            logging.disable_progress_bar()  # a bar per load: noise in a tool's output
            model = cls.model_class(config).from_pretrained(folder, dtype=dtype)
            tokenizer = AutoTokenizer.from_pretrained(folder)
        except ImportError:
            raise TextEncoderError("text encoders need transformers: pip install 'gpufeed[text]'") from None
        except Exception as e:  # missing or damaged weights or tokenizer files: OSError, ValueError, safetensors'
            message = str(e).splitlines()[0] if str(e) else ""
            raise TextEncoderError(
                f"{folder}: cannot load the {cls.kind} text encoder ({type(e).__name__}: {message}); save it again "
                "with save_pretrained (model and tokenizer), or make one with `dataprep make-text-encoder`"
            ) from None
        model = model.to(device).eval().requires_grad_(False)
        return cls(folder, model, tokenizer, max_tokens or limit or cls.default_tokens)

    default_tokens = 77


def save_folder(path: Path, model: torch.nn.Module, tokenizer) -> Path:
    """save_pretrained the model and tokenizer into `path`, written under a temporary name and renamed when whole."""
    path = Path(path)
    if path.exists():
        raise TextEncoderError(f"{path}: already exists; remove it or choose another path")
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        from transformers.utils import logging

        logging.disable_progress_bar()
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        rename_new(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path
