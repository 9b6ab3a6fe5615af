"""tg_uop alone: dtypes, hash-consing, the rewrite engine and constant folding."""

from __future__ import annotations

import gc

import pytest

from tg_uop import Ops, PatternMatcher, UOp, UPat, dtypes, exec_alu, graph_rewrite


def test_seed_pattern_matcher_example() -> None:
    pm = PatternMatcher([(UPat.cvar("c1") + UPat.cvar("c2"), lambda c1, c2: c1.const_like(c1.arg + c2.arg))])
    out = graph_rewrite(UOp.const(dtypes.int32, 3) + UOp.const(dtypes.int32, 4), pm)
    assert out.op is Ops.CONST and out.arg == 7


def test_hash_consing_same_object_and_freed() -> None:
    x = UOp.variable("x", 0, 10)
    assert (x * 4 + 1) is (x * 4 + 1)
    assert UOp.const(dtypes.float32, 0.0) is not UOp.const(dtypes.float32, -0.0)
    before = len(type(x).ucache)
    nodes = [x + i for i in range(1000)]
    assert len(type(x).ucache) >= before + 1000
    del nodes
    gc.collect()
    assert len(type(x).ucache) <= before + 10


def test_constant_folding_c_semantics() -> None:
    c = lambda v: UOp.const(dtypes.int32, v)  # noqa: E731
    assert (c(-7) // c(2)).simplify().arg == -3  # truncates toward zero
    assert (c(-7) % c(2)).simplify().arg == -1  # sign of the dividend
    assert (c(2**31 - 1) + c(1)).simplify().arg == -(2**31)  # wraps
    assert exec_alu(Ops.ADD, dtypes.uint8, (250, 10)) == 4
    assert exec_alu(Ops.CAST, dtypes.int32, (-2.7,)) == -2


def test_divmod_folding_from_bounds() -> None:
    x, y = UOp.variable("x", 0, 100), UOp.variable("y", 0, 3)
    assert ((x * 4 + y) // 4).simplify() is x
    assert ((x * 4 + y) % 4).simplify() is y
    assert ((x + 8) % 4).simplify().render() == "(x%4)"


def test_dtype_promotion() -> None:
    assert dtypes.least_upper(dtypes.int32, dtypes.float32) == dtypes.float32
    assert dtypes.least_upper(dtypes.bool, dtypes.int8) == dtypes.int8
    assert dtypes.least_upper(dtypes.uint8, dtypes.int8) == dtypes.int16
    assert dtypes.float32.vec(4).itemsize == 16


def test_alu_dtype_mismatch_is_typeerror() -> None:
    with pytest.raises(TypeError, match="int.*float"):
        UOp.const(dtypes.int32, 1) + UOp.const(dtypes.float32, 1.0)
