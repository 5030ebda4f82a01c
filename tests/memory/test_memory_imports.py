"""The memory package has no import circle (issue 17): no module imports another inside a function, and the
graph of its imports (``TYPE_CHECKING`` ones included) has no cycle. Read from the source, as a newcomer reads it."""

from __future__ import annotations

import ast
from pathlib import Path

import quinn.memory

PACKAGE = Path(quinn.memory.__file__).parent


def imports(tree: ast.Module) -> list[tuple[str, bool]]:
    """(module imported, whether the import sits inside a function) for every quinn import of a module."""
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.ImportFrom) and (child.module or "").startswith("quinn"):
                found.append((child.module or "", inside))
            elif isinstance(child, ast.Import):
                found.extend((a.name, inside) for a in child.names if a.name.startswith("quinn"))
            visit(child, inside)

    visit(tree, False)
    return found


def test_the_memory_package_has_no_import_circle() -> None:
    graph: dict[str, set[str]] = {}
    in_functions = []
    for path in sorted(PACKAGE.glob("*.py")):
        name = f"quinn.memory.{path.stem}"
        for module, inside in imports(ast.parse(path.read_text(encoding="utf-8"))):
            if inside:
                in_functions.append(f"{name} imports {module} in a function")
            if module.startswith("quinn.memory.") and path.stem != "__init__":
                graph.setdefault(name, set()).add(module)
    assert in_functions == []

    def cycle_from(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        for nxt in sorted(graph.get(node, ())):
            found = cycle_from(nxt, [*path, node])
            if found:
                return found
        return None

    cycles = [c for c in (cycle_from(n, []) for n in sorted(graph)) if c]
    assert cycles == []
