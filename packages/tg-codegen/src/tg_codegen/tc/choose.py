"""The hand-coded choice of tensor-core opts for a matmul: mma.sync tiles, or Hopper's warpgroup MMA."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from tg_codegen.axes import AxisType
from tg_codegen.opt import KernelOptError, Opt, OptOps
from tg_codegen.tc.lower import lower_tc
from tg_codegen.tc.opts import _match, mma_operands, usable_tensor_cores
from tg_uop import dtypes
from tg_uop.helpers import getenv

if TYPE_CHECKING:
    from tg_codegen.kernel import Kernel


def tc_optimizations(k: Kernel) -> bool:
    """Apply TC and a warp/register tiling around it to `k` if it is a matmul tensor cores take (env TC=0: never).

    Workgroups of 2x2 warps (LOCAL on the outer M and N axes), each warp a block of up to 4x8 tiles (UPCAST), the
    K loop unrolled by 2 (the sweep in bench/bench_tc_opts.py found this fastest at 4096 on an H100: 110 TFLOPS
    against 94 without the unroll and 61-97 for other tilings); where the renderer copies asynchronously (CUDA sm_80+),
    the operand tiles pipelined through shared memory in 2 slots (`Opt(OptOps.STAGE, None, 2)`, stage.py), fragments
    read with ldmatrix. Returns whether TC was applied.
    """
    if not getenv("TC", 1) or not k.opts.tensor_cores or k.applied_opts:
        return False
    if _warpgroup_optimizations(k):
        return True
    for axis in range(len(k.axes_of(AxisType.REDUCE))):
        opt = Opt(OptOps.TC, axis, 0)
        try:
            match = _match(k, opt)
            k.apply_opt(opt)
        except KernelOptError:
            continue
        globals_ = k.axes_of(AxisType.GLOBAL)
        m_tile, n_tile = globals_.index(match.m_axis), globals_.index(match.n_axis)
        for tile in (m_tile, n_tile):
            k.apply_first([Opt(OptOps.LOCAL, tile, 2)])
        for tile, amts in ((m_tile, (4, 2)), (n_tile, (8, 4, 2))):
            k.apply_first([Opt(OptOps.UPCAST, tile, amt) for amt in amts])
        k.apply_first([Opt(OptOps.UNROLL, 0, 2)])
        if k.opts.has_async_copy:  # pipelined operand tiles (stage.py): fp16 4096 on an H100 169 -> 327 TFLOPS
            k.apply_first([Opt(OptOps.STAGE, None, 2)])
        return True
    return False


def _warpgroup_optimizations(k: Kernel) -> bool:
    """On Hopper, a matmul whose tiles fit takes the warpgroup MMA: 128x128 blocks of 2 warpgroups (LOCAL 2 on M),
    each a 64x128 wgmma tile, K by 64 (UNROLL 4; by 32 where K is not a multiple of 64) pipelined through shared
    memory in 2 slots (64 KiB: dynamic shared memory). fp16 4096 on an H200: 474 TFLOPS against 414 with K by 32
    and 346 for the mma.sync tile (bench/bench_tc_opts.py); 3 or 4 slots were slower. TF32 only where both operands
    are contiguous along K (A @ B.T, a Linear layer): a row-major B must be transposed into its K-major tile element
    by element, 142 TFLOPS at 4096 on an H100 against 175 for mma.sync. The choice is lowered once to check that
    both operand tiles take a wgmma layout; False (k unchanged) where anything does not fit."""
    if not k.opts.has_async_copy or (ops := mma_operands(k.reduceops[0]) if len(k.reduceops) == 1 else None) is None:
        return False
    cands = [tc for tc in usable_tensor_cores(k) if tc.dtype_in == ops[0].dtype]
    if not any(tc.wgmma for tc in cands):
        return False
    arg = next(i for i, tc in enumerate(cands) if tc.wgmma)
    for axis, unroll in itertools.product(range(len(k.axes_of(AxisType.REDUCE))), (4, 2)):
        k_axis = k.axes_of(AxisType.REDUCE)[axis]
        if ops[0].dtype == dtypes.float32 and any(op.src[1].arg.real_strides()[k_axis] != 1 for op in ops):
            continue  # TF32 operands not contiguous along K are copied element by element: slower than mma.sync
        trial = k.copy()
        try:
            match = _match(trial, Opt(OptOps.TC, axis, arg))
            trial.apply_opt(Opt(OptOps.TC, axis, arg))
            m_tile = trial.axes_of(AxisType.GLOBAL).index(match.m_axis)
            opts = [Opt(OptOps.LOCAL, m_tile, 2), Opt(OptOps.UNROLL, 0, unroll), Opt(OptOps.STAGE, None, 2)]
            trial.apply_opts(opts)
            lower_tc(trial)
        except KernelOptError:
            continue
        k.apply_opts([Opt(OptOps.TC, axis, arg), *opts])
        return True
    return False
