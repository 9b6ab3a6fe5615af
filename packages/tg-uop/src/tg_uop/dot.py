"""UOp graphs as plain data (nodes and edges) and as Graphviz DOT.

Movement ops (RESHAPE, PERMUTE, EXPAND, PAD, SHRINK, FLIP) and VIEWs can be folded into the edge they
sit on, as tinygrad's talk draws a lazy graph: a conv is then two buffers, views on the edges, a MUL
and a SUM. Buffers are drawn as boxes, constants as plain text, compute as ellipses.

>>> from tg_uop import UOp, dtypes
>>> from tg_uop.dot import graph_data, to_dot
>>> g = graph_data(UOp.const(dtypes.float, 1.0) + 2.0)
>>> [n["op"] for n in g["nodes"]]
['CONST', 'CONST', 'ADD']
>>> to_dot(UOp.const(dtypes.float, 1.0) + 2.0).startswith("digraph")
True
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from typing import Any

from tg_uop.ops import GroupOp, Ops
from tg_uop.uop import UOp

_FOLDED = GroupOp.Movement | {Ops.VIEW}
_HIDDEN = {Ops.DEVICE}
MAX_NODES = 3000


def _short(x: Any, n: int = 80) -> str:
    s = repr(x) if not isinstance(x, str) else x
    return s if len(s) <= n else s[: n - 3] + "..."


def view_lines(st: Any) -> list[str]:
    """A shape tracker (anything with `.views` of shape, strides, offset, mask) as short lines, one fact a line.

    >>> from types import SimpleNamespace as NS
    >>> view_lines(NS(views=(NS(shape=(2, 3), strides=(3, 1), offset=0, mask=None),)))
    ['shape (2, 3)', 'strides (3, 1)']
    """
    views = getattr(st, "views", None)
    if not views:
        return [_short(st)]
    lines: list[str] = []
    for i, v in enumerate(views):
        if len(views) > 1:
            lines.append(f"view {i}:")
        lines += [f"shape {_dims(v.shape)}", f"strides {_dims(v.strides)}"]
        if getattr(v, "offset", 0):
            lines.append(f"offset {v.offset}")
        if getattr(v, "mask", None) is not None:
            lines.append(f"mask {_dims(v.mask)}")
    return lines


def _dims(t: Any) -> str:
    return _short(tuple(t), 70) if isinstance(t, (tuple, list)) else _short(t, 70)


def _arg_text(u: UOp) -> str:
    if u.op is Ops.VIEW:
        return "\n".join(view_lines(u.arg))
    return "" if u.arg is None else _short(u.arg)


def graph_data(
    root: UOp, fold_movement: bool = False, max_nodes: int = MAX_NODES, old: set[UOp] | None = None
) -> dict[str, Any]:
    """The graph under `root` as {"nodes": [...], "edges": [...], "truncated": bool}.

    A node is {"id", "op", "dtype", "arg", "src": [ids], "label"} (and "changed": true when `old` is given
    and the node is not in it: what a rewrite made); an edge is {"src", "dst", "label"} from a source to its
    user (views: the folded movement ops on it; label: them, or a summary when long).
    """
    order = root.toposort
    ids: dict[UOp, int] = {}
    nodes: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []

    def through(u: UOp) -> tuple[UOp, list[str], str]:
        # follow a chain of folded views down to the node that produces the data
        views: list[str] = []
        top = u
        while fold_movement and u.op in _FOLDED and u.src and u.src[0].op is not Ops.DEVICE:
            views.append(f"{u.op.name} {_short(u.arg, 40)}" if u.op is not Ops.VIEW else "VIEW")
            u = u.src[0]
        if len(views) <= 3:
            return u, views[::-1], "\n".join(views[::-1])
        shape = top.shape
        return u, views[::-1], f"view: {len(views)} movement ops\n-> {tuple(shape) if shape is not None else '?'}"

    truncated = False
    for u in order:
        if u.op in _HIDDEN or (fold_movement and u.op in _FOLDED and u is not root):
            continue
        if len(nodes) >= max_nodes:
            truncated = True
            break
        ids[u] = len(nodes)
        srcs: list[int] = []
        for s in u.src:
            base, views, short = through(s)
            if base in ids:
                srcs.append(ids[base])
                edges.append({"src": ids[base], "dst": ids[u], "label": short, "views": views})
        label = u.op.name
        if u.op is Ops.BUFFER:
            dev = next((s.arg for s in u.src if s.op is Ops.DEVICE), "")
            label = f"BUFFER {u.arg}\n{u.dtype.name} {dev}".rstrip()
        elif u.op is Ops.CONST:
            label = f"{u.arg!r} {u.dtype.name}"
        elif u.arg is not None:
            label = f"{u.op.name}\n{_arg_text(u)}"
        node = {"id": ids[u], "op": u.op.name, "dtype": repr(u.dtype), "arg": _arg_text(u), "src": srcs, "label": label}
        if old is not None and u not in old:
            node["changed"] = True
        nodes.append(node)
    return {"nodes": nodes, "edges": edges, "truncated": truncated}


_SHAPES = {"BUFFER": "box", "CONST": "plaintext", "SINK": "doublecircle", "DEFINE_GLOBAL": "box"}


def to_dot(root: UOp, fold_movement: bool = True, title: str = "") -> str:
    """The graph under `root` in Graphviz DOT (movement ops folded into edges unless told otherwise)."""
    g = graph_data(root, fold_movement)
    lines = ["digraph tg {", "  rankdir=LR;", '  node [fontname="monospace" fontsize=10];']
    if title:
        lines.append(f"  label={_quote(title)}; labelloc=t;")
    for n in g["nodes"]:
        shape = _SHAPES.get(n["op"], "ellipse")
        lines.append(f"  n{n['id']} [label={_quote(n['label'])} shape={shape}];")
    for e in g["edges"]:
        attrs = f" [label={_quote(e['label'])} style=dashed]" if e["label"] else ""
        lines.append(f"  n{e['src']} -> n{e['dst']}{attrs};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def write_dot(dot: str, path: str, render: bool = True) -> list[str]:
    """Write `dot` to `path` (with `render`: an SVG beside it when Graphviz's `dot` is installed); return the paths."""
    with open(path, "w") as f:
        f.write(dot)
    return [path, *render_dots([path])] if render else [path]


def render_dots(paths: list[str]) -> list[str]:
    """Render DOT files to SVGs beside them (`a.dot` -> `a.svg`) with one run of Graphviz's `dot` per 200 files;
    returns the SVGs written ([] when `dot` is not installed or fails)."""
    exe = shutil.which("dot")
    if exe is None or not paths:
        return []
    written: list[str] = []
    for i in range(0, len(paths), 200):
        chunk = paths[i : i + 200]
        try:  # -O: each input's output beside it, named input.svg
            subprocess.run([exe, "-Tsvg", "-O", *chunk], check=True, capture_output=True, timeout=600)
        except (subprocess.SubprocessError, OSError):
            continue
        for p in chunk:
            svg = p.rsplit(".", 1)[0] + ".svg"
            with contextlib.suppress(OSError):
                os.replace(p + ".svg", svg)
                written.append(svg)
    return written
