"""Simplifying under a validity condition: inside `valid`, a variable may have a narrower range.

A gated load `LOAD(buf[index], valid)` only reads where `valid` holds, so `index` may be simplified as if every
variable met the bounds `valid` puts on it.

>>> from tg_uop import UOp
>>> i = UOp.variable("i", 0, 9)
>>> simplify_given_valid((i - 1) // 4, (i >= 1) & (i < 5)).render()
'0'
"""

from __future__ import annotations

from tg_uop.dtype import dtypes
from tg_uop.ops import Ops
from tg_uop.symbolic_terms import split_and
from tg_uop.uop import UOp

_LEAVES = (Ops.DEFINE_VAR, Ops.RANGE, Ops.SPECIAL)


def clause_bound(clause: UOp) -> tuple[UOp, int | None, int | None] | None:
    """`x < c` -> (x, None, c-1); `(x < c) != True` -> (x, c, None); anything else -> None."""
    if clause.op is Ops.CMPLT and clause.src[1].op is Ops.CONST and dtypes.is_int(clause.src[0].dtype):
        return clause.src[0], None, int(clause.src[1].arg) - 1
    if clause.op is Ops.CMPNE and clause.src[1].op is Ops.CONST and clause.src[1].arg is True:
        inner = clause.src[0]
        if inner.op is Ops.CMPLT and inner.src[1].op is Ops.CONST and dtypes.is_int(inner.src[0].dtype):
            return inner.src[0], int(inner.src[1].arg), None
    return None


def valid_bounds(valid: UOp) -> dict[UOp, tuple[int, int]]:
    """The [lo, hi] that the clauses of `valid` put on each expression they bound."""
    out: dict[UOp, tuple[int, int]] = {}
    for clause in split_and(valid):
        if (b := clause_bound(clause)) is None:
            continue
        x, lo, hi = b
        cur_lo, cur_hi = out.get(x, (int(x.vmin), int(x.vmax)))
        out[x] = (max(cur_lo, lo) if lo is not None else cur_lo, min(cur_hi, hi) if hi is not None else cur_hi)
    return out


def simplify_given_valid(u: UOp, valid: UOp) -> UOp:
    """`u` simplified for the points where `valid` holds (where it does not, the result may differ)."""
    narrowed: dict[UOp, UOp] = {}
    for k, (x, (lo, hi)) in enumerate(valid_bounds(valid).items()):
        if x.op not in _LEAVES or (lo, hi) == (x.vmin, x.vmax):
            continue
        if lo > hi:  # nothing is valid: any value will do
            return u.simplify()
        narrowed[x] = UOp.variable(f"\x00valid{k}", lo, hi, x.dtype)
    if not narrowed:
        return u.simplify()
    inside = u.substitute(narrowed).simplify()
    return inside.substitute({v: x for x, v in narrowed.items()})
