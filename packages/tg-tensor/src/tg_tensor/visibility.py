"""What a realize shows when asked: the lazy graph for GRAPH=1, each kernel's AST for GRAPH=2, the
schedule for VIZ=1 and its time for PROFILE=1.

>>> from tg_tensor.visibility import graph_dir
>>> graph_dir().endswith("tg_graph")
True
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence

from tg_tensor.realizer import current
from tg_uop import Ops, UOp, dtypes
from tg_uop.dot import to_dot, write_dot
from tg_uop.trace import GRAPH, TRACE


def graph_dir() -> str:
    """Where GRAPH=1 writes its files: $GRAPH_DIR, else tg_graph in the temp directory."""
    return os.environ.get("GRAPH_DIR") or os.path.join(tempfile.gettempdir(), "tg_graph")


def on_schedule(roots: Sequence[UOp], asts: Sequence[UOp], start_us: float) -> None:
    """Report one scheduling of `roots` into kernels with `asts` (called by Tensor.schedule)."""
    if not (TRACE.active or TRACE.profiling or GRAPH.value):
        return
    rz = current()
    rz.schedules_shown += 1
    n = rz.schedules_shown
    TRACE.event(f"schedule {n}", "schedule", "HOST", start_us, TRACE.now_us() - start_us, kernels=len(asts))
    lazy = UOp(Ops.SINK, dtypes.void, tuple(roots))
    if TRACE.active:
        with TRACE.group("schedule", f"schedule {n}: {len(asts)} kernels"):
            TRACE.snapshot_step("lazy graph", lazy)
            for i, ast in enumerate(asts):
                TRACE.snapshot_step(f"kernel {i} AST", ast, fold_movement=False)
    if GRAPH.value >= 1:
        d = graph_dir()
        os.makedirs(d, exist_ok=True)
        paths = write_dot(to_dot(lazy, title=f"realize {n}: lazy graph"), os.path.join(d, f"realize_{n}.dot"))
        if GRAPH.value >= 2:
            for i, ast in enumerate(asts):
                dot = to_dot(ast, fold_movement=False, title=f"realize {n}: kernel {i} AST")
                paths += write_dot(dot, os.path.join(d, f"realize_{n}_k{i}.dot"))
        print(f"GRAPH: {' '.join(paths)}")
