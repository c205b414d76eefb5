"""torch's and LitData's private parts are reached through one adapter module each (common.torch_private,
common.litdata_private), pinned to the versions setup.cfg names: the installed version lies in that range, which has
an upper end, and has every private name its adapter uses; no other module of the product reaches into them."""

from __future__ import annotations

import ast
import configparser
import importlib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("common", "dataprep", "loaders", "training", "bench")
ADAPTERS = {"torch": "common.torch_private", "litdata": "common.litdata_private"}
DATALOADER_INTERNALS = {"_iterator", "_shutdown_workers"}


def required(dist: str) -> Requirement:
    """The requirement on `dist` in setup.cfg, among install_requires and the extras."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    lines = cfg["options"]["install_requires"].splitlines() + [
        line for value in cfg["options.extras_require"].values() for line in value.splitlines()
    ]
    found = [Requirement(line) for line in lines if line.strip() and not line.strip().startswith(("#", "%"))]
    return next(r for r in found if r.name == dist)


@pytest.mark.parametrize("dist", sorted(ADAPTERS))
def test_the_installed_version_lies_in_the_range_setup_cfg_names(dist):
    """The installed torch/LitData is inside setup.cfg's range, and that range ends: a newer release is tried first."""
    spec = required(dist).specifier
    assert any(s.operator in ("<", "<=", "==", "~=") for s in spec), f"{dist}{spec}: no upper end"
    installed = Version(metadata.version(dist))
    assert spec.contains(installed, prereleases=True), f"{dist} {installed} is outside setup.cfg's {dist}{spec}"


@pytest.mark.parametrize("dist", sorted(ADAPTERS))
def test_every_private_name_an_adapter_uses_is_there(dist):
    """The installed library has each private name its adapter lists in USED."""
    adapter = importlib.import_module(ADAPTERS[dist])
    assert adapter.USED and adapter.missing() == []


def test_a_missing_name_is_found_missing():
    """The lookup above can fail: a name this torch does not have, at any depth, is reported."""
    from common.torch_private import missing

    absent = ("torch._no_such_kernel", "torch._dynamo.config.no_such_switch", "litdata_no_such_module.x")
    assert missing(absent + ("torch._foreach_add_",)) == list(absent)


def private_uses(source: str) -> list[str]:
    """What `source` reaches of torch's or LitData's private parts: a `torch._x` attribute or module, a LitData
    module below the top (its public API is `litdata.StreamingDataset` and the like), or a DataLoader's iterator."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            top, *rest = name.split(".")
            if (top == "torch" and any(part.startswith("_") for part in rest)) or (top == "litdata" and len(rest) > 1):
                found.append(f"{node.lineno} {name}")
        if isinstance(node, ast.Attribute):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            private = node.attr.startswith("_") and not node.attr.endswith("__")  # torch.__version__ is public
            torch_private = isinstance(base, ast.Name) and base.id == "torch" and private
            if torch_private or node.attr in DATALOADER_INTERNALS:
                found.append(f"{node.lineno} .{node.attr}")
    return sorted(set(found))


def test_no_module_but_the_adapters_reaches_into_private_parts():
    """Every private part of torch and LitData that the product uses goes through its adapter."""
    adapters = {f"{name.replace('.', '/')}.py" for name in ADAPTERS.values()}
    found = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if rel in adapters or rel.startswith("bench/studies/"):
                continue
            found += [f"{rel}:{use}" for use in private_uses(path.read_text())]
    assert not found, f"through common.torch_private or common.litdata_private: {found}"


def test_the_private_check_sees_each_form():
    """The check above finds a private torch name, module or import, a LitData internal and a DataLoader's iterator,
    and passes public names."""
    source = (
        "import torch._dynamo\nfrom torch._inductor import config\nx = torch._foreach_add_\n"
        "from litdata.streaming.writer import BinaryWriter\nloader._iterator._shutdown_workers()\n"
        "import torch.nn\nfrom litdata import StreamingDataset\ny = torch.compile\n"
    )
    assert [use.split()[0] for use in private_uses(source)] == ["1", "2", "3", "4", "5", "5"]
