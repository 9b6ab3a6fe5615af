"""The JSON the viewer's page reads, built from a `tg_uop.trace.Trace`.

>>> from tg_uop.trace import Trace
>>> kernels(Trace())
[]
"""

from __future__ import annotations

from typing import Any

from tg_uop.dot import graph_data
from tg_uop.trace import Group, Step, Trace
from tg_uop.uop import UOp


def _label(u: UOp) -> str:
    arg = "" if u.arg is None else f" {u.arg!r}"[:60]
    return f"{u.op.name} {u.dtype!r}{arg}"


def kernels(trace: Trace) -> list[dict[str, Any]]:
    """One row per group (schedules and kernels, in the order they were made)."""
    rows = []
    for i, g in enumerate(trace.groups):
        rows.append(
            {
                "id": i,
                "kind": g.kind,
                "name": g.name,
                "device": g.meta.get("device", ""),
                "shape": g.meta.get("shape", []),
                "launches": g.meta.get("launches", 0),
                "time_us": round(g.meta.get("time_us", 0.0), 3),
                "steps": len(g.steps),
                "error": g.error,
            }
        )
    return rows


def _step_summary(i: int, s: Step) -> dict[str, Any]:
    return {
        "index": i,
        "name": s.name,
        "kind": s.kind,
        "rules": len(s.rules),
        "ms": round(s.seconds * 1e3, 3),
        "nodes": len(s.graph.toposort) if s.graph is not None else len(s.graph_data["nodes"]) if s.graph_data else 0,
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


def step(trace: Trace, gid: int, index: int) -> dict[str, Any] | None:
    """One step in full: its graph (nodes and edges), the rules that fired, its text."""
    if not 0 <= gid < len(trace.groups) or not 0 <= index < len(trace.groups[gid].steps):
        return None
    s = trace.groups[gid].steps[index]
    return {
        **_step_summary(index, s),
        "graph": graph_data(s.graph) if s.graph is not None else s.graph_data,
        "before_nodes": len(s.before.toposort) if s.before is not None else 0,
        "rules_fired": [
            {"pattern": r.pattern, "location": r.location, "before": _label(r.before), "after": _label(r.after)}
            for r in s.rules[:2000]
        ],
        "text": s.text,
    }
