"""The JSON the viewer's page reads, built from a `tg_uop.trace.Trace`.

Rows (`kernels`): one per kernel, and one per distinct schedule, a schedule repeated by a loop collapsed
into its first row with a count. A group's steps (`group`) are its passes; a pass's rule firings are
grouped when identical (same rule, same node before and after) and each group is a step of its own
(`fire`): the node before and after as a graph with what the rule made highlighted, a unified diff of
their text, and the rule's source.

>>> from tg_uop.trace import Trace
>>> kernels(Trace())
[]
"""

from __future__ import annotations

import difflib
import linecache
from typing import Any

from tg_uop.dot import graph_data
from tg_uop.trace import Group, RuleFire, Step, Trace
from tg_uop.uop import UOp, pretty

MAX_DIFF_LINES = 400  # of each side's text: a lowered kernel prints thousands
MAX_SOURCE_LINES = 30


def _label(u: UOp) -> str:
    arg = "" if u.arg is None else f" {u.arg!r}"[:60]
    return f"{u.op.name} {u.dtype!r}{arg}"


def _node_key(n: dict[str, Any]) -> tuple[Any, ...]:
    # a buffer's number differs between two runs of the same schedule: its op, dtype and place in the graph do not
    return (n["op"], n["dtype"], tuple(n["src"]), "" if n["op"] == "BUFFER" else n["arg"])


def _schedule_key(g: Group) -> tuple[Any, ...]:
    """What makes two schedules the same for the list: their kernel count and their graphs (buffers aside)."""
    shape = tuple(
        tuple(_node_key(n) for n in s.graph_data["nodes"]) if s.graph_data is not None else s.name for s in g.steps
    )
    return (g.kind, g.name.split(":", 1)[-1], shape)


def kernels(trace: Trace) -> list[dict[str, Any]]:
    """One row per kernel and per distinct schedule (in the order they were made); repeats add to `count`."""
    rows: list[dict[str, Any]] = []
    first: dict[tuple[Any, ...], dict[str, Any]] = {}
    for i, g in enumerate(trace.groups):
        if g.kind != "kernel" and g.error is None:
            key = _schedule_key(g)
            if (row := first.get(key)) is not None:
                row["count"] += 1
                continue
        row = {
            "id": i,
            "kind": g.kind,
            "name": g.name,
            "device": g.meta.get("device", ""),
            "shape": g.meta.get("shape", []),
            "launches": g.meta.get("launches", 0),
            "time_us": round(g.meta.get("time_us", 0.0), 3),
            "steps": len(g.steps),
            "error": g.error,
            "count": 1,
            "ops": g.meta.get("ops", []),
            "tensor_ops": g.meta.get("tensor_ops", []),
            "lines": g.meta.get("lines", []),
        }
        if g.kind != "kernel" and g.error is None:
            first[key] = row
        rows.append(row)
    return rows


def info(trace: Trace) -> dict[str, Any]:
    """What the page's banner says: how the program ended, whether recording stopped early."""
    return {
        "groups": len(trace.groups),
        "events": len(trace.events),
        "error": trace.program_error,
        "overflow": trace.overflow,
    }


def _grouped(rules: list[RuleFire]) -> list[tuple[RuleFire, list[int]]]:
    """Identical firings (same rule at the same place, same node before and after) as one, with their indexes."""
    seen: dict[tuple[Any, ...], tuple[RuleFire, list[int]]] = {}
    for i, r in enumerate(rules):
        key = (r.pattern, r.location, r.before, r.after)
        if key in seen:
            seen[key][1].append(i)
        else:
            seen[key] = (r, [i])
    return list(seen.values())


def _nodes(s: Step) -> int:
    if s.graph is not None:
        return len(s.graph.toposort)
    return len(s.graph_data["nodes"]) if s.graph_data else 0


def _step_summary(i: int, s: Step) -> dict[str, Any]:
    fires = _grouped(s.rules) if s.rules else []
    return {
        "index": i,
        "name": s.name,
        "kind": s.kind,
        "rules": len(s.rules),
        "ms": round(s.seconds * 1e3, 3),
        "nodes": _nodes(s),
        "fires": [{"pattern": r.pattern, "location": r.location, "count": len(ix)} for r, ix in fires[:2000]],
    }


def group(trace: Trace, gid: int) -> dict[str, Any] | None:
    """A group's facts and the summary of each step (pass), or None when there is no such group."""
    if not 0 <= gid < len(trace.groups):
        return None
    g: Group = trace.groups[gid]
    meta = {k: v for k, v in g.meta.items() if isinstance(v, (str, int, float, list, bool))}
    return {
        "id": gid,
        "kind": g.kind,
        "name": g.name,
        "meta": meta,
        "error": g.error,
        "steps": [_step_summary(i, s) for i, s in enumerate(g.steps)],
    }


def _text(u: UOp | None) -> list[str]:
    if u is None:
        return []
    lines = pretty(u).splitlines()
    return lines if len(lines) <= MAX_DIFF_LINES else [*lines[:MAX_DIFF_LINES], f"... ({len(lines)} lines)"]


def unified_diff(before: UOp | None, after: UOp | None) -> str:
    """The unified diff of two UOps' printed text (each cut at MAX_DIFF_LINES lines)."""
    return "\n".join(difflib.unified_diff(_text(before), _text(after), "before", "after", lineterm="", n=2))


def _step_graph(s: Step) -> dict[str, Any] | None:
    if s.graph is None:
        return s.graph_data
    old = set(s.before.toposort) if s.before is not None else None
    return graph_data(s.graph, old=old)


def step(trace: Trace, gid: int, index: int) -> dict[str, Any] | None:
    """One step in full: its graph (what it changed marked), the rules that fired, its diff and text."""
    if not 0 <= gid < len(trace.groups) or not 0 <= index < len(trace.groups[gid].steps):
        return None
    s = trace.groups[gid].steps[index]
    return {
        **_step_summary(index, s),
        "graph": _step_graph(s),
        "before_nodes": len(s.before.toposort) if s.before is not None else 0,
        "rules_fired": [
            {"pattern": r.pattern, "location": r.location, "before": _label(r.before), "after": _label(r.after)}
            for r in s.rules[:2000]
        ],
        "diff": unified_diff(s.before, s.graph) if s.kind == "rewrite" else "",
        "text": s.text,
    }


def rule_source(r: RuleFire) -> str:
    """The rule's function with line numbers, from its file:line (a lambda: with the pattern on the lines just
    above it), or '' when the file is not readable."""
    _, _, line = r.location.rpartition(":")
    if not r.path or not line.isdigit():
        return ""
    start = int(line)
    first = linecache.getline(r.path, start)
    if not first:
        return ""
    top = start
    if first.lstrip().startswith("lambda"):  # the pattern it belongs to starts a few lines up: `(UPat(...),`
        while top > max(1, start - 4) and not linecache.getline(r.path, top).lstrip().startswith("("):
            top -= 1
    indent = len(first) - len(first.lstrip())
    numbered = [(n, linecache.getline(r.path, n).rstrip()) for n in range(top, start + 1)]
    for n in range(start + 1, start + MAX_SOURCE_LINES):  # the body: lines indented deeper than its first
        text = linecache.getline(r.path, n).rstrip()
        if text and len(text) - len(text.lstrip()) <= indent:
            break
        numbered.append((n, text))
    while numbered and not numbered[-1][1]:
        numbered.pop()
    return "\n".join(f"{n:5d}{'>' if n == start else ' '} {text}" for n, text in numbered)


def fire(trace: Trace, gid: int, index: int, k: int) -> dict[str, Any] | None:
    """The k-th (grouped) rule firing of a step: the node after it as a graph with what the rule made marked,
    the diff of the node's text before and after, and the rule's source."""
    if not 0 <= gid < len(trace.groups) or not 0 <= index < len(trace.groups[gid].steps):
        return None
    fires = _grouped(trace.groups[gid].steps[index].rules)
    if not 0 <= k < len(fires):
        return None
    r, ix = fires[k]
    return {
        "index": index,
        "k": k,
        "pattern": r.pattern,
        "location": r.location,
        "count": len(ix),
        "before": _label(r.before),
        "after": _label(r.after),
        "graph": graph_data(r.after, old=set(r.before.toposort)),
        "diff": unified_diff(r.before, r.after),
        "source": rule_source(r),
    }
