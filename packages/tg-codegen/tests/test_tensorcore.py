"""The TC OptOp at the codegen layer: where it applies, how it reshapes a kernel, what it renders, where it is refused.

Whether the fragments are right is checked on a GPU (tests/test_cuda_tc.py); here nothing runs.
"""

from __future__ import annotations

import pytest

from tg_codegen import ClangRenderer, Kernel, KernelOptError, Opt, OptOps, get_program
from tg_codegen.heuristic import hand_coded_optimizations
from tg_codegen.renderer.cuda import CUDARenderer
from tg_codegen.renderer.opencl import OpenCLRenderer
from tg_codegen.search import actions
from tg_shape import ShapeTracker, View
from tg_uop import DType, Ops, UOp, dtypes
from tg_uop.helpers import Context

TC = Opt(OptOps.TC, 0, 0)


def _matmul(n: int = 32, k: int = 64, m: int = 16, dt: DType = dtypes.float16, acc: DType = dtypes.float32) -> UOp:
    """out[n, m] = sum_k a[n, k] * b[k, m] as the scheduler builds it: CAST(acc, MUL(a, b)) under the reduce."""

    def load(i: int, strides: tuple[int, ...]) -> UOp:
        view = UOp(Ops.VIEW, dtypes.void, (), ShapeTracker((View.create((n, m, k), strides),)))
        return UOp(Ops.LOAD, dt, (UOp(Ops.DEFINE_GLOBAL, dt.ptr(), (), i), view))

    prod = (load(1, (k, 0, 1)) * load(2, (0, 1, m))).cast(acc)
    red = UOp(Ops.REDUCE_AXIS, acc, (prod,), (Ops.ADD, (2,)))
    out = UOp(Ops.VIEW, dtypes.void, (), ShapeTracker((View.create((n, m, 1)),)))
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.DEFINE_GLOBAL, dt.ptr(), (), 0), out, red.cast(dt)))
    return UOp(Ops.SINK, dtypes.void, (store,))


@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16])
def test_tc_splits_the_tile_axes_last(dt: DType) -> None:
    k = Kernel(_matmul(dt=dt), CUDARenderer("sm_90")).apply_opts([TC])
    assert k.axis_types == ["global", "global", "reduce", "tcm", "tcn", "tck"]
    assert k.full_shape == (2, 2, 4, 16, 8, 16)


def test_opts_after_tc_keep_the_tile_axes_last() -> None:
    opts = [TC, Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UNROLL, 0, 2)]
    k = Kernel(_matmul(), CUDARenderer("sm_90")).apply_opts(opts)
    assert k.axis_types[-3:] == ["tcm", "tcn", "tck"]
    assert k.full_shape[-3:] == (16, 8, 16)


@pytest.mark.parametrize(("dt", "ptx"), [(dtypes.float16, "f16"), (dtypes.bfloat16, "bf16")])
def test_tc_renders_mma(dt: DType, ptx: str) -> None:
    spec = get_program(_matmul(dt=dt), CUDARenderer("sm_80"), opts=[TC, Opt(OptOps.UNROLL, 0, 2)])
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{ptx}.{ptx}.f32" in spec.src
    assert spec.src.count(f"__tg_mma_{dt.name}(") == 3  # the definition and two unrolled calls
    assert spec.local_size == (32,)  # one warp: the lane is threadIdx.x
    assert "__global__ __launch_bounds__(32) void" in spec.src  # registers never exceed what the block may have
    assert spec.global_size == (2, 2)


@pytest.mark.parametrize(
    ("ast", "renderer", "message"),
    [
        (_matmul(), ClangRenderer(), "no tensor cores"),
        (_matmul(), OpenCLRenderer(), "no tensor cores"),
        (_matmul(), CUDARenderer("sm_75"), "no tensor cores"),
        (_matmul(dt=dtypes.float32), CUDARenderer("sm_90"), "no tensor core takes float"),
        (_matmul(acc=dtypes.float16), CUDARenderer("sm_90"), "accumulates in half"),
        (_matmul(n=24), CUDARenderer("sm_90"), "M axis of size 24 is not a multiple of the tensor core's 16"),
        (_matmul(m=12), CUDARenderer("sm_90"), "N axis of size 12"),
        (_matmul(k=40), CUDARenderer("sm_90"), "K axis of size 40"),
    ],
)
def test_tc_refused_with_the_reason(ast: UOp, renderer: CUDARenderer, message: str) -> None:
    k = Kernel(ast, renderer)
    with pytest.raises(KernelOptError, match=message):
        k.apply_opt(TC)
    assert k.applied_opts == [] and "tck" not in k.axis_types


def test_tc_refused_on_a_plain_sum() -> None:
    view = UOp(Ops.VIEW, dtypes.void, (), ShapeTracker((View.create((16, 32)),)))
    load = UOp(Ops.LOAD, dtypes.float16, (UOp(Ops.DEFINE_GLOBAL, dtypes.float16.ptr(), (), 1), view))
    red = UOp(Ops.REDUCE_AXIS, dtypes.float32, (load.cast(dtypes.float32),), (Ops.ADD, (1,)))
    out = UOp(Ops.VIEW, dtypes.void, (), ShapeTracker((View.create((16, 1)),)))
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 0), out, red))
    with pytest.raises(KernelOptError, match="product of two loads"):
        Kernel(UOp(Ops.SINK, dtypes.void, (store,)), CUDARenderer()).apply_opt(TC)


def test_tc_must_come_first_and_refuses_group() -> None:
    k = Kernel(_matmul(), CUDARenderer()).apply_opts([Opt(OptOps.LOCAL, 0, 2)])
    with pytest.raises(KernelOptError, match="must be the first"):
        k.apply_opt(TC)
    k = Kernel(_matmul(), CUDARenderer()).apply_opts([TC])
    with pytest.raises(KernelOptError, match="tensor cores"):
        k.apply_opt(Opt(OptOps.GROUPTOP, 0, 2))
    with pytest.raises(KernelOptError, match="arg 1 picks a tensor core"):  # (Ampere: mma.sync only)
        Kernel(_matmul(), CUDARenderer("sm_80")).apply_opt(Opt(OptOps.TC, 0, 1))
    with pytest.raises(KernelOptError, match="arg 2 picks a tensor core"):  # (Hopper: mma.sync and wgmma)
        Kernel(_matmul(), CUDARenderer("sm_90")).apply_opt(Opt(OptOps.TC, 0, 2))


def test_heuristics_pick_tc_for_half_matmuls_on_cuda_only() -> None:
    half = hand_coded_optimizations(Kernel(_matmul(n=64, m=64), CUDARenderer()))
    assert half[0] == TC and Opt(OptOps.LOCAL, 0, 2) in half
    assert all(
        o.op is not OptOps.TC for o in hand_coded_optimizations(Kernel(_matmul(dt=dtypes.float32), CUDARenderer()))
    )
    assert all(o.op is not OptOps.TC for o in hand_coded_optimizations(Kernel(_matmul(), CUDARenderer("sm_75"))))
    with Context(NOOPT=1):
        assert get_program(_matmul(), CUDARenderer()).applied_opts == ()


def test_beam_actions_include_tc_where_there_are_tensor_cores() -> None:
    assert TC in actions(CUDARenderer("sm_90"))
    assert all(a.op is not OptOps.TC for a in actions(CUDARenderer("sm_75")) + actions(ClangRenderer()))


def _offset_matmul(offset: int) -> UOp:
    """64x64x64 fp16 matmul whose A starts `offset` elements into its buffer."""
    n = k = m = 64
    dt, acc = dtypes.float16, dtypes.float32

    def load(i: int, strides: tuple[int, ...], off: int) -> UOp:
        view = UOp(Ops.VIEW, dtypes.void, (), ShapeTracker((View.create((n, m, k), strides, off),)))
        return UOp(Ops.LOAD, dt, (UOp(Ops.DEFINE_GLOBAL, dt.ptr(), (), i), view))

    red = UOp(Ops.REDUCE_AXIS, acc, ((load(1, (k, 0, 1), offset) * load(2, (0, 1, m), 0)).cast(acc),), (Ops.ADD, (2,)))
    out = UOp(Ops.VIEW, dtypes.void, (), ShapeTracker((View.create((n, m, 1)),)))
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.DEFINE_GLOBAL, dt.ptr(), (), 0), out, red.cast(dt)))
    return UOp(Ops.SINK, dtypes.void, (store,))


def test_fragments_load_as_wide_aligned_loads() -> None:
    opts = [TC, Opt(OptOps.UPCAST, 1, 8)]
    src = get_program(_offset_matmul(0), CUDARenderer(), opts=opts).src
    assert "*((tg_halfx4*)(data1+" in src  # a lane's 4 neighbouring k of A
    assert "*((tg_halfx8*)(data2+" in src  # a lane's 8 tiles' neighbouring columns of B
    # A one element into its buffer: 4-wide loads would be misaligned, only aligned pairs merge
    src = get_program(_offset_matmul(1), CUDARenderer(), opts=opts).src
    assert "*((tg_halfx4*)(data1+" not in src and "*((tg_halfx2*)(data1+" in src
