"""Output formats: name -> "module:WriterClass". Each module also defines `read_chunks` (see DESIGN.md)."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

FORMATS = {
    "files": "dataprep.formats.files:FilesWriter",
    "hdf5": "dataprep.formats.hdf5:Hdf5Writer",
    "ffcv": "dataprep.formats.ffcv:FfcvWriter",
    "dali": "dataprep.formats.dali:DaliWriter",
    "stream": "dataprep.formats.stream:StreamWriter",
}
# the library a format's writer imports, and the extra that installs it; checked before any work, since FFCV's writer
# imports it in a process of its own, where its absence surfaced as "Connection reset by peer"
NEEDS = {"ffcv": ("ffcv", "ffcv"), "stream": ("litdata", "stream")}
HOW = {"ffcv": "it builds from source: apt-get install libopencv-dev libturbojpeg0-dev pkg-config first"}
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


def install_hint(name: str) -> str:
    """How to install what format `name` needs."""
    how = f" ({HOW[name]})" if name in HOW else ""
    return f"pip install 'gpufeed[{NEEDS[name][1]}]'{how}, or leave {name} out of --format"


def require_installed(names: list[str]) -> None:
    """Refuse a format whose library is not installed, naming the fix."""
    for name in names:
        if name in NEEDS and importlib.util.find_spec(NEEDS[name][0]) is None:
            raise ValueError(f"--format {name} needs {NEEDS[name][0]}, which is not installed: {install_hint(name)}")


def module(name: str) -> ModuleType:
    if name not in FORMATS:
        raise ValueError(f"unknown format {name!r}; valid: {', '.join(FORMATS)}")
    return importlib.import_module(FORMATS[name].split(":")[0])


def writer_class(name: str) -> type:
    return getattr(module(name), FORMATS[name].split(":")[1])
