"""What a realize shows when asked: the lazy graph for GRAPH=1, each kernel's AST for GRAPH=2, the
schedule for VIZ=1 and its time for PROFILE=1.

>>> from tg_tensor.visibility import graph_dir
>>> graph_dir().endswith("tg_graph")
True
"""

from __future__ import annotations

import atexit
import os
import sys
import tempfile
import time
from collections.abc import Sequence

from tg_tensor.engine.provenance import LIBRARY, OURS
from tg_tensor.engine.realizer import current
from tg_tensor.front import front
from tg_uop import GroupOp, Ops, UOp, dtypes
from tg_uop.helpers import DEBUG
from tg_uop.trace import GRAPH, TRACE


def graph_dir() -> str:
    """Where GRAPH=1 writes its files: $GRAPH_DIR, else tg_graph in the temp directory (a folder per run inside)."""
    return os.environ.get("GRAPH_DIR") or os.path.join(tempfile.gettempdir(), "tg_graph")


def run_dir() -> str:
    """This run's GRAPH folder, made on first use: `run_<date>_<time>_<pid>` in graph_dir(), so files of earlier
    runs never mix with this one's; the DOT files are rendered to SVG once, when the program ends."""
    run = front().graph_files
    if not run:
        d = os.path.join(graph_dir(), f"run_{time.strftime('%Y%m%d_%H%M%S')}_{os.getpid()}")
        os.makedirs(d, exist_ok=True)
        run.append(d)
        atexit.register(_render_at_exit, run)
        print(f"GRAPH: writing to {d} (rendered to SVG when the program ends)")
    return run[0]


def _render_at_exit(run: list[str]) -> None:
    dots = run[1:]
    from tg_uop.dot import render_dots  # (the DOT writers import subprocess: loaded when GRAPH is used, not at import)

    svgs = render_dots(dots) if os.environ.get("GRAPH_RENDER", "1") != "0" else []
    how = f", {len(svgs)} rendered to SVG" if svgs else " (render: dot -Tsvg -O *.dot)"
    print(f"GRAPH: {len(dots)} DOT files in {run[0]}{how}")


def user_lines(limit: int = 3) -> list[str]:
    """The user's source lines that led here (`file.py:12 loss.backward()`), innermost first: the frames
    outside tg's packages and the standard library's plumbing.

    >>> ns = {"user_lines": user_lines, "__name__": "my_script"}
    >>> exec("lines = user_lines()", ns)
    >>> ns["lines"][0]
    '<string>:1'
    """
    import linecache

    out: list[str] = []
    frame = sys._getframe(1)
    while frame is not None and len(out) < limit:
        module = str(frame.f_globals.get("__name__", "")).split(".")[0]
        if module not in OURS and module not in LIBRARY:
            code = frame.f_code
            text = linecache.getline(code.co_filename, frame.f_lineno).strip()
            out.append(f"{os.path.basename(code.co_filename)}:{frame.f_lineno} {text}".rstrip())
        frame = frame.f_back  # type: ignore[assignment]
    return out


def ast_ops(ast: UOp) -> list[str]:
    """The operations a kernel computes, by name (what DEBUG=2 and VIZ list beside it).

    >>> ast_ops(UOp.const(dtypes.float, 1.0) * 2.0 + 1.0)
    ['MUL', 'ADD']
    """
    names: list[str] = []
    for u in ast.toposort:
        if u.op in GroupOp.ALU or u.op is Ops.REDUCE_AXIS:
            reduced = u.arg[0] if u.op is Ops.REDUCE_AXIS else None
            name = u.op.name if reduced is None else "SUM" if reduced is Ops.ADD else f"{reduced.name}-REDUCE"
            if name not in names:
                names.append(name)
    return names


def on_schedule(roots: Sequence[UOp], asts: Sequence[UOp], start_us: float) -> None:
    """Report one scheduling of `roots` into kernels with `asts` (called by Tensor.schedule)."""
    if not (TRACE.active or TRACE.profiling or GRAPH.value or DEBUG >= 2):
        return
    lines = user_lines()
    made = current().kernel_ops
    TRACE.origins = {ast: {"ops": ast_ops(ast), "tensor_ops": made.pop(ast, []), "lines": lines} for ast in asts}
    made.clear()
    if not (TRACE.active or TRACE.profiling or GRAPH.value):
        return
    st = front()
    st.schedules_shown += 1
    n = st.schedules_shown
    TRACE.event(f"schedule {n}", "schedule", "HOST", start_us, TRACE.now_us() - start_us, kernels=len(asts))
    lazy = UOp(Ops.SINK, dtypes.void, tuple(roots))
    if TRACE.active:
        with TRACE.group("schedule", f"schedule {n}: {len(asts)} kernels", lines=lines):
            TRACE.snapshot_step("lazy graph", lazy)
            for i, ast in enumerate(asts):
                TRACE.snapshot_step(f"kernel {i} AST", ast, fold_movement=False)
    if GRAPH.value >= 1:
        from tg_uop.dot import to_dot, write_dot

        d = run_dir()
        paths = write_dot(to_dot(lazy, title=f"realize {n}: lazy graph"), os.path.join(d, f"realize_{n}.dot"), False)
        if GRAPH.value >= 2:
            for i, ast in enumerate(asts):
                dot = to_dot(ast, fold_movement=False, title=f"realize {n}: kernel {i} AST")
                paths += write_dot(dot, os.path.join(d, f"realize_{n}_k{i}.dot"), False)
        front().graph_files.extend(paths)
