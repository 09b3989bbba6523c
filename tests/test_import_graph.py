"""The import graph of ``corpora/`` and ``pipelines/``: no circle, and no private
name imported across modules. Every import counts, those inside functions too
(a function-level import that hides a circle is still a circle); only imports
under ``if TYPE_CHECKING:`` are left out, since they never run."""

from __future__ import annotations

import ast
import os

from tests.helpers import REPO

PACKAGES = ("corpora", "pipelines")


def _modules() -> dict[str, str]:
    """Every module of :data:`PACKAGES`, dotted name → file."""
    found = {}
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(REPO, package)):
            for name in files:
                if name.endswith(".py"):
                    relative = os.path.relpath(os.path.join(folder, name), REPO)[:-3]
                    dotted = relative.replace(os.sep, ".")
                    found[dotted.removesuffix(".__init__")] = os.path.join(folder, name)
    return found


def _type_checking_only(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def _imports(path: str, module: str, is_package: bool):
    """``(imported module, names taken from it)`` for every import in ``path``."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    skip = {
        id(child)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and _type_checking_only(node)
        for statement in node.body
        for child in ast.walk(statement)
    }
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                parts = parts if is_package else parts[:-1]
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            yield base, tuple(alias.name for alias in node.names)


def import_graph() -> dict[str, set[str]]:
    """Module → the modules of the packages it imports (``from p import m`` of
    a submodule ``m`` counts as importing ``p.m``)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for base, names in _imports(path, name, path.endswith("__init__.py")):
            for target in [f"{base}.{n}" for n in names if f"{base}.{n}" in modules] or [base]:
                if target in modules and target != name:
                    graph[name].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan).

    >>> circles({"a": {"b"}, "b": {"a"}, "c": {"a"}})
    [['a', 'b']]
    >>> circles({"a": {"b"}, "b": set()})
    []
    """
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for after in sorted(graph.get(node, ())):
            if after not in index:
                visit(after)
                low[node] = min(low[node], low[after])
            elif after in on_stack:
                low[node] = min(low[node], index[after])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_import_circle():
    assert circles(import_graph()) == []


def test_no_private_name_is_imported_from_another_module():
    modules = _modules()
    private = []
    for name, path in modules.items():
        for base, names in _imports(path, name, path.endswith("__init__.py")):
            if base.split(".")[0] in PACKAGES:
                private += [
                    f"{name}: {base}.{n}"
                    for n in names
                    if n.startswith("_") and not n.endswith("__")  # __version__ is public
                ]
    assert private == []


def test_corpora_has_at_most_eight_top_level_modules():
    top = [n for n in os.listdir(os.path.join(REPO, "corpora")) if n.endswith(".py")]
    assert len(top) <= 8, sorted(top)
