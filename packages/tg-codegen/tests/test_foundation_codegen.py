"""tg_codegen alone: a kernel AST renders to C that a C compiler accepts, with a tinygrad-style name."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tg_codegen import ClangRenderer, get_program, linearize
from tg_shape import ShapeTracker
from tg_uop import Ops, UOp, dtypes

F32 = dtypes.float32


def sum_rows_ast(rows: int, cols: int) -> UOp:
    g0 = UOp(Ops.DEFINE_GLOBAL, F32.ptr(), (), 0)
    g1 = UOp(Ops.DEFINE_GLOBAL, F32.ptr(), (), 1)
    load = UOp(Ops.LOAD, F32, (g1, UOp(Ops.VIEW, arg=ShapeTracker.from_shape((rows, cols)))))
    red = UOp(Ops.REDUCE_AXIS, F32, (load,), (Ops.ADD, (1,)))
    out_view = UOp(Ops.VIEW, arg=ShapeTracker.from_shape((rows, 1)))
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (g0, out_view, red)),))


def test_reduce_kernel_name_and_source() -> None:
    prog = get_program(sum_rows_ast(16, 4), ClangRenderer(), opts=[])
    assert prog.name == "r_16_4"
    assert "for (int ridx0 = 0; ridx0 < 16; ridx0++)" in prog.src
    assert "acc0" in prog.src and prog.globals == (0, 1) and prog.outs == (0,)


def test_linearized_loops_are_balanced() -> None:
    prog = get_program(sum_rows_ast(8, 8), ClangRenderer(), opts=[])
    ops = [u.op for u in prog.uops]
    assert ops.count(Ops.RANGE) == ops.count(Ops.ENDRANGE) == 2
    assert ops.index(Ops.DEFINE_ACC) < ops.index(Ops.RANGE, ops.index(Ops.RANGE) + 1)
    assert isinstance(linearize, object)


@pytest.mark.skipif(not (shutil.which("gcc") or shutil.which("clang")), reason="no C compiler")
def test_source_compiles() -> None:
    cc = shutil.which("clang") or shutil.which("gcc")
    assert cc is not None
    src = get_program(sum_rows_ast(5, 3), ClangRenderer()).src
    proc = subprocess.run([cc, "-fsyntax-only", "-x", "c", "-"], input=src.encode(), capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()


def test_renderers_say_which_dtypes_they_support() -> None:
    """`supported_dtypes()` (tinygrad's renderer API): every dtype, except float64 on an OpenCL device without
    cl_khr_fp64."""
    from tg_codegen.renderer.cstyle import ClangRenderer
    from tg_codegen.renderer.cuda import CUDARenderer
    from tg_codegen.renderer.opencl import OpenCLRenderer
    from tg_uop import dtypes as dt

    for r in (ClangRenderer(), CUDARenderer("sm_90"), OpenCLRenderer()):
        assert r.supported_dtypes() == set(dt.all), type(r).__name__
    assert OpenCLRenderer(fp64=False).supported_dtypes() == set(dt.all) - {dt.float64}
