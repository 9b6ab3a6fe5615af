"""Every graph pass a kernel goes through is a named pass: listed in order (DEBUG=5) and in the VIZ trace."""

from __future__ import annotations

import pytest

from tg_codegen import ClangRenderer, get_program
from tg_codegen.program import kernel_passes
from tg_shape import ShapeTracker
from tg_uop import Ops, UOp, dtypes
from tg_uop.helpers import Context
from tg_uop.trace import tracing

F32 = dtypes.float32


def sum_rows_ast(rows: int, cols: int) -> UOp:
    g0 = UOp(Ops.DEFINE_GLOBAL, F32.ptr(), (), 0)
    g1 = UOp(Ops.DEFINE_GLOBAL, F32.ptr(), (), 1)
    load = UOp(Ops.LOAD, F32, (g1, UOp(Ops.VIEW, arg=ShapeTracker.from_shape((rows, cols)))))
    red = UOp(Ops.REDUCE_AXIS, F32, (load,), (Ops.ADD, (1,)))
    out_view = UOp(Ops.VIEW, arg=ShapeTracker.from_shape((rows, 1)))
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (g0, out_view, red)),))


LOWERED = ["lower: indexing, ranges, loads and stores", "simplify lowered kernel", "drop true gates"]


def test_pass_list_of_one_kernel() -> None:
    # the heuristics' one opt (an upcast of the output axis) is one view-mapping pass; their trials are not listed
    assert kernel_passes(sum_rows_ast(16, 4), ClangRenderer()) == [
        "fold one-hot gathers",
        "kernel: apply opt to views",
        *LOWERED,
        "expand reduces",
    ]


def test_pass_list_without_opts() -> None:
    passes = kernel_passes(sum_rows_ast(16, 4), ClangRenderer(), opts=[])
    assert passes == ["fold one-hot gathers", *LOWERED, "expand reduces"]


def test_debug_5_prints_the_passes(capsys: pytest.CaptureFixture[str]) -> None:
    with Context(DEBUG=5):
        spec = get_program(sum_rows_ast(8, 4), ClangRenderer(), opts=[])
    line = next(x for x in capsys.readouterr().out.splitlines() if " passes: " in x)
    assert line == f"{spec.name} passes: fold one-hot gathers -> {' -> '.join(LOWERED)} -> expand reduces"


def test_viz_trace_shows_the_same_passes() -> None:
    ast = sum_rows_ast(16, 4)
    names = kernel_passes(ast, ClangRenderer())
    with tracing() as trace:
        get_program(ast, ClangRenderer())
    steps = [s.name for g in trace.groups for s in g.steps if s.kind == "rewrite"]
    assert [s for s in steps if s in names] == names
