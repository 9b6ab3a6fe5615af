"""bfloat16 on devices whose compilers have no bf16 arithmetic (gcc 12's C, OpenCL): float math, bf16 storage.

The kernel AST is rewritten before optimization: a bf16 value lives in a float32 register holding a
bf16-representable number. Loads widen the 16 stored bits (`bits << 16` as float32); every op that
yields bf16 computes in float32 and rounds to the nearest bf16 (ties to even; NaN stays NaN), so
results equal true bf16 arithmetic (as on the PYTHON device and CUDA); stores keep the top 16 bits.
Renderers that emulate (`Renderer.emulate_bf16`) print bf16 as a 16-bit unsigned integer type.

>>> from tg_codegen.bf16 import emulate_bf16  # doctest: +SKIP
"""

from __future__ import annotations

from tg_shape import ShapeTracker
from tg_uop import GroupOp, Ops, UOp, dtypes, map_graph

BF16, F32, U32 = dtypes.bfloat16, dtypes.float32, dtypes.uint32


def uses_bf16(ast: UOp) -> bool:
    return any(u.dtype.scalar() == BF16 or (u.op is Ops.DEFINE_GLOBAL and u.dtype.base == BF16) for u in ast.toposort)


def emulate_bf16(ast: UOp) -> UOp:
    """The kernel AST with bf16 arithmetic done in float32 (see the module doc)."""
    if not uses_bf16(ast):
        return ast
    return map_graph("emulate bf16", _rewrite, ast)


def _rewrite(u: UOp, src: tuple[UOp, ...]) -> UOp:
    if u.op is Ops.LOAD and u.dtype == BF16:
        raw = u.replace(src=src)  # printed as a 16-bit unsigned integer
        return _bits_to_float(raw.cast(U32) << _c(raw, 16, U32))
    if u.op is Ops.STORE and src[2].dtype == F32 and u.src[2].dtype == BF16:
        value = src[2]
        bits = value.bitcast(U32) >> _c(value, 16, U32)
        return u.replace(src=(*src[:2], bits.cast(BF16), *src[3:]))
    if u.op is Ops.CONST and u.dtype == BF16:
        return u.replace(dtype=F32, src=src, arg=_round_py(float(u.arg)))
    if u.op is Ops.CAST and u.dtype == BF16:
        x = src[0] if src[0].dtype == F32 else src[0].cast(F32)
        return x if u.src[0].dtype == BF16 else _round(x)
    if u.op is Ops.CAST and u.src[0].dtype == BF16:
        return src[0] if u.dtype == F32 else src[0].cast(u.dtype)
    if u.op is Ops.BITCAST and BF16 in (u.dtype, u.src[0].dtype):
        raise NotImplementedError("bitcast to or from bfloat16 is not supported where bf16 is emulated")
    if u.dtype == BF16 and (u.op in GroupOp.ALU or u.op is Ops.REDUCE_AXIS):
        ret = u.replace(dtype=F32, src=src)
        return (
            ret
            if u.op in (Ops.WHERE, Ops.MAX, Ops.NEG) or u.op is Ops.REDUCE_AXIS and u.arg[0] is Ops.MAX
            else _round(ret)
        )
    return u.replace(src=src) if src != u.src else u


def _c(like: UOp, value: int, dtype: object) -> UOp:
    """A constant of `like`'s shape, as the kernel AST writes constants (a CONST over a broadcast VIEW)."""
    shape = tuple(like.shape or ())
    st = ShapeTracker.from_shape((1,) * len(shape)).expand(shape)
    return UOp(Ops.CONST, dtype, (UOp(Ops.VIEW, dtypes.void, (), st),), value)  # type: ignore[arg-type]


def _bits_to_float(bits: UOp) -> UOp:
    return bits.bitcast(F32)


def _round(x: UOp) -> UOp:
    """float32 -> the nearest bf16 (ties to even), still as float32; NaN stays NaN."""
    bits = x.bitcast(U32)
    lsb = (bits >> _c(x, 16, U32)) & _c(x, 1, U32)
    rounded = (bits + _c(x, 0x7FFF, U32) + lsb) & _c(x, 0xFFFF0000, U32)
    return x.ne(x).where(x, _bits_to_float(rounded))


def _round_py(v: float) -> float:
    import struct

    if v != v:
        return v
    bits = struct.unpack("<I", struct.pack("<f", v))[0]
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000) & 0xFFFFFFFF
    return float(struct.unpack("<f", struct.pack("<I", bits))[0])
