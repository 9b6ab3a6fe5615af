"""Constant folding of every ALU op for every dtype gives what C (numpy's fixed-width arithmetic) gives."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest

from tg_uop import DType, Ops, UOp, dtypes, exec_alu
from tg_uop.dtype import truncate_const
from tg_uop.evaluate import evaluate_many

INTS = [
    dtypes.int8,
    dtypes.uint8,
    dtypes.int16,
    dtypes.uint16,
    dtypes.int32,
    dtypes.uint32,
    dtypes.int64,
    dtypes.uint64,
]
FLOATS = [dtypes.float16, dtypes.float32, dtypes.float64]


def _np(d: DType) -> Any:
    return np.dtype(dtypes.to_np_name(d))


def _values(d: DType, n: int, rng: random.Random) -> list[int]:
    lo, hi = int(d.min), int(d.max)
    edges = [lo, hi, 0, 1, -1 if lo < 0 else 2, lo + 1, hi - 1, 7]
    return edges + [rng.randint(lo, hi) for _ in range(n)] + [rng.randint(-300, 300) % (hi + 1) for _ in range(n)]


def _fold(op: Ops, d: DType, *args: Any) -> Any:
    srcs = [UOp.const(d, a) for a in args]
    folded = srcs[0].alu(op, *srcs[1:]).simplify()
    assert folded.op is Ops.CONST, f"{op} on {args} did not fold"
    return folded.arg


def _c_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    q = a // b
    return q + ((np.fmod(a, b) != 0) & ((a < 0) != (b < 0))).astype(a.dtype)


INT_ORACLE = {
    Ops.ADD: lambda a, b: a + b,
    Ops.SUB: lambda a, b: a - b,
    Ops.MUL: lambda a, b: a * b,
    Ops.IDIV: _c_div,
    Ops.MOD: np.fmod,
    Ops.MAX: np.maximum,
    Ops.CMPLT: lambda a, b: a < b,
    Ops.CMPNE: lambda a, b: a != b,
    Ops.XOR: np.bitwise_xor,
    Ops.OR: np.bitwise_or,
    Ops.AND: np.bitwise_and,
}


@pytest.mark.parametrize("d", INTS, ids=str)
def test_int_binary_ops(d: DType) -> None:
    rng = random.Random(str(d))
    xs, ys = _values(d, 30, rng), _values(d, 30, rng)
    rng.shuffle(ys)
    a, b = np.array(xs, dtype=_np(d)), np.array(ys, dtype=_np(d))
    with np.errstate(all="ignore"):
        for op, fn in INT_ORACLE.items():
            want = fn(a, b)
            for k, (x, y) in enumerate(zip(xs, ys)):
                if op in (Ops.IDIV, Ops.MOD) and (y == 0 or (x == d.min and y == -1)):
                    continue  # undefined in C
                assert _fold(op, d, x, y) == want[k].item(), (op, d, x, y)


@pytest.mark.parametrize("d", INTS, ids=str)
def test_int_shifts_neg_where(d: DType) -> None:
    rng = random.Random(str(d))
    xs = _values(d, 20, rng)
    bits = 8 * d.itemsize
    a = np.array(xs, dtype=_np(d))
    with np.errstate(all="ignore"):
        for s in (0, 1, 3, bits - 1):
            sh = np.array(s, dtype=_np(d))
            assert [_fold(Ops.SHL, d, x, s) for x in xs] == np.left_shift(a, sh).tolist()
            assert [_fold(Ops.SHR, d, x, s) for x in xs] == np.right_shift(a, sh).tolist()
        assert [_fold(Ops.NEG, d, x) for x in xs] == (-a if d.min < 0 else (0 - a)).tolist()
    t, f = UOp.const(dtypes.bool, True), UOp.const(dtypes.bool, False)
    x, y = UOp.const(d, xs[0]), UOp.const(d, xs[1])
    assert t.where(x, y).simplify() is x and f.where(x, y).simplify() is y


def _same_float(got: float, want: float) -> bool:
    return (math.isnan(got) and math.isnan(want)) or (got == want and math.copysign(1, got) == math.copysign(1, want))


FLOAT_ORACLE = {
    Ops.ADD: lambda a, b: a + b,
    Ops.SUB: lambda a, b: a - b,
    Ops.MUL: lambda a, b: a * b,
    Ops.FDIV: lambda a, b: a / b,
    Ops.MAX: np.maximum,
    Ops.CMPLT: lambda a, b: a < b,
    Ops.CMPNE: lambda a, b: a != b,
}
FLOAT_UNARY = {Ops.NEG: np.negative, Ops.SQRT: np.sqrt, Ops.RECIP: np.reciprocal, Ops.TRUNC: np.trunc}
FLOAT_TRANSCENDENTAL = {Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin}


def _float_values(d: DType, rng: random.Random) -> list[float]:
    special = [0.0, -0.0, 1.0, -1.5, 3.25, 1e-3, 1e4, math.inf, -math.inf, math.nan, 65504.0, 2.5]
    return [truncate_const(v, d) for v in special + [rng.uniform(-100, 100) for _ in range(40)]]  # type: ignore[misc]


@pytest.mark.parametrize("d", FLOATS, ids=str)
def test_float_ops(d: DType) -> None:
    rng = random.Random(str(d))
    xs = _float_values(d, rng)
    ys = xs[::-1]
    a, b = np.array(xs, dtype=_np(d)), np.array(ys, dtype=_np(d))
    with np.errstate(all="ignore"):
        for op, fn in FLOAT_ORACLE.items():
            want = fn(a, b).tolist()
            got = [_fold(op, d, x, y) for x, y in zip(xs, ys)]
            assert all(_same_float(g, w) if op not in (Ops.CMPLT, Ops.CMPNE) else g == w for g, w in zip(got, want)), op
        for op, fn in FLOAT_UNARY.items():
            want = fn(a).tolist()
            assert all(_same_float(_fold(op, d, x), w) for x, w in zip(xs, want)), op
        for op, fn in FLOAT_TRANSCENDENTAL.items():
            want = fn(a.astype(np.float64)).astype(_np(d)).tolist()  # correctly rounded reference
            for x, w in zip(xs, want):
                g = _fold(op, d, x)
                assert _same_float(g, w) or math.isclose(g, w, rel_tol=2 * np.finfo(_np(d)).eps), (op, x, g, w)


def test_bool_ops() -> None:
    for x in (False, True):
        for y in (False, True):
            for op, want in ((Ops.AND, x and y), (Ops.OR, x or y), (Ops.XOR, x != y), (Ops.CMPNE, x != y)):
                assert _fold(op, dtypes.bool, x, y) is want
            assert _fold(Ops.CMPLT, dtypes.bool, x, y) is (x < y)
            assert _fold(Ops.MAX, dtypes.bool, x, y) is (x or y)


@pytest.mark.parametrize("src", INTS + FLOATS + [dtypes.bool], ids=str)
def test_casts(src: DType) -> None:
    vals = [0, 1, 5, 100, 127] + ([-1, -100, -128] if src.min < 0 else [])
    if dtypes.is_float(src):
        vals += [2.7, -2.7, 0.5, 126.9]  # type: ignore[list-item]
    if src == dtypes.bool:
        vals = [0, 1]
    for dst in INTS + FLOATS + [dtypes.bool]:
        arr = np.array([truncate_const(v, src) for v in vals], dtype=_np(src))
        with np.errstate(all="ignore"):
            want = arr.astype(_np(dst)).tolist()
        got = [UOp.const(src, v).cast(dst).simplify().arg for v in vals]
        assert got == want, (src, dst)


def test_bfloat16_folding_rounds_to_bfloat16() -> None:
    a, b = UOp.const(dtypes.bfloat16, 1.0), UOp.const(dtypes.bfloat16, 2**-9)
    assert (a + b).simplify().arg == 1.0  # 1 + 2^-9 is below half a bfloat16 ulp at 1
    assert (a * 3.0 / 7.0).simplify().arg == truncate_const(truncate_const(3.0, dtypes.bfloat16) / 7, dtypes.bfloat16)


@pytest.mark.parametrize("d", INTS + FLOATS, ids=str)
def test_evaluator_agrees_with_exec_alu(d: DType) -> None:
    """The evaluator's list fast paths give exactly exec_alu's C semantics."""
    rng = random.Random(3)
    if dtypes.is_int(d):
        xs, ys = _values(d, 20, rng), _values(d, 20, rng)
        ops = [op for op in INT_ORACLE if op not in (Ops.IDIV, Ops.MOD)] + [Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR]
    else:
        xs, ys = _float_values(d, rng), _float_values(d, rng)[::-1]
        ops = list(FLOAT_ORACLE)
    a, b = UOp(Ops.DEFINE_VAR, d, (), ("a", 0, 1)), UOp(Ops.DEFINE_VAR, d, (), ("b", 0, 1))
    for op in ops:
        got = evaluate_many(a.alu(op, b), {a: xs, b: ys})
        out = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE) else d
        want = [exec_alu(op, out, (x, y)) for x, y in zip(xs, ys)]
        assert all(_same_float(g, w) if isinstance(w, float) else g == w for g, w in zip(got, want)), (op, d)
