"""Import circles inside each package, counted (issue 37): a module in a circle cannot be read, imported or tested
alone, and any new import among its members can break the import order. The count may only go down.

A circle is a strongly connected component of a package's module graph as import-linter's grimp builds it (every
import statement, including those inside functions and under TYPE_CHECKING). `CEILING` states, per package, how
many of its modules may sit in circles today; lower a number when a refactor breaks a circle. A subpackage (such as
tg_tensor.engine) has an entry of its own, counted over its modules only.
"""

from __future__ import annotations

from typing import Any

import pytest

grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter (the dev dependency group)")

CEILING = {
    "tg_uop": 9,
    "tg_shape": 2,
    "tg_codegen": 8,
    "tg_runtime": 2,
    "tg_tensor": 26,  # the front end (Tensor and its op mixins import each other); was 36 before the engine split
    "tg_tensor.engine": 0,  # realization and scheduling: no circle (the pyproject layers contract keeps it below)
    "tg_nn": 2,
    "tg": 0,
    "tg_viz": 0,
    "tg_llm": 0,
}


def circles(graph: Any, package: str) -> list[list[str]]:
    """The circles (strongly connected components of two modules or more) among `package`'s modules (Tarjan)."""
    modules = sorted(m for m in graph.modules if m == package or m.startswith(package + "."))
    inside = set(modules)
    edges = {m: [d for d in graph.find_modules_directly_imported_by(m) if d in inside] for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for start in modules:  # (iterative: no recursion limit to meet)
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = len(index)
                stack.append(v)
            if i < len(edges[v]):
                work.append((v, i + 1))
                w = edges[v][i]
                if w not in index:
                    work.append((w, 0))
                elif w in stack:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                comp = stack[stack.index(v) :]
                del stack[stack.index(v) :]
                if len(comp) > 1:
                    found.append(sorted(comp))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return found


def test_import_circles_stay_under_their_ceiling() -> None:
    graph = grimp.build_graph(*sorted({p.split(".")[0] for p in CEILING}))
    over = {}
    for package, ceiling in CEILING.items():
        n = sum(len(c) for c in circles(graph, package))
        if n > ceiling:
            over[package] = (n, ceiling, circles(graph, package))
    assert not over, f"modules in import circles above the stated ceiling (count, ceiling, circles): {over}"


def test_circle_counting() -> None:
    class Graph:
        modules = {"p", "p.a", "p.b", "p.c", "p.d"}
        deps = {"p.a": {"p.b"}, "p.b": {"p.c", "q"}, "p.c": {"p.a"}, "p.d": {"p.a"}, "p": set()}

        def find_modules_directly_imported_by(self, m: str) -> set[str]:
            return self.deps[m]

    assert circles(Graph(), "p") == [["p.a", "p.b", "p.c"]]
