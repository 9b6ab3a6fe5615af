"""The UOp evaluator: compute an expression's value with C semantics, at one point or at many at once.

>>> from tg_uop import UOp
>>> x, y = UOp.variable("x", 0, 9), UOp.variable("y", 0, 9)
>>> evaluate((x * 4 + y) // 3, {x: 2, y: 5})
4
>>> evaluate_many(x % 3, {x: [0, 1, 2, 3, 4]})
[0, 1, 2, 0, 1]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tg_uop.alu import PYTHON_ALU, bitcast_const, cast_const, exec_alu
from tg_uop.dtype import ConstType, DType, dtypes, truncate_const
from tg_uop.ops import GroupOp, Ops
from tg_uop.uop import UOp


def evaluate(u: UOp, env: Mapping[UOp, ConstType]) -> ConstType:
    """The value of `u` where each key of `env` (a variable, RANGE, ... or any subexpression) has its value."""
    return evaluate_many(u, {k: [v] for k, v in env.items()})[0]


def evaluate_many(u: UOp, env: Mapping[UOp, Sequence[ConstType]]) -> list[ConstType]:
    """The values of `u` at many points: `env` maps nodes to equally long lists of values.

    Every op is evaluated once over the whole list, so this is much faster than a loop of `evaluate`.
    """
    lengths = {len(v) for v in env.values()}
    if len(lengths) > 1:
        raise ValueError(f"evaluate_many: the value lists differ in length: {sorted(lengths)}")
    n = lengths.pop() if lengths else 1
    values: dict[UOp, list[ConstType]] = {}
    bound = {b.src[0]: b.src[1].arg for b in u.toposort if b.op is Ops.BIND}  # a bound variable has its value
    for node in u.toposort:
        if node in env:
            values[node] = list(env[node])
        elif node in bound:
            values[node] = [bound[node]] * n
        else:
            values[node] = _eval_node(node, [values[s] for s in node.src], n)
    return values[u]


def _eval_node(node: UOp, srcs: list[list[ConstType]], n: int) -> list[ConstType]:
    op = node.op
    if op is Ops.CONST:
        return [node.arg] * n
    if op is Ops.BIND:
        return srcs[1]
    if op is Ops.CAST:
        return [cast_const(v, node.dtype) for v in srcs[0]]
    if op is Ops.BITCAST:
        src_dtype = node.src[0].dtype
        return [bitcast_const(v, src_dtype, node.dtype) for v in srcs[0]]
    if op in GroupOp.ALU:
        return _eval_alu(op, node.dtype, srcs)
    what = f"variable {node.arg[0]!r}" if op is Ops.DEFINE_VAR else f"{op} node"
    raise ValueError(f"evaluate: no value given for the {what} (dtype {node.dtype})")


_INT_SLOW = (GroupOp.Unary - {Ops.NEG}) | {Ops.FDIV}  # int ops whose float results exec_alu converts


def _eval_alu(op: Ops, dtype: DType, srcs: list[list[ConstType]]) -> list[ConstType]:
    if dtype.count > 1:
        raise TypeError(f"evaluate works on scalars, got {op} of dtype {dtype}")
    if op in (Ops.SHL, Ops.SHR) or (dtypes.is_int(dtype) and op in _INT_SLOW):
        return [exec_alu(op, dtype, args) for args in zip(*srcs)]
    fn: Callable[..., Any] = PYTHON_ALU[op]
    ret = list(map(fn, *srcs))
    if dtypes.is_int(dtype):
        return _wrap_ints(ret, dtype)
    if dtypes.is_float(dtype) and dtype.scalar() != dtypes.float64:
        return [truncate_const(v, dtype) for v in ret]
    if dtype.scalar() == dtypes.bool:
        return [bool(v) for v in ret]
    return ret


def _wrap_ints(vals: list[Any], dtype: DType) -> list[ConstType]:
    lo, hi = int(dtypes.min(dtype)), int(dtypes.max(dtype))
    if vals and all(isinstance(v, int) for v in vals) and lo <= min(vals) and max(vals) <= hi:
        return vals
    return [truncate_const(int(v) if math.isfinite(v) else 0, dtype) for v in vals]
