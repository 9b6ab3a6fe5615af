"""Symbolic algebra as rewrite rules: constant folding, identities, like terms, div/mod and comparisons.

Integer rules keep C semantics: division truncates toward zero and the sign of `%` follows the dividend,
so rules that only hold for floor division check that the operands are non-negative.

>>> from tg_uop import UOp
>>> x, y = UOp.variable("x", 0, 100), UOp.variable("y", 0, 3)
>>> ((x * 4 + y) // 4).simplify().render(), ((x * 4 + y) % 4).simplify().render()
('x', 'y')
>>> ((x + 8) % 4).simplify().render()
'(x%4)'
"""

from __future__ import annotations

import math

from tg_uop.alu import exec_alu
from tg_uop.dtype import dtypes
from tg_uop.ops import GroupOp, Ops
from tg_uop.rewrite import PatternMatcher, UPat
from tg_uop.symbolic_terms import (
    and_chain,
    combine_terms,
    fold_divmod,
    lt_sum,
    split_add,
    sum_terms,
)
from tg_uop.uop import UOp

__all__ = ["split_add", "sum_terms", "symbolic", "symbolic_simple"]


def fold_constants(x: UOp) -> UOp | None:
    """An ALU op on constants becomes a constant."""
    if x.dtype.count > 1 or not all(s.op is Ops.CONST for s in x.src):
        return None
    return x.const_like(exec_alu(x.op, x.dtype, [s.arg for s in x.src]))


def fold_by_bounds(x: UOp) -> UOp | None:
    """An integer or bool node whose range is a single value is that constant."""
    if x.op is Ops.CONST or x.dtype.count > 1 or dtypes.is_float(x.dtype):
        return None
    if x.vmin == x.vmax:
        return x.const_like(x.vmin)
    return None


def nested_div(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
    """(x // a) // b -> x // (a*b) for positive a, b (true for truncating division of any sign)."""
    if c1.arg <= 0 or c2.arg <= 0:
        return None
    return x // int(c1.arg * c2.arg)


def nested_mod(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
    """(x % a) % b -> x % b when b divides a (non-negative x)."""
    if x.vmin < 0 or c2.arg <= 0 or c1.arg % c2.arg != 0:
        return None
    return x % int(c2.arg)


def mod_of_div_mul(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
    """(x % (a*b)) // a -> (x // a) % b for non-negative x."""
    if x.vmin < 0 or c2.arg <= 0 or c1.arg % c2.arg != 0:
        return None
    return (x // int(c2.arg)) % int(c1.arg // c2.arg)


def div_lt(x: UOp, d: UOp, c: UOp) -> UOp | None:
    """x // d < c -> x < c*d for non-negative x and positive d, c."""
    if x.vmin < 0 or d.arg <= 0 or c.arg <= 0:
        return None
    return x < int(c.arg * d.arg)


def max_by_bounds(x: UOp, y: UOp) -> UOp | None:
    """max(x, y) is x when x is never below y (not for floats: a NaN operand makes max NaN)."""
    if dtypes.is_float(x.dtype):
        return None
    if x.vmin >= y.vmax:
        return x
    if y.vmin >= x.vmax:
        return y
    return None


def _is_zero(c: UOp, keeps_sign: bool) -> bool:
    """c is a zero that leaves every x unchanged under + (keeps_sign: -0.0 or an integer 0) or - (+0.0 or 0)."""
    if c.arg != 0 or c.dtype.count > 1:
        return False
    if not dtypes.is_float(c.dtype):
        return True
    return math.copysign(1.0, c.arg) < 0 if keeps_sign else math.copysign(1.0, c.arg) > 0


_INTS = dtypes.ints
_B = dtypes.bool

symbolic_simple = PatternMatcher(
    [
        # constants to the right for commutative ops
        (
            UPat(GroupOp.Commutative, src=(UPat.cvar("c"), UPat.var("x")), name="op"),
            lambda op, c, x: None if x.op is Ops.CONST else UOp(op.op, op.dtype, (x, c)),
        ),
        # folding
        (UPat(GroupOp.ALU, name="x"), fold_constants),
        (
            UPat((Ops.CAST,), src=(UPat.cvar("c"),), name="x"),
            lambda x, c: x.const_like(exec_alu(Ops.CAST, x.dtype, [c.arg])) if x.dtype.count == 1 else None,
        ),
        # identities
        # x + 0.0 is not x for x = -0.0 (it is +0.0); x + -0.0 and x - 0.0 are x for every float
        (UPat.var("x") + UPat.cvar("c"), lambda x, c: x if _is_zero(c, keeps_sign=True) else None),
        (UPat.var("x") - UPat.cvar("c"), lambda x, c: x if _is_zero(c, keeps_sign=False) else None),
        (UPat.var("x") * 1, lambda x: x),
        (UPat.var("x") // 1, lambda x: x),
        (UPat.var("x", dtype=_INTS) % 1, lambda x: x.const_like(0)),
        # tg defines integer x // 0 and x % 0 as 0 (numpy's results; C has none), and x % -1 as 0
        (UPat.var("x", dtype=_INTS) // 0, lambda x: x.const_like(0)),
        (UPat.var("x", dtype=_INTS) % 0, lambda x: x.const_like(0)),
        (UPat.var("x", dtype=_INTS) % -1, lambda x: x.const_like(0)),
        (UPat.var("x", dtype=_INTS) * 0, lambda x: x.const_like(0)),
        (UPat.var("x") - UPat.var("x"), lambda x: x.const_like(0) if dtypes.is_int(x.dtype) else None),
        (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(UPat.var("x"),)),)), lambda x: x),
        (UPat(Ops.MAX, src=(UPat.var("x"), UPat.var("x"))), lambda x: x),
        (UPat(Ops.AND, src=(UPat.var("x"), UPat.var("x"))), lambda x: x),
        (UPat(Ops.OR, src=(UPat.var("x"), UPat.var("x"))), lambda x: x),
        (UPat(Ops.WHERE, src=(UPat.var(), UPat.var("a"), UPat.var("a"))), lambda a: a),
        (UPat(Ops.WHERE, src=(UPat.cvar("c"), UPat.var("a"), UPat.var("b"))), lambda c, a, b: a if c.arg else b),
        (UPat(Ops.WHERE, _B, src=(UPat.var("c"), UPat.const(_B, True), UPat.const(_B, False))), lambda c: c),
        (UPat(Ops.WHERE, _B, src=(UPat.var("c"), UPat.const(_B, False), UPat.const(_B, True))), lambda c: c.ne(True)),
        (UPat(Ops.CAST, name="x"), lambda x: x.src[0] if x.src[0].dtype == x.dtype else None),
        # bool logic
        (UPat(Ops.AND, src=(UPat.var("x", dtype=_B), UPat.const(_B, True))), lambda x: x),
        (UPat(Ops.AND, src=(UPat.var("x", dtype=_B), UPat.const(_B, False))), lambda x: x.const_like(False)),
        (UPat(Ops.OR, src=(UPat.var("x", dtype=_B), UPat.const(_B, False))), lambda x: x),
        (UPat(Ops.OR, src=(UPat.var("x", dtype=_B), UPat.const(_B, True))), lambda x: x.const_like(True)),
        (UPat.var("x", dtype=_B).ne(False), lambda x: x),
        (UPat.var("x", dtype=_B).ne(True).ne(True), lambda x: x),
        # an integer compared with itself
        (UPat.var("x", dtype=_INTS) < UPat.var("x"), lambda x: UOp.const(dtypes.bool, False)),
        (UPat.var("x", dtype=_INTS).ne(UPat.var("x")), lambda x: UOp.const(dtypes.bool, False)),
    ]
)

symbolic = symbolic_simple + PatternMatcher(
    [
        # ranges that pin a value
        (UPat(GroupOp.ALU, name="x"), fold_by_bounds),
        # integer subtraction and negation become sums, so like terms combine
        # not for a y that can be the dtype's minimum: -y wraps, and x + y overflows where x - y did not
        # (C: undefined; gcc folded x - INT_MIN for x in [-4, 0] to INT_MIN)
        (
            UPat.var("x", dtype=_INTS) - UPat.var("y"),
            lambda x, y: x + y * -1 if dtypes.is_unsigned(y.dtype) or y.vmin > dtypes.min(y.dtype) else None,
        ),
        (-UPat.var("x", dtype=_INTS), lambda x: x * -1),
        # regroup constants: (x + c1) + c2 -> x + (c1 + c2), (x * c1) * c2 -> x * (c1 * c2)
        # (ints only: for floats the regrouped sum or product rounds, overflows or cancels differently)
        ((UPat.var("x", dtype=_INTS) + UPat.cvar("c1")) + UPat.cvar("c2"), lambda x, c1, c2: x + (c1.arg + c2.arg)),
        ((UPat.var("x", dtype=_INTS) * UPat.cvar("c1")) * UPat.cvar("c2"), lambda x, c1, c2: x * (c1.arg * c2.arg)),
        # move constants outward: (x + c) + y -> (x + y) + c
        (
            (UPat.var("x", dtype=_INTS) + UPat.cvar("c")) + UPat.var("y"),
            lambda x, c, y: None if y.op is Ops.CONST else (x + y) + c,
        ),
        # distribute constants: (x + y) * c -> x*c + y*c for ints (index maths)
        ((UPat.var("x", dtype=_INTS) + UPat.var("y")) * UPat.cvar("c"), lambda x, y, c: x * c + y * c),
        (UPat(Ops.ADD, dtype=_INTS, name="x"), combine_terms),
        # div and mod
        (UPat.var("x", dtype=_INTS) // UPat.cvar("c"), lambda x, c: fold_divmod(x, c, Ops.IDIV)),
        (UPat.var("x", dtype=_INTS) % UPat.cvar("c"), lambda x, c: fold_divmod(x, c, Ops.MOD)),
        ((UPat.var("x") // UPat.cvar("c1")) // UPat.cvar("c2"), nested_div),
        ((UPat.var("x") % UPat.cvar("c1")) % UPat.cvar("c2"), nested_mod),
        ((UPat.var("x") % UPat.cvar("c1")) // UPat.cvar("c2"), mod_of_div_mul),
        # comparisons
        (UPat.var("x", dtype=_INTS) < UPat.cvar("c"), lt_sum),
        ((UPat.var("x", dtype=_INTS) // UPat.cvar("d")) < UPat.cvar("c"), div_lt),
        (UPat(Ops.MAX, src=(UPat.var("x"), UPat.var("y"))), max_by_bounds),
        # validity chains: drop duplicated and implied clauses
        (UPat(Ops.AND, dtype=_B, name="x"), and_chain),
    ]
)
symbolic.remember_results("_symbolic")  # (pure rules: simplify() reuses what it simplified before)
