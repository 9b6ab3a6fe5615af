"""The TC opt: `Opt(OptOps.TC, axis, arg)` runs the multiply-accumulate of a matmul-like kernel on tensor cores.

How it is applied (`apply_tc`):
  - the kernel must be `REDUCE_AXIS(ADD, MUL(a, b))` (a CAST to the accumulation dtype around the MUL or around
    each operand is allowed) where a and b are LOADs of the tensor core's input dtype and the reduce is in its
    accumulation dtype; `axis` is the n-th reduce axis (K), `arg` the n-th of the renderer's tensor cores for
    that dtype (cores.py). The output axis M is one along which a moves and b does not, N the other way round.
  - M, N and K are split by the tile sizes; the tile parts become the axis types "tcm", "tcn", "tck" (kept
    last, in that order). The rest of the kernel (global ids, LOCAL warps, UPCAST register tiles, UNROLL)
    works on the outer parts as usual. lower.py lowers the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tg_codegen.axes import AxisType
from tg_codegen.opt import KernelOptError, Opt, OptOps
from tg_codegen.tc.cores import ALLOW_TF32, TensorCore
from tg_shape import ShapeTracker
from tg_uop import Ops, UOp, dtypes

if TYPE_CHECKING:
    from tg_codegen.kernel import Kernel

TC_AXIS_TYPES = (AxisType.TCM, AxisType.TCN, AxisType.TCK)


def usable_tensor_cores(k: Kernel) -> list[TensorCore]:
    """The renderer's tensor cores that may be used now (the TF32 one only under ALLOW_TF32)."""
    tcs = [tc for tc in k.opts.tensor_cores if isinstance(tc, TensorCore)]
    return [tc for tc in tcs if tc.dtype_in != dtypes.float32 or ALLOW_TF32.value]


# ---------------------------------------------------------------------------------------------
# matching and applying the opt


@dataclass(frozen=True)
class _Match:
    tc: TensorCore
    k_axis: int
    m_axis: int
    n_axis: int


def _strip_cast(u: UOp) -> UOp:
    return u.src[0] if u.op is Ops.CAST else u


def mma_operands(reduce: UOp) -> tuple[UOp, UOp] | None:
    """The two LOADs multiplied under `reduce` (REDUCE_AXIS(ADD, [CAST](MUL([CAST]a, [CAST]b)))), else None."""
    if reduce.arg[0] is not Ops.ADD:
        return None
    mul = _strip_cast(reduce.src[0])
    if mul.op is not Ops.MUL:
        return None
    a, b = (_strip_cast(s) for s in mul.src)
    if a.op is not Ops.LOAD or b.op is not Ops.LOAD or a.dtype != b.dtype:
        return None
    return a, b


def moving(load: UOp, axis: int) -> bool:
    """Does this load's address move along `axis` (None strides, as under a mask, count as moving)?"""
    st: ShapeTracker = load.src[1].arg
    return st.real_strides()[axis] != 0


def _match(k: Kernel, opt: Opt) -> _Match:
    if k.applied_opts:
        raise KernelOptError(f"{opt}: TC must be the first opt, got {k.applied_opts} before it")
    reduces = k.reduceops
    if len(reduces) != 1 or (ops := mma_operands(reduces[0])) is None:
        raise KernelOptError(f"{opt}: TC needs one ADD reduction of a product of two loads (a matmul)")
    a, b = ops
    cands = [tc for tc in usable_tensor_cores(k) if tc.dtype_in == a.dtype]
    if not cands:
        have = sorted({tc.dtype_in.name for tc in usable_tensor_cores(k)})
        tf32 = " (fp32 takes the TF32 tensor core only under ALLOW_TF32=1)" if a.dtype == dtypes.float32 else ""
        raise KernelOptError(f"{opt}: no tensor core takes {a.dtype.name} inputs here (inputs: {have}){tf32}")
    if opt.arg >= len(cands):
        raise KernelOptError(f"{opt}: arg {opt.arg} picks a tensor core, but only {len(cands)} take {a.dtype.name}")
    tc = cands[opt.arg]
    if reduces[0].dtype != tc.dtype_out:
        raise KernelOptError(f"{opt}: the reduction accumulates in {reduces[0].dtype.name}, TC in {tc.dtype_out.name}")
    k_axis = k._pick(opt, AxisType.REDUCE)
    globals_ = k.axes_of(AxisType.GLOBAL)
    m_axes = [x for x in globals_ if moving(a, x) and not moving(b, x)]
    n_axes = [x for x in globals_ if moving(b, x) and not moving(a, x)]
    if not m_axes or not n_axes or not (moving(a, k_axis) and moving(b, k_axis)):
        raise KernelOptError(f"{opt}: the loads do not form a matmul (no M, N axes or K not shared)")
    return _Match(tc, k_axis, m_axes[-1], n_axes[-1])


def apply_tc(k: Kernel, opt: Opt) -> None:
    """Split M, N and K by the tensor core's tile; raises KernelOptError where TC does not apply."""
    if not k.opts.tensor_cores:
        raise KernelOptError(f"{opt}: the {k.opts.device or 'generic'} renderer has no tensor cores")
    if not k.opts.has_local:
        raise KernelOptError(f"{opt}: tensor cores need a renderer with local (warp) ids")
    m = _match(k, opt)
    tm, tn, tk = m.tc.dims
    for axis, size, name in ((m.m_axis, tm, "M"), (m.n_axis, tn, "N"), (m.k_axis, tk, "K")):
        full = k.full_shape[axis]
        if not isinstance(full, int) or full % size != 0:
            raise KernelOptError(f"{opt}: {name} axis of size {full} is not a multiple of the tensor core's {size}")
    # each split moves its tile part to the end, so the other axes keep their numbers
    for axis, size, kind in zip((m.m_axis, m.n_axis, m.k_axis), m.tc.dims, TC_AXIS_TYPES):
        k._split(axis, size, kind, inner=True)
    k.wgmma = m.tc.wgmma


def applied_tensor_core(k: Kernel) -> TensorCore:
    """The tensor core a kernel's TC opt picked (the kernel must have one applied)."""
    opt = next(o for o in k.applied_opts if o.op is OptOps.TC)
    reduce = k.reduceops[0]
    ops = mma_operands(reduce)
    if ops is None:
        raise KernelOptError(f"{opt}: the kernel no longer matches a matmul")
    cands = [tc for tc in usable_tensor_cores(k) if tc.dtype_in == ops[0].dtype]
    return cands[opt.arg]
