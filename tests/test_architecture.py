"""The top-level packages import each other without a cycle (every import statement counts, the lazy ones inside
functions too), and every module states its job in its opening docstring."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("dataprep", "loaders", "training", "bench")


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


@pytest.mark.parametrize("pkg", PACKAGES)
def test_every_module_states_its_job(pkg):
    missing = [str(p.relative_to(ROOT)) for p in sorted((ROOT / pkg).rglob("*.py"))
               if not ast.get_docstring(ast.parse(p.read_text()))]  # fmt: skip
    assert not missing, f"modules without an opening docstring: {missing}"
