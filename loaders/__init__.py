"""Interchangeable data loaders. `build_loader(name, data_dir, ...)` returns a `Loader` yielding `Batch`es on the
device; backends are imported only when built, so a missing FFCV or DALI only matters to whoever asks for it."""

from __future__ import annotations

import importlib
from pathlib import Path

from .errors import LoaderError

BACKENDS = {
    "torch": "loaders.torch_files:TorchFilesLoader",
    "hdf5": "loaders.hdf5_backend:Hdf5Loader",
    "ffcv": "loaders.ffcv_backend:FfcvLoader",
    "dali": "loaders.dali_backend:DaliLoader",
    "gpu": "loaders.gpu_resident:GpuResidentLoader",
    "stream": "loaders.stream_backend:StreamLoader",
}
# the pip extra that provides each optional library (top-level module name), and the format each backend reads
EXTRAS = {
    "ffcv": "ffcv",
    "numba": "ffcv",
    "nvidia": "dali",
    "soundfile": "audio",
    "soxr": "audio",
    "litdata": "stream",
    "boto3": "stream",
    "botocore": "stream",
}
NEEDS_FORMAT = {"torch": "files", "hdf5": "hdf5", "ffcv": "ffcv", "dali": "dali", "gpu": "hdf5", "stream": "stream"}
# the knobs each backend uses: `gpu` has no workers and no host copies; FFCV and DALI manage their own page-locked
# buffers and run max(1, workers) threads, so 0 and 1 workers are one configuration for them
USES_WORKERS = {"torch": True, "hdf5": True, "ffcv": True, "dali": True, "gpu": False, "stream": True}
USES_PIN = {"torch": True, "hdf5": True, "ffcv": False, "dali": False, "gpu": False, "stream": True}
MIN_WORKERS = {"ffcv": 1, "dali": 1}


def backend_label(name: str, device: str) -> str:
    """A backend's name as people read it: `gpu` holds the whole dataset in the device's memory, RAM on a CPU."""
    if name == "gpu" and not str(device).startswith("cuda"):
        return "gpu (dataset resident in RAM here: no GPU)"
    return name


def build_loader(name: str, data_dir: str | Path, **options):
    """Build backend `name` over a `dataprep convert` directory. Options: see loaders.base.LoaderOptions."""
    from common.paths import NotRegularError, OutsideError
    from dataprep.manifest import ManifestError, load_manifest
    from dataprep.remote import RemoteError, S3Url, files_url, is_remote, load_remote_manifest

    from .base import LoaderOptions
    from .integrity import check_format, check_manifest, fix

    if name not in BACKENDS:
        raise LoaderError(f"unknown loader {name!r}; valid: {', '.join(BACKENDS)}")
    remote = is_remote(data_dir)  # s3://BUCKET/PREFIX: the stream loader reads object storage, through LitData
    if remote and name != "stream":
        raise LoaderError(f"{data_dir}: the {name!r} loader reads local directories; use --loader stream for s3://")
    try:
        manifest = load_remote_manifest(data_dir) if remote else load_manifest(data_dir)
        files = str(files_url(data_dir, manifest)) if remote else None  # the generation folder holding the files
    except ManifestError as e:
        raise LoaderError(f"{e}; {fix(data_dir)}") from None
    except RemoteError as e:
        raise LoaderError(str(e)) from None
    fmt = NEEDS_FORMAT[name]
    if fmt not in manifest["formats"] and not (name == "gpu" and "files" in manifest["formats"]):
        raise LoaderError(
            f"{data_dir} has no {fmt!r} format (it has {', '.join(manifest['formats'])}); "
            f"run: dataprep convert --format {fmt} ..."
        )
    if name == "gpu" and fmt not in manifest["formats"]:
        fmt = "files"
    module_name, cls_name = BACKENDS[name].split(":")
    try:  # backends import their optional libraries at module level or in __init__, so both are covered here
        # cheap: sizes and headers, no hashing; in object storage the manifest's own checks, and each shard's sha256
        # as it is downloaded (the stream backend)
        (check_manifest if remote else check_format)(data_dir, manifest, fmt)
        cls = getattr(importlib.import_module(module_name), cls_name)
        if name == "stream":
            location = str(S3Url.parse(data_dir)) if remote else None
            return cls(Path(str(data_dir)), manifest, LoaderOptions(**options), location=location, files=files)
        return cls(Path(data_dir), manifest, LoaderOptions(**options))
    except OutsideError as e:  # the message names the entry, where it was found and what to do
        raise LoaderError(str(e)) from None
    except NotRegularError as e:  # a FIFO in a file's place: refused before any backend could wait on it
        raise LoaderError(f"{e}; {fix(data_dir)}") from None
    except ImportError as e:
        missing = (e.name or "").split(".")[0]
        extra = EXTRAS.get(missing)
        if extra is None:  # a core dependency is broken, not an optional one missing
            raise LoaderError(
                f"the {name!r} loader cannot import {missing or e}: reinstall with pip install -e ."
            ) from None
        raise LoaderError(
            f"the {name!r} loader needs the {extra!r} extra ({missing} is not installed): pip install -e '.[{extra}]'"
        ) from None


__all__ = [
    "BACKENDS",
    "MIN_WORKERS",
    "NEEDS_FORMAT",
    "USES_PIN",
    "USES_WORKERS",
    "LoaderError",
    "backend_label",
    "build_loader",
]
