"""Output formats: name -> "module:WriterClass". Each module also defines `read_chunks` (see DESIGN.md)."""

from __future__ import annotations

import importlib
from types import ModuleType

FORMATS = {
    "files": "dataprep.formats.files:FilesWriter",
    "hdf5": "dataprep.formats.hdf5:Hdf5Writer",
    "ffcv": "dataprep.formats.ffcv:FfcvWriter",
    "dali": "dataprep.formats.dali:DaliWriter",
    "stream": "dataprep.formats.stream:StreamWriter",
}
EXTRAS = {"ffcv": "ffcv", "hdf5": None, "files": "audio", "dali": None, "stream": "stream"}  # what a format needs
# "all": the formats the local loaders read; `stream` (shards for object storage, LitData) is asked for by name
ALL = ("files", "hdf5", "ffcv", "dali")


def expand(names: tuple[str, ...] | list[str]) -> list[str]:
    """('all',) -> every format; validates the names."""
    out: list[str] = []
    for name in names:
        if name == "all":
            out += [f for f in ALL if f not in out]
        elif name in FORMATS:
            out += [name] if name not in out else []
        else:
            raise ValueError(f"unknown format {name!r}; valid: {', '.join(FORMATS)}, all ({', '.join(ALL)})")
    return out


def module(name: str) -> ModuleType:
    if name not in FORMATS:
        raise ValueError(f"unknown format {name!r}; valid: {', '.join(FORMATS)}")
    return importlib.import_module(FORMATS[name].split(":")[0])


def writer_class(name: str) -> type:
    return getattr(module(name), FORMATS[name].split(":")[1])
