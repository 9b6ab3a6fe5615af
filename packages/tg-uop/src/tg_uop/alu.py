"""The meaning of every ALU op on Python scalars, with C semantics for the dtype.

Used for constant folding, by the evaluator and by the PYTHON device.

>>> from tg_uop import Ops, dtypes
>>> exec_alu(Ops.IDIV, dtypes.int32, (-7, 2)), exec_alu(Ops.MOD, dtypes.int32, (-7, 2))
(-3, -1)
>>> exec_alu(Ops.ADD, dtypes.uint8, (250, 10))
4
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from typing import Any

from tg_uop.dtype import ConstType, DType, dtypes, truncate_const
from tg_uop.helpers import cdiv, cmod
from tg_uop.ops import Ops


def _safe_div(x: float, y: float) -> float:
    if y == 0:
        if x == 0 or math.isnan(x):
            return math.nan
        return math.copysign(math.inf, x) * math.copysign(1.0, y)
    return x / y


def _exp2(x: float) -> float:
    try:
        return math.pow(2.0, x)
    except OverflowError:
        return math.inf


def _log2(x: float) -> float:
    if math.isnan(x) or x < 0:
        return math.nan
    return -math.inf if x == 0 else math.log2(x)


def _sin(x: float) -> float:
    return math.nan if math.isinf(x) or math.isnan(x) else math.sin(x)


def _sqrt(x: float) -> float:
    return math.nan if math.isnan(x) or x < 0 else math.sqrt(x)


def _recip(x: float) -> float:
    return _safe_div(1.0, x)


def _trunc(x: Any) -> Any:
    if isinstance(x, (int, bool)) or math.isinf(x) or math.isnan(x):
        return x
    return math.copysign(float(math.trunc(x)), x)  # C's trunc keeps the sign: trunc(-0.5) is -0.0


def _idiv(x: int, y: int) -> int:
    if not y:
        return 0
    if type(x) is int and type(y) is int:  # fast path for the common case
        return x // y if (x >= 0) == (y > 0) else -(-x // y)
    return cdiv(int(x), int(y))


def _mod(x: int, y: int) -> int:
    if not y:
        return 0
    return cmod(int(x), int(y))


def _max(x: Any, y: Any) -> Any:
    """NaN if either is NaN, else `x > y ? x : y` as the C renderers write it (max(0.0, -0.0) is -0.0)."""
    if isinstance(x, float) and math.isnan(x) or isinstance(y, float) and math.isnan(y):
        return math.nan
    return x if x > y else y


PYTHON_ALU: dict[Ops, Callable[..., Any]] = {
    Ops.EXP2: _exp2,
    Ops.LOG2: _log2,
    Ops.SIN: _sin,
    Ops.SQRT: _sqrt,
    Ops.RECIP: _recip,
    Ops.NEG: lambda x: (not x) if isinstance(x, bool) else -x,
    Ops.TRUNC: _trunc,
    Ops.ADD: lambda x, y: x + y,
    Ops.SUB: lambda x, y: x - y,
    Ops.MUL: lambda x, y: x * y,
    Ops.FDIV: _safe_div,
    Ops.IDIV: _idiv,
    Ops.MOD: _mod,
    Ops.MAX: _max,
    Ops.CMPLT: lambda x, y: x < y,
    Ops.CMPNE: lambda x, y: x != y,
    Ops.XOR: lambda x, y: x ^ y,
    Ops.OR: lambda x, y: x | y,
    Ops.AND: lambda x, y: x & y,
    Ops.SHL: lambda x, y: x << y,
    Ops.SHR: lambda x, y: x >> y,
    Ops.WHERE: lambda c, x, y: x if c else y,
    Ops.MULACC: lambda x, y, z: x * y + z,
}


def exec_alu(op: Ops, dtype: DType, operands: Sequence[ConstType]) -> ConstType:
    """Evaluate one ALU op on Python scalars with C semantics for `dtype` (wrap-around, truncation).

    `dtype` is the dtype of the result (bool for comparisons). Integer division and modulo by zero give 0
    and MIN // -1 wraps to MIN (tg defines what C leaves undefined, as numpy does and every renderer
    emits); shifts by the bit width or more give 0.

    >>> exec_alu(Ops.IDIV, dtypes.int32, (-7, 2))
    -3
    """
    if dtype.count > 1:
        raise TypeError(f"exec_alu works on scalars, got the vector dtype {dtype}")
    if op is Ops.CAST:
        return cast_const(operands[0], dtype)
    if op not in PYTHON_ALU:
        raise ValueError(f"exec_alu: {op} is not an ALU op")
    if op in (Ops.SHL, Ops.SHR) and not 0 <= int(operands[1]) < 8 * dtype.itemsize:
        return 0
    ret = PYTHON_ALU[op](*operands)
    if dtypes.is_int(dtype) and isinstance(ret, float):
        ret = int(ret) if math.isfinite(ret) else 0
    return truncate_const(ret, dtype)


def cast_const(value: ConstType, dtype: DType) -> ConstType:
    """C conversion of a scalar to `dtype` (float to int truncates; NaN/inf give the dtype minimum).

    >>> cast_const(-2.7, dtypes.int8), cast_const(300, dtypes.uint8)
    (-2, 44)
    """
    if dtypes.is_int(dtype) and isinstance(value, float):
        if not math.isfinite(value):
            return dtypes.min(dtype)
        value = math.trunc(value)
    return truncate_const(value, dtype)


def bitcast_const(value: ConstType, src: DType, dst: DType) -> ConstType:
    """Reinterpret the bytes of `value` (of dtype `src`) as `dst`.

    >>> hex(bitcast_const(1.0, dtypes.float32, dtypes.uint32))
    '0x3f800000'
    """
    if src.fmt is None or dst.fmt is None:
        raise TypeError(f"cannot bitcast {src} to {dst}")
    if src.itemsize != dst.itemsize:
        raise TypeError(f"bitcast changes itemsize: {src} ({src.itemsize}) -> {dst} ({dst.itemsize})")
    return struct.unpack("<" + dst.fmt, struct.pack("<" + src.fmt, value))[0]  # type: ignore[no-any-return]
