"""FFCV (`data.beton`, its fields in ffcv_layout.py): the writer, and the reader through FFCV's own Loader.

FFCV's writer wants random access (`dataset[i]`) from worker processes, but our sources stream. The writer stages
the samples as fixed-size records in a scratch file inside the temporary conversion directory and serves FFCV from
it with `os.pread`, so memory stays bounded whatever the dataset size (np.memmap would be simpler, but its touched
pages count as resident memory)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from common.paths import require_regular

from ..sources.base import Chunk
from .base import DatasetMeta, FormatWriter, has_captions
from .ffcv_layout import (
    FILENAME,
    TEXT,
    caption_sizes,
    captions_from,
    data_file,
    field_names,
    stored_caption,
)
from .ffcv_writer import Helper, StagedRecords

STAGING = "ffcv-staging.bin"


class FfcvWriter(FormatWriter):
    @classmethod
    def start_early(cls) -> Helper:
        return Helper()

    def __init__(
        self, out_dir: Path, meta: DatasetMeta, workers: int = 1, progress: bool = False, early: Helper | None = None
    ) -> None:
        super().__init__(out_dir, meta, workers, progress, early)
        self.staging = self.out_dir / STAGING
        self._f = open(self.staging, "wb")
        self.labels: list[np.ndarray] = []
        self.lengths: list[np.ndarray] = []
        self.texts: list[bytes] = []
        self._helper = early or Helper()

    def write(self, chunk: Chunk, encoded: None = None) -> None:
        self._helper.check()  # a helper that could not import FFCV stops the conversion now, not after the input
        self._f.write(np.ascontiguousarray(chunk.x, dtype=self.meta.dtype).tobytes())
        self.labels.append(chunk.y)
        if chunk.length is not None:
            self.lengths.append(chunk.length)
        if chunk.text is not None:
            self.texts += [stored_caption(t) for t in chunk.text]

    def finish(self) -> list[Path]:
        self._f.close()
        labels = np.concatenate(self.labels) if self.labels else np.zeros(0, np.int64)
        lengths = np.concatenate(self.lengths) if self.lengths else None
        records = StagedRecords(self.staging, self.meta, labels, lengths, self.texts)
        self.timings = self._helper.run((self.out_dir / FILENAME, records, self.workers, self.progress))
        self.staging.unlink()
        return [Path(FILENAME)]

    def abort(self) -> None:
        self._f.close()
        self._helper.close()


def read_chunks(data_dir: Path, manifest: dict, chunk_size: int) -> Iterator[Chunk]:
    """Reads back through FFCV's own Loader (sequential order, no augmentation), as training will."""
    from ffcv.fields.bytes import BytesDecoder
    from ffcv.fields.decoders import IntDecoder, NDArrayDecoder, SimpleRGBImageDecoder
    from ffcv.loader import Loader, OrderOption

    kind, captions = manifest["kind"], has_captions(manifest)
    names = field_names(kind, captions)
    decoders = {
        "image": SimpleRGBImageDecoder(),
        "audio": NDArrayDecoder(),
        "latent": NDArrayDecoder(),
        "label": IntDecoder(),
        "length": IntDecoder(),
        TEXT: BytesDecoder(),
    }
    path = data_file(data_dir)
    require_regular(path)  # FFCV's own open would wait on a FIFO for ever
    sizes = caption_sizes(path) if captions else None
    loader = Loader(
        str(path),
        batch_size=chunk_size,
        num_workers=1,
        order=OrderOption.SEQUENTIAL,
        drop_last=False,
        pipelines={n: [decoders[n]] for n in names},
    )
    start = 0
    for batch in loader:
        x, y = np.array(batch[0]), np.asarray(batch[1]).reshape(-1).astype(np.int64)
        x = x.view(manifest["dtype"]) if kind == "latent" else x
        length = np.asarray(batch[2]).reshape(-1).astype(np.int64) if kind == "audio" else None
        text = captions_from(batch[-1], sizes[start : start + len(y)]) if captions else None
        start += len(y)
        yield Chunk(x, y, length, text=text)
