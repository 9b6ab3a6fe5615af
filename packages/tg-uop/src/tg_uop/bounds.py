"""Range analysis: the smallest and largest value a UOp can take (`vmin`, `vmax`).

Bounds are sound: when an operation could wrap around, the dtype's full range is returned.

>>> from tg_uop import UOp
>>> x = UOp.variable("x", 0, 9)
>>> (x * 4 + 3).vmin, (x * 4 + 3).vmax, ((x * 4 + 3) % 4).vmax
(3, 39, 3)
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tg_uop.dtype import ConstType, dtypes
from tg_uop.helpers import cdiv
from tg_uop.ops import Ops

if TYPE_CHECKING:
    from tg_uop.uop import UOp


def _clip(a: ConstType, b: ConstType, lo: ConstType, hi: ConstType) -> tuple[ConstType, ConstType]:
    if a < lo or b > hi:  # possible overflow: give up precision rather than lie
        return lo, hi
    return a, b


def _leaf_bounds(u: UOp) -> tuple[ConstType, ConstType] | None:
    op, s = u.op, u.src
    if op is Ops.CONST:
        return u.arg, u.arg
    if op is Ops.DEFINE_VAR:
        return u.arg[1], u.arg[2]
    if op is Ops.BIND:
        return s[0].vmin, s[0].vmax
    if op in (Ops.RANGE, Ops.SPECIAL) and s:
        return 0, max(int(s[0].vmax) - 1, 0)
    if op is Ops.VECTORIZE and s:
        return min(x.vmin for x in s), max(x.vmax for x in s)
    if op is Ops.GEP:
        return s[0].vmin, s[0].vmax
    return None


def _cast_bounds(u: UOp, lo: ConstType, hi: ConstType) -> tuple[ConstType, ConstType]:
    src = u.src[0]
    if dtypes.is_int(u.dtype) and (dtypes.is_int(src.dtype) or src.dtype.scalar() == dtypes.bool):
        a, b = int(src.vmin), int(src.vmax)
        return (a, b) if lo <= a and b <= hi else (lo, hi)  # out of range values wrap
    return lo, hi


def _mul_bounds(u: UOp, lo: ConstType, hi: ConstType) -> tuple[ConstType, ConstType]:
    a, b = u.src
    corners = [x * y for x in (a.vmin, a.vmax) for y in (b.vmin, b.vmax)]
    if any(isinstance(c, float) and math.isnan(c) for c in corners):
        return lo, hi
    return _clip(min(corners), max(corners), lo, hi)


def _divmod_bounds(u: UOp, lo: ConstType, hi: ConstType) -> tuple[ConstType, ConstType]:
    x, d = u.src
    if d.op is not Ops.CONST or d.arg <= 0:
        return lo, hi
    c = int(d.arg)
    if u.op is Ops.IDIV:
        return cdiv(int(x.vmin), c), cdiv(int(x.vmax), c)
    if x.vmin >= 0:
        return (x.vmin, x.vmax) if x.vmax < c else (0, c - 1)
    if x.vmax <= 0:
        return (x.vmin, x.vmax) if x.vmin > -c else (-(c - 1), 0)
    return -(c - 1), c - 1


def _may_be_nan(u: UOp) -> bool:
    """Float ranges do not track NaN: any float that is not a constant may be one."""
    if not dtypes.is_float(u.dtype):
        return False
    return u.op is not Ops.CONST or (isinstance(u.arg, float) and math.isnan(u.arg))


def _compare_bounds(u: UOp) -> tuple[ConstType, ConstType]:
    """A comparison is decided by ranges only where a NaN operand would decide it the same way.

    A NaN makes `<` False and `!=` True, so those answers stand for floats; the others need
    operands that cannot be NaN.
    """
    a, b = u.src
    nan = _may_be_nan(a) or _may_be_nan(b)
    if u.op is Ops.CMPLT:
        if a.vmax < b.vmin and not nan:
            return True, True
        if a.vmin >= b.vmax:
            return False, False
        return False, True
    if a.vmax < b.vmin or a.vmin > b.vmax:
        return True, True
    if a.vmin == a.vmax == b.vmin == b.vmax and not nan:
        return False, False
    return False, True


def bounds(u: UOp) -> tuple[ConstType, ConstType]:
    """(vmin, vmax) of `u`, from its sources' bounds: the range of its values other than NaN.

    A bound is never NaN: a NaN constant, or an operation whose bound comes out NaN (`x + inf` with
    `x` down to -inf), gets its dtype's whole range. (A NaN bound was not a range: `min`/`max` of it
    depend on the order of their arguments, so `where(c, 0.0, where(d, nan, x))` got the range
    [0.0, 0.0] and `1e-12 < it` folded to False.)
    """
    vmin, vmax = _bounds(u)
    if (isinstance(vmin, float) and math.isnan(vmin)) or (isinstance(vmax, float) and math.isnan(vmax)):
        dt = u.dtype.scalar()
        return dtypes.min(dt), dtypes.max(dt)
    return vmin, vmax


def _bounds(u: UOp) -> tuple[ConstType, ConstType]:
    if (leaf := _leaf_bounds(u)) is not None:
        return leaf
    dt = u.dtype.scalar()
    lo, hi = dtypes.min(dt), dtypes.max(dt)
    op, s = u.op, u.src
    if op is Ops.CAST:
        return _cast_bounds(u, lo, hi)
    if op is Ops.ADD:
        return _clip(s[0].vmin + s[1].vmin, s[0].vmax + s[1].vmax, lo, hi)
    if op is Ops.SUB:
        return _clip(s[0].vmin - s[1].vmax, s[0].vmax - s[1].vmin, lo, hi)
    if op is Ops.NEG and not dtypes.is_unsigned(dt) and dt != dtypes.bool:
        return _clip(-s[0].vmax, -s[0].vmin, lo, hi)
    if op is Ops.MUL:
        return _mul_bounds(u, lo, hi)
    if op is Ops.MAX:
        return max(s[0].vmin, s[1].vmin), max(s[0].vmax, s[1].vmax)
    if op in (Ops.IDIV, Ops.MOD):
        return _divmod_bounds(u, lo, hi)
    if op is Ops.AND and dtypes.is_int(dt) and s[1].vmin >= 0 and s[0].vmin >= 0:
        return 0, min(s[0].vmax, s[1].vmax)
    if op is Ops.AND and dt == dtypes.bool:
        return bool(s[0].vmin and s[1].vmin), bool(s[0].vmax and s[1].vmax)
    if op is Ops.OR and dt == dtypes.bool:
        return bool(s[0].vmin or s[1].vmin), bool(s[0].vmax or s[1].vmax)
    if op is Ops.WHERE:
        return _where_bounds(u)
    if op in (Ops.CMPLT, Ops.CMPNE):
        return _compare_bounds(u)
    return lo, hi


def _where_bounds(u: UOp) -> tuple[ConstType, ConstType]:
    c, a, b = u.src
    if c.vmin == c.vmax:
        return (a.vmin, a.vmax) if c.vmin else (b.vmin, b.vmax)
    return min(a.vmin, b.vmin), max(a.vmax, b.vmax)
