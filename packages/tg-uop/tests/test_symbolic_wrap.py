"""Rewrites of integer comparisons never move a constant that the dtype cannot hold."""

from tg_uop import UOp, dtypes
from tg_uop.evaluate import evaluate
from tg_uop.rewrite import graph_rewrite
from tg_uop.symbolic import symbolic

INT_MIN, INT_MAX = -(2**31), 2**31 - 1


def test_sum_with_int32_min_compared_to_zero_keeps_its_value() -> None:
    """`x + INT_MIN < 0` must not become `x < 2**31` (that constant wraps to INT_MIN: always false)."""
    x = UOp.variable("x", INT_MIN, INT_MAX)
    out = graph_rewrite((x + UOp.const(dtypes.int32, INT_MIN)) < UOp.const(dtypes.int32, 0), symbolic)
    for value in (INT_MAX, 0, 5):  # values for which x + INT_MIN does not overflow: the sum is negative
        assert evaluate(out, {x: value}) is True


def test_constant_moves_where_nothing_wraps() -> None:
    x = UOp.variable("x", 0, 100)
    out = graph_rewrite((x + UOp.const(dtypes.int32, 3)) < UOp.const(dtypes.int32, 10), symbolic)
    assert out == (x < UOp.const(dtypes.int32, 7))
