"""Kernel optimizations at the codegen layer alone: how opts reshape a kernel and what the renderers emit."""

from __future__ import annotations

import pytest

from tg_codegen import ClangRenderer, Kernel, KernelOptError, Opt, OptOps, get_program
from tg_codegen.heuristic import hand_coded_optimizations
from tg_codegen.renderer.opencl import OpenCLRenderer
from tg_shape import ShapeTracker, View
from tg_uop import Ops, UOp, dtypes
from tg_uop.helpers import Context

F32 = dtypes.float32


def _matmul(n: int = 16, k: int = 32, m: int = 16) -> UOp:
    def load(i: int, strides: tuple[int, ...]) -> UOp:
        view = UOp(Ops.VIEW, dtypes.void, (), ShapeTracker((View.create((n, k, m), strides),)))
        return UOp(Ops.LOAD, F32, (UOp(Ops.DEFINE_GLOBAL, F32.ptr(), (), i), view))

    red = UOp(Ops.REDUCE_AXIS, F32, (load(1, (k, 1, 0)) * load(2, (0, m, 1)),), (Ops.ADD, (1,)))
    out = UOp(Ops.VIEW, dtypes.void, (), ShapeTracker((View.create((n, 1, m)),)))
    return UOp(
        Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (UOp(Ops.DEFINE_GLOBAL, F32.ptr(), (), 0), out, red)),)
    )


def test_kernel_puts_reduce_axes_last() -> None:
    k = Kernel(_matmul(), ClangRenderer())
    assert k.full_shape == (16, 16, 32) and k.axis_types == ["global", "global", "reduce"]


def test_upcast_and_unroll_split_axes() -> None:
    k = Kernel(_matmul(), ClangRenderer()).apply_opts([Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UNROLL, 0, 4)])
    assert k.full_shape == (16, 2, 8, 8, 4)
    assert k.axis_types == ["global", "global", "reduce", "upcast", "unroll"]
    assert k.upcast_size == 32


def test_thread_axis_goes_first() -> None:
    k = Kernel(_matmul(), ClangRenderer(threads=2)).apply_opts([Opt(OptOps.THREAD, 1, 4)])
    assert k.axis_types[0] == "thread" and k.full_shape[0] == 4


def test_failed_opt_leaves_the_kernel_unchanged() -> None:
    k = Kernel(_matmul(), ClangRenderer())
    with pytest.raises(KernelOptError):
        k.apply_opt(Opt(OptOps.UPCAST, 0, 5))
    assert k.full_shape == (16, 16, 32) and k.applied_opts == []


@pytest.mark.parametrize("op", [OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP, OptOps.TC])
def test_cpu_renderer_has_no_locals(op: OptOps) -> None:
    with pytest.raises(KernelOptError):
        Kernel(_matmul(), ClangRenderer()).apply_opt(Opt(op, 0, 2))


def test_upcast_renders_vector_loads_on_cpu() -> None:
    src = get_program(_matmul(), ClangRenderer(), opts=[Opt(OptOps.UPCAST, 1, 8)]).src
    assert "tg_float8" in src and "*((tg_float8_u*)(data2+" in src and "*((tg_float8_u*)(data0+" in src


def _row_copy(gated: bool) -> UOp:
    """out[r, c] = table[r, c + 1] (8 rows of 16): a plain copy; `gated` reads through a mask on the rows."""
    mask = ((0, 6), (0, 16)) if gated else None
    st = ShapeTracker((View.create((8, 16), (17, 1), 1, mask),))
    load = UOp(Ops.LOAD, F32, (UOp(Ops.DEFINE_GLOBAL, F32.ptr(), (), 1), UOp(Ops.VIEW, dtypes.void, (), st)))
    out = UOp(Ops.VIEW, dtypes.void, (), ShapeTracker((View.create((8, 16)),)))
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.DEFINE_GLOBAL, F32.ptr(), (), 0), out, load))
    return UOp(Ops.SINK, dtypes.void, (store,))


@pytest.mark.parametrize("gated", [False, True])
def test_upcast_copy_renders_one_vector_load_per_store(gated: bool) -> None:
    # a stored value that is a load packs into a wide load (one gate for all lanes), so the copy is vector code
    src = get_program(_row_copy(gated), ClangRenderer(), opts=[Opt(OptOps.UPCAST, 1, 8)]).src
    assert src.count("*((tg_float8_u*)(data1+") == 1 and src.count("*((tg_float8_u*)(data0+") == 1
    assert ("?((tg_float8)*((tg_float8_u*)(data1+" in src) == gated


def test_thread_renders_a_call_of_the_thread_pool() -> None:
    """The THREAD loop's body becomes a function of one iteration; the kernel hands it to tg_parallel (threadpool.py)
    with the loop's length and the renderer's threads. With one thread the loop stays a loop."""
    src = get_program(_matmul(), ClangRenderer(threads=3), opts=[Opt(OptOps.THREAD, 0, 4)]).src
    assert "static void r_4_4_16_32_chunk(void* tg_args, int tg_chunk) {" in src.replace("R_", "r_")
    assert "tg_parallel(R_4_4_16_32_chunk, &tg_a, 4, 3);" in src and "for (int ridx0" not in src
    serial = get_program(_matmul(), ClangRenderer(threads=1), opts=[Opt(OptOps.THREAD, 0, 4)]).src
    assert "tg_parallel" not in serial and "for (int ridx0 = 0; ridx0 < 4; ridx0++) {" in serial


def test_group_renders_local_memory_and_a_barrier() -> None:
    spec = get_program(_matmul(), OpenCLRenderer(), opts=[Opt(OptOps.GROUP, 0, 8), Opt(OptOps.LOCAL, 0, 2)])
    assert "__local float temp0[16];" in spec.src and "barrier(CLK_LOCAL_MEM_FENCE);" in spec.src
    assert spec.local_size == (8, 2) and spec.global_size == (16, 8)


def test_heuristics_on_by_default_and_off_with_noopt() -> None:
    k = Kernel(_matmul(), ClangRenderer(threads=2))
    assert hand_coded_optimizations(k), "a matmul gets a register tile"
    assert get_program(_matmul(), ClangRenderer()).applied_opts
    with Context(NOOPT=1):
        assert get_program(_matmul(), ClangRenderer()).applied_opts == ()
