"""GPU heuristics for reductions to few outputs: the workgroup's threads read neighbouring addresses."""

from __future__ import annotations

from tg_codegen import Kernel, Opt, OptOps, get_program
from tg_codegen.heuristic import hand_coded_optimizations
from tg_codegen.renderer.cuda import CUDARenderer
from tg_codegen.renderer.opencl import OpenCLRenderer
from tg_shape import ShapeTracker, View
from tg_uop import DType, Ops, UOp, dtypes


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
    opts = hand_coded_optimizations(Kernel(_sum((16, 4096), (4096, 1), 1), OpenCLRenderer()))
    assert opts[0] == Opt(OptOps.GROUP, 0, 256) and Opt(OptOps.UNROLL, 0, 4) in opts


def test_contiguous_reduce_to_few_outputs_reads_16_bytes_per_thread_with_wide_loads() -> None:
    # UNROLL before GROUP: thread t of the workgroup reads floats 4t..4t+3 of each 1024-long piece
    spec = get_program(_sum((16, 4096), (4096, 1), 1), CUDARenderer())
    assert list(spec.applied_opts) == [Opt(OptOps.UNROLL, 0, 4), Opt(OptOps.GROUP, 0, 256)]
    assert "tg_floatx4 val0 = *((tg_floatx4*)(data1+" in spec.src


def _matvec(rows: int, cols: int, dt: DType = dtypes.float16) -> UOp:
    """out[r] = sum_c x[c] * w[r, c]: the decode step's matrix-vector product."""
    x = UOp(Ops.LOAD, dt, (UOp(Ops.DEFINE_GLOBAL, dt.ptr(), (), 1), _view((rows, cols), (0, 1))))
    w = UOp(Ops.LOAD, dt, (UOp(Ops.DEFINE_GLOBAL, dt.ptr(), (), 2), _view((rows, cols), (cols, 1))))
    red = UOp(Ops.REDUCE_AXIS, dt, ((x * w),), (Ops.ADD, (1,)))
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.DEFINE_GLOBAL, dt.ptr(), (), 0), _view((rows, 1), (1, 0)), red))
    return UOp(Ops.SINK, dtypes.void, (store,))


def _view(shape: tuple[int, ...], strides: tuple[int, ...]) -> UOp:
    return UOp(Ops.VIEW, dtypes.void, (), ShapeTracker((View.create(shape, strides),)))


def test_matvec_gets_a_warp_per_row_and_16_byte_loads() -> None:
    spec = get_program(_matvec(8192, 2048), CUDARenderer())
    # 8 rows per workgroup, then 8 halves per thread, then 32 threads per row: (loop, lane, 8); the 8-long loop
    # left is unrolled by 4
    want = [Opt(OptOps.LOCAL, 0, 8), Opt(OptOps.UNROLL, 0, 8), Opt(OptOps.GROUP, 0, 32), Opt(OptOps.UNROLL, 0, 4)]
    assert list(spec.applied_opts) == want
    assert spec.local_size == (32, 8) and spec.global_size == (1024,)
    assert spec.src.count("*((tg_halfx8*)(data") == 2 * 4  # x and the weight row, 16 bytes each, 4 times unrolled
    assert "*(data1+" not in spec.src and "*(data2+" not in spec.src  # no narrower load


def test_matvec_with_few_rows_keeps_enough_workgroups() -> None:
    # rows per workgroup shrink to keep >= 1024 workgroups; under 1024 rows a whole workgroup takes each row
    assert get_program(_matvec(4096, 2048), CUDARenderer()).applied_opts[0] == Opt(OptOps.LOCAL, 0, 4)
    assert not any(o.op is OptOps.LOCAL for o in get_program(_matvec(1024, 2048), CUDARenderer()).applied_opts)
    few = get_program(_matvec(512, 2048), CUDARenderer()).applied_opts
    assert list(few) == [Opt(OptOps.UNROLL, 0, 8), Opt(OptOps.GROUP, 0, 256)]


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


def test_matmul_with_both_operands_contiguous_along_k_is_not_a_matvec() -> None:
    # x (64, 512) @ w.T, w (256, 512): both loads walk the reduce axis with stride 1, each is reused 256 or 64 times
    f32 = dtypes.float32
    x = UOp(Ops.LOAD, f32, (UOp(Ops.DEFINE_GLOBAL, f32.ptr(), (), 1), _view((64, 256, 512), (512, 0, 1))))
    w = UOp(Ops.LOAD, f32, (UOp(Ops.DEFINE_GLOBAL, f32.ptr(), (), 2), _view((64, 256, 512), (0, 512, 1))))
    red = UOp(Ops.REDUCE_AXIS, f32, ((x * w),), (Ops.ADD, (2,)))
    out = UOp(Ops.DEFINE_GLOBAL, f32.ptr(), (), 0)
    sink = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, _view((64, 256, 1), (256, 1, 0)), red)),))
    opts = hand_coded_optimizations(Kernel(sink, CUDARenderer()))
    assert not any(o.op is OptOps.GROUP for o in opts) and any(o.op is OptOps.UPCAST for o in opts), opts
