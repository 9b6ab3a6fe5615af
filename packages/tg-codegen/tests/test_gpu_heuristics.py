"""GPU heuristics for reductions to few outputs: the workgroup's threads read neighbouring addresses."""

from __future__ import annotations

from tg_codegen import Kernel, Opt, OptOps, get_program
from tg_codegen.heuristic import hand_coded_optimizations
from tg_codegen.renderer.cuda import CUDARenderer
from tg_codegen.renderer.opencl import OpenCLRenderer
from tg_shape import ShapeTracker, View
from tg_uop import Ops, UOp, dtypes


def _sum(shape: tuple[int, ...], strides: tuple[int, ...], axis: int) -> UOp:
    """Sum over `axis` of a float buffer read through (shape, strides)."""
    f32 = dtypes.float32
    view = UOp(Ops.VIEW, dtypes.void, (), ShapeTracker((View.create(shape, strides),)))
    load = UOp(Ops.LOAD, f32, (UOp(Ops.DEFINE_GLOBAL, f32.ptr(), (), 1), view))
    red = UOp(Ops.REDUCE_AXIS, f32, (load,), (Ops.ADD, (axis,)))
    out_shape = tuple(1 if i == axis else s for i, s in enumerate(shape))
    out = UOp(Ops.VIEW, dtypes.void, (), ShapeTracker((View.create(out_shape),)))
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.DEFINE_GLOBAL, f32.ptr(), (), 0), out, red))
    return UOp(Ops.SINK, dtypes.void, (store,))


def test_contiguous_reduce_uses_group_not_grouptop() -> None:
    opts = hand_coded_optimizations(Kernel(_sum((16, 4096), (4096, 1), 1), CUDARenderer()))
    assert opts[0] == Opt(OptOps.GROUP, 0, 256) and Opt(OptOps.UNROLL, 0, 4) in opts


def test_strided_reduce_reads_the_unit_stride_output_axis_as_one_wide_load() -> None:
    # the scheduler's split of a full sum: (outer, reduce, 8) with the reduce axis at stride 8
    spec = get_program(_sum((64, 4096, 8), (32768, 8, 1), 1), CUDARenderer())
    assert list(spec.applied_opts) == [Opt(OptOps.GROUP, 0, 256), Opt(OptOps.UPCAST, 1, 4)]
    assert "tg_floatx4 val0 = *((tg_floatx4*)(data1+" in spec.src


def test_strided_reduce_without_wide_loads_puts_that_axis_in_the_workgroup() -> None:
    opts = hand_coded_optimizations(Kernel(_sum((64, 4096, 8), (32768, 8, 1), 1), OpenCLRenderer()))
    assert opts[:2] == [Opt(OptOps.LOCAL, 1, 8), Opt(OptOps.GROUP, 0, 32)]


def test_reduce_along_a_long_stride_keeps_grouptop() -> None:
    opts = hand_coded_optimizations(Kernel(_sum((64, 4096), (1, 64), 1), CUDARenderer()))
    assert opts and opts[0].op is OptOps.GROUPTOP
