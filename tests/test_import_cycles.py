"""No two tubeless modules import each other at run time, except the few deliberate pairs below.

The graph holds every import that runs (at module level or inside a function), not those under
``if TYPE_CHECKING:``, which only feed annotations; ``from package import name`` counts as an
import of the module the package took ``name`` from. A cycle through a function-level import
is still a cycle: it works only because one side imports late, and a reader must know which.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tubeless"

#: The cycles that stay, each closed by an import deferred so a heavy library loads late.
ACCEPTED = {
    # schema loads jsonschema (and its messages) only when a JSON Schema is first checked.
    frozenset({"tubeless.schema", "tubeless._jsonschema_messages"}),
    # the checkpoint document and its parser: one model split over two files.
    frozenset({"tubeless.durable._document", "tubeless.durable._document_parse"}),
    # the project and cases metaschemas load pydantic's models only when first asked for.
    frozenset(
        {"tubeless.project._project", "tubeless.project.cases", "tubeless.project.metaschema"}
    ),
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _run_time_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    typing_only = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(sub) for sub in ast.walk(node))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in typing_only:
            yield node


def _base(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    parts = parts[: len(parts) - node.level + 1]
    return ".".join([*parts, *([node.module] if node.module else [])])


@cache
def _graph() -> dict[str, set[str]]:
    modules = _modules()
    trees = {name: ast.parse(path.read_text(encoding="utf-8")) for name, path in modules.items()}
    # Where a package's __init__ took each name it re-exports from.
    homes: dict[tuple[str, str], str] = {}
    for name, path in modules.items():
        if path.name == "__init__.py":
            for node in _run_time_imports(trees[name]):
                if isinstance(node, ast.ImportFrom):
                    for alias in node.names:
                        homes[name, alias.asname or alias.name] = _base(name, path, node)
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        for node in _run_time_imports(trees[name]):
            if isinstance(node, ast.Import):
                edges[name].update(a.name for a in node.names if a.name in modules)
                continue
            base = _base(name, path, node)
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target not in modules:
                    target = base
                    while (target, alias.name) in homes and target != name:
                        target = homes[target, alias.name]
                if target in modules and target != name:
                    edges[name].add(target)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(edges.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_but_the_accepted_ones() -> None:
    cycles = _cycles(_graph())
    unexpected = [sorted(cycle) for cycle in cycles if cycle not in ACCEPTED]
    assert unexpected == [], (
        "modules that import each other at run time: move what both need into a leaf module"
    )


def test_the_graph_sees_function_level_imports() -> None:
    """The check would pass vacuously if deferred imports were missed: one is known."""
    assert "tubeless._jsonschema_messages" in _graph()["tubeless.schema"]
