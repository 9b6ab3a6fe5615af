"""tg_codegen's modules import each other without circles where it matters: none through the tensor-core subpackage
(tg_codegen.tc), and no more than the one known elsewhere (program <-> search: get_program's BEAM, imported lazily).
Imports under TYPE_CHECKING (annotations only) are left out: they run no code."""

from __future__ import annotations

import pytest

grimp = pytest.importorskip("grimp", reason="grimp (import-linter's graph) is a dev dependency")

KNOWN = [["tg_codegen.program", "tg_codegen.search"]]


def import_circles(package: str) -> list[list[str]]:
    """The strongly connected components of more than one module in `package`'s import graph (Tarjan)."""
    graph = grimp.build_graph(package, exclude_type_checking_imports=True)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = stack[stack.index(v) :]
            del stack[stack.index(v) :]
            if len(part) > 1:
                circles.append(sorted(part))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return circles


def test_no_new_import_circles_in_codegen() -> None:
    circles = import_circles("tg_codegen")
    assert not [c for c in circles if any(m.startswith("tg_codegen.tc.") for m in c)], circles
    assert sorted(circles) == KNOWN
