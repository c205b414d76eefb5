"""The top-level packages import each other without a cycle, and so do the modules inside each package and the rooms
of bench (every import statement counts, the lazy ones inside functions too, relative ones resolved); the product
imports none of the studies, and the wheel holds none; every module states its job in its opening docstring."""

from __future__ import annotations

import ast
import configparser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("common", "dataprep", "loaders", "training", "bench")


def imports_between_packages(root: Path = ROOT, packages=PACKAGES) -> dict[tuple[str, str], list[str]]:
    """(importer, imported) -> ["file:line", ...] for every import of one top-level package by another."""
    edges: dict[tuple[str, str], list[str]] = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:  # relative imports stay inside their package
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top in packages and top != pkg:
                        edges.setdefault((pkg, top), []).append(f"{path.relative_to(root)}:{node.lineno}")
    return edges


def find_cycle(edges) -> list[str] | None:
    """A cycle in the package graph as [a, b, ..., a], or None."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt] if nxt in path else [node, nxt]
            if nxt not in state and (found := visit(nxt, path + [nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_top_level_packages_import_each_other_without_a_cycle():
    edges = imports_between_packages()
    cycle = find_cycle(edges)
    if cycle:
        where = "; ".join(f"{a} -> {b} at {', '.join(edges[(a, b)][:3])}" for a, b in zip(cycle, cycle[1:]))
        pytest.fail(f"import cycle {' -> '.join(cycle)}: {where}")
    # the layering it leaves: data preparation at the bottom, bench (which runs training loops) on top
    assert ("training", "bench") not in edges and ("loaders", "training") not in edges


def test_the_cycle_check_sees_lazy_imports(tmp_path):
    """A function-level import closing a loop is found, so the check above can fail."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "x.py").write_text("import b.y\n")
    (tmp_path / "b" / "y.py").write_text("def f():\n    from a.x import g\n    from . import z\n")
    edges = imports_between_packages(tmp_path, ("a", "b"))
    assert edges == {("a", "b"): ["a/x.py:1"], ("b", "a"): ["b/y.py:2"]}
    assert find_cycle(edges) in (["a", "b", "a"], ["b", "a", "b"])
    assert find_cycle({("a", "b"): [], ("b", "c"): []}) is None


def module_names(root: Path = ROOT, packages=PACKAGES) -> dict[str, Path]:
    """Dotted name -> file of every module of the packages (a package by its __init__.py)."""
    out = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imported_modules(name: str, path: Path, known) -> list[tuple[str, int]]:
    """(module, line) for every import statement in the module `name`: relative ones resolved, `from p import x`
    taken as the module p.x where there is one, else p; names outside `known` are left out."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in known else module for a in node.names]
        else:
            continue
        for target in targets:
            parts = target.split(".")
            while parts and ".".join(parts) not in known:  # `import a.b.c` of a name inside a module: the module
                parts.pop()
            if parts:
                out.append((".".join(parts), node.lineno))
    return out


def imports_between_modules(root: Path = ROOT, packages=PACKAGES) -> dict[tuple[str, str], list[str]]:
    """(importer, imported) -> ["file:line", ...] for every import of one module by another of the same package."""
    known = module_names(root, packages)
    edges: dict[tuple[str, str], list[str]] = {}
    for name, path in known.items():
        for target, line in imported_modules(name, path, known):
            if target != name and target.split(".")[0] == name.split(".")[0]:
                edges.setdefault((name, target), []).append(f"{path.relative_to(root)}:{line}")
    return edges


def _fail_on_cycle(edges, what: str) -> None:
    cycle = find_cycle(edges)
    if cycle:
        where = "; ".join(f"{a} -> {b} at {', '.join(edges[(a, b)][:3])}" for a, b in zip(cycle, cycle[1:]))
        pytest.fail(f"{what} import cycle {' -> '.join(cycle)}: {where}")


def test_no_module_imports_one_that_imports_it():
    """Inside each package no module imports, however indirectly, a module that imports it back."""
    _fail_on_cycle(imports_between_modules(), "module")


def rooms(edges, package: str = "bench") -> dict[tuple[str, str], list[str]]:
    """The module edges between the subpackages (rooms) of `package`; its own top-level modules are left out."""
    out: dict[tuple[str, str], list[str]] = {}
    for (a, b), where in edges.items():
        ra, rb = a.split(".")[:2], b.split(".")[:2]
        if ra[0] == rb[0] == package and len(ra) == len(rb) == 2 and ra != rb and f"{package}.{ra[1]}" != a:
            out.setdefault((ra[1], rb[1]), []).extend(where)
    return out


def test_the_rooms_of_bench_import_each_other_without_a_cycle():
    """bench's rooms are layered: records at the bottom, then grid, fastest, report; watch and soak on grid."""
    edges = rooms(imports_between_modules())
    _fail_on_cycle(edges, "room")
    assert not any(a == "records" for a, _ in edges), "records imports nothing of the other rooms"


def test_the_cycle_check_sees_lazy_relative_imports_inside_a_package(tmp_path):
    """A function-level relative import closing a loop between two modules of one package is found, as is a longer
    loop through a subpackage; `from . import name` is the package's own __init__ unless a module has that name."""
    pkg = tmp_path / "p"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("ERROR = ValueError\n")
    (pkg / "a.py").write_text("from .b import f\n")
    (pkg / "b.py").write_text("def f():\n    from . import a, ERROR\n")
    (pkg / "c.py").write_text("import p.sub.d\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "d.py").write_text("def g():\n    from ..c import h\n")
    edges = imports_between_modules(tmp_path, ("p",))
    assert edges == {
        ("p.a", "p.b"): ["p/a.py:1"],
        ("p.b", "p.a"): ["p/b.py:2"],
        ("p.b", "p"): ["p/b.py:2"],
        ("p.c", "p.sub.d"): ["p/c.py:1"],
        ("p.sub.d", "p.c"): ["p/sub/d.py:2"],
    }
    assert find_cycle(edges) in (["p.a", "p.b", "p.a"], ["p.b", "p.a", "p.b"])
    del edges[("p.b", "p.a")]
    assert find_cycle(edges) in (["p.c", "p.sub.d", "p.c"], ["p.sub.d", "p.c", "p.sub.d"])
    del edges[("p.sub.d", "p.c")]
    assert find_cycle(edges) is None
    assert rooms(
        {("bench.x.a", "bench.y.b"): ["1"], ("bench.y.c", "bench.x"): ["2"], ("bench.cli", "bench.x.a"): []}
    ) == {("x", "y"): ["1"], ("y", "x"): ["2"]}


def study_imports(root: Path = ROOT, packages=PACKAGES, studies: str = "bench.studies") -> list[str]:
    """file:line of every import of a study module by a module outside the studies."""
    known = module_names(root, packages)
    inside = lambda name: name == studies or name.startswith(f"{studies}.")  # noqa: E731
    return [
        f"{path.relative_to(root)}:{line}"
        for name, path in known.items()
        if not inside(name)
        for target, line in imported_modules(name, path, known)
        if inside(target)
    ]


def test_the_product_imports_no_study():
    """Nothing that pip installs imports bench/studies/: the studies use the product, never the other way round."""
    assert study_imports() == []


def test_the_study_check_sees_relative_and_lazy_imports(tmp_path):
    """An absolute, a relative and a function-level import of a study are each found; a study importing the product
    is not."""
    (tmp_path / "bench" / "studies").mkdir(parents=True)
    (tmp_path / "bench" / "grid").mkdir()
    for init in ("bench/__init__.py", "bench/studies/__init__.py", "bench/grid/__init__.py"):
        (tmp_path / init).write_text("")
    (tmp_path / "bench" / "studies" / "plan.py").write_text("from ..grid import run\n")
    (tmp_path / "bench" / "grid" / "run.py").write_text("import bench.studies.plan\n")
    (tmp_path / "bench" / "cli.py").write_text("def f():\n    from .studies import plan\n    from . import studies\n")
    assert study_imports(tmp_path, ("bench",)) == ["bench/cli.py:2", "bench/cli.py:3", "bench/grid/run.py:1"]


def test_the_wheel_holds_the_product_and_no_study():
    """setup.cfg's package list finds every package of the product and none of the studies (nor the results, which
    are not a package), and ships the file `bench watch` puts on the watched program's path."""
    from setuptools import find_packages

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    find = {k: cfg["options.packages.find"][k].split() for k in ("include", "exclude")}
    shipped = set(find_packages(str(ROOT), **find))
    product = {n for n, p in module_names().items() if p.name == "__init__.py" and not n.startswith("bench.studies")}
    assert shipped == product and "bench.watcher.boot" in shipped  # sitecustomize.py ships as its module


@pytest.mark.slow
def test_an_editable_install_prints_no_warning_page(tmp_path):
    """setuptools' editable build of a copy of the checkout (what `pip install -e .` runs) warns about nothing: its
    BuildBackendWarning pages about the flat layout and the boot folder filled 40 lines of `make setup`. The wheel
    puts the checkout on sys.path."""
    import shutil
    import subprocess
    import sys
    import zipfile

    src = tmp_path / "src"
    skip = shutil.ignore_patterns("results", "studies", "__pycache__", "*.egg-info")
    for name in (*PACKAGES, "setup.cfg", "pyproject.toml", "README.md"):
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        copy(ROOT / name, src / name, **({"ignore": skip} if (ROOT / name).is_dir() else {}))
    code = "import setuptools.build_meta as b, sys; print(b.build_editable(sys.argv[1]))"
    done = subprocess.run(
        [sys.executable, "-W", "always", "-c", code, str(tmp_path / "wheel")], cwd=src, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr, done.stderr
    with zipfile.ZipFile(tmp_path / "wheel" / done.stdout.strip().splitlines()[-1]) as wheel:
        (pth,) = [n for n in wheel.namelist() if n.endswith(".pth")]
        assert wheel.read(pth).decode().strip() == str(src)


@pytest.mark.parametrize("pkg", PACKAGES)
def test_every_module_states_its_job(pkg):
    missing = [
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / pkg).rglob("*.py"))
        if not ast.get_docstring(ast.parse(p.read_text()))
    ]
    assert not missing, f"modules without an opening docstring: {missing}"
