"""KBLOCK: cache blocking of a long reduction on the CPU, each block of it adding into the output.

A matmul's reduce loop (k) runs innermost, inside the loops over the output tiles, so a tile reads a strip of
each operand k long. With a long k (2048: 16 rows x 2048 floats = 128 KB per operand strip) the strips of one
tile fall out of L1 and the next tile's out of L2 before they are reused. `Opt(OptOps.KBLOCK, r, kc)` cuts
reduce axis r into blocks of kc and runs the blocks as a loop outside the output loops:

    for kb in 0 .. k/kc:                          (a global axis along which the output does not move)
        for each output tile:
            acc = sum over kk < kc of the product at k = kb*kc + kk
            out[tile] = acc + (kb > 0 ? out[tile] : 0)

so the strips of a block (kc long) stay in cache while every tile that shares them runs. The partial sums live
in the output buffer between blocks: this applies to a kernel with one store whose value is an ADD reduction
of the output's own dtype (a plain matmul), on renderers without workgroups (the blocks of one output must run
in order, on one thread: THREAD, UPCAST, LOCAL and PADTO refuse the block axis; SWAP may move it).
Matmul 2048 on one core of an EPYC (AVX-512, k blocks of 256): 65-72 -> 100-104 GFLOPS (bench/bench_cpu.py).

>>> from tg_codegen.opt import OptOps
>>> Opt(OptOps.KBLOCK, 0, 256).op.name
'KBLOCK'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tg_codegen.axes import AxisType
from tg_codegen.opt import KernelOptError, Opt
from tg_shape import ShapeTracker
from tg_uop import Ops, UOp, dtypes

if TYPE_CHECKING:
    from tg_codegen.kernel import Kernel


def carried(k: Kernel, axis: int) -> bool:
    """Is `axis` a KBLOCK block axis: an output loop along which a stored view does not move (each step adds
    into the values the step before stored)?"""
    for store in k.ast.src:
        view = store.src[1].arg.views[-1]
        if view.shape[axis] != 1 and view.strides[axis] == 0:
            return True
    return False


def apply_kblock(k: Kernel, opt: Opt) -> None:
    """Split reduce axis `opt.axis` into (blocks, opt.arg); the blocks become the first output loop."""
    if k.opts.has_local:
        raise KernelOptError(f"{opt}: KBLOCK is for CPU-style renderers (the {k.opts.device} renderer has workgroups)")
    if any(carried(k, a) for a in k.axes_of(AxisType.GLOBAL)):
        raise KernelOptError(f"{opt}: the kernel's reduction is blocked already")
    if k.axes_of(AxisType.GROUP, AxisType.LOCAL) or k.staged:
        raise KernelOptError(f"{opt}: KBLOCK does not combine with GROUP, LOCAL or STAGE")
    _check_store(k, opt)
    axis = k._pick(opt, AxisType.REDUCE)
    amt = k._amount(axis, opt.arg)
    blocks = int(k.full_shape[axis]) // amt
    if amt == int(k.full_shape[axis]):
        raise KernelOptError(f"{opt}: a block of the whole axis is no blocking")
    k._reshape_axis(axis, (blocks, amt))
    k.axis_types[axis : axis + 1] = [AxisType.GLOBAL, AxisType.REDUCE]
    k._map_views(lambda st: _expand_axis(st, axis, blocks))  # the store (and any view without k) along the blocks
    k._move_axis(axis, len(k.axes_of(AxisType.THREAD)))  # the first output loop, inside the thread loop
    block_axis = len(k.axes_of(AxisType.THREAD))
    store = k.ast.src[0]
    buf, view, value = store.src
    earlier = _blocks_before(view.arg, block_axis)
    partial = UOp(Ops.LOAD, value.dtype, (buf, UOp(Ops.VIEW, dtypes.void, (), earlier)))
    k.ast = k.ast.replace(src=(store.replace(src=(buf, view, value + partial)),))


def _check_store(k: Kernel, opt: Opt) -> None:
    """KernelOptError unless the kernel has one STORE whose value is an ADD reduction of the stored dtype."""
    if len(k.ast.src) != 1:
        raise KernelOptError(f"{opt}: KBLOCK needs a kernel with one store, this one has {len(k.ast.src)}")
    store = k.ast.src[0]
    buf, value = store.src[0], store.src[2]
    if value.op is not Ops.REDUCE_AXIS or value.arg[0] is not Ops.ADD:
        raise KernelOptError(f"{opt}: KBLOCK needs the stored value to be a sum (got {value.op.name})")
    if buf.dtype.base != value.dtype:
        raise KernelOptError(f"{opt}: the partial sums ({value.dtype}) would be stored as {buf.dtype.base}")


def _expand_axis(st: ShapeTracker, axis: int, size: int) -> ShapeTracker:
    if st.shape[axis] != 1:
        return st
    return st.expand(tuple(size if i == axis else s for i, s in enumerate(st.shape)))


def _blocks_before(st: ShapeTracker, axis: int) -> ShapeTracker:
    """The stored view, valid only after the first block: what the blocks before have summed (0 in the first)."""
    blocks = int(st.shape[axis])
    shrink = tuple((1, blocks) if i == axis else (0, s) for i, s in enumerate(st.shape))
    pad = tuple((1, 0) if i == axis else (0, 0) for i in range(len(st.shape)))
    return st.shrink(shrink).pad(pad)
