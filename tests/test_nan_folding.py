"""Folding keeps IEEE semantics: max/min/compare with NaN, +-inf and -0.0, folded or not, give numpy's answer.

Each op is computed three ways in one kernel per way: both operands loaded (nothing to fold), the right one a
constant (range-based folds such as max(x, inf) -> inf), and both constants (constant folding).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tg import Tensor, dtypes

VALUES = [math.nan, math.inf, -math.inf, -0.0, 0.0, 1.0, -1.0]
OPS: dict[str, tuple[Callable[[Any, Any], Any], Callable[[Any, Any], Any]]] = {
    "maximum": (lambda a, b: a.maximum(b), np.maximum),
    "minimum": (lambda a, b: a.minimum(b), np.minimum),
    "clip_lo": (lambda a, b: a.clip(b, None), lambda a, b: np.maximum(a, b)),
    "<": (lambda a, b: a < b, np.less),
    ">": (lambda a, b: a > b, np.greater),
    "<=": (lambda a, b: a <= b, np.less_equal),
    ">=": (lambda a, b: a >= b, np.greater_equal),
    "==": (lambda a, b: a == b, np.equal),
    "!=": (lambda a, b: a != b, np.not_equal),
}
PAIRS = [(a, b) for a in VALUES for b in VALUES]


def _want(ref: Callable[[Any, Any], Any]) -> np.ndarray:
    a = np.array([p[0] for p in PAIRS], np.float32)
    b = np.array([p[1] for p in PAIRS], np.float32)
    with np.errstate(invalid="ignore"):
        return np.asarray(ref(a, b))


@pytest.mark.parametrize("name", list(OPS))
def test_fold_table(device: str, name: str) -> None:
    op, ref = OPS[name]
    want = _want(ref)
    a = Tensor([p[0] for p in PAIRS], dtype=dtypes.float32, device=device)
    b = Tensor([p[1] for p in PAIRS], dtype=dtypes.float32, device=device)
    loaded = op(a, b)
    rhs_const = Tensor.cat(*[op(Tensor(VALUES, device=device), v) for v in VALUES])  # grouped by b
    rhs_const_want = np.concatenate([_want_col(ref, v) for v in VALUES])
    both_const = Tensor.cat(*[op(Tensor.full((1,), x, device=device), y) for x, y in PAIRS])
    np.testing.assert_array_equal(loaded.numpy(), want, err_msg=f"{name}: loaded operands")
    np.testing.assert_array_equal(rhs_const.numpy(), rhs_const_want, err_msg=f"{name}: constant right operand")
    np.testing.assert_array_equal(both_const.numpy(), want, err_msg=f"{name}: constant operands")


def _want_col(ref: Callable[[Any, Any], Any], v: float) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.asarray(ref(np.array(VALUES, np.float32), np.float32(v)))


def test_folds_through_ranges(device: str) -> None:
    """Comparisons decided by ranges of max(x, c) hold for a NaN x too."""
    x = Tensor([math.nan, -5.0, 7.0, math.inf], device=device)
    a = x.numpy()
    with np.errstate(invalid="ignore"):
        compares = [
            (x.maximum(5.0) < 3.0, np.maximum(a, 5) < 3),
            (x.maximum(5.0) > 3.0, np.maximum(a, 5) > 3),
            (x.maximum(math.inf) != math.inf, np.maximum(a, np.inf) != np.inf),
            (x.maximum(math.inf) == math.inf, np.maximum(a, np.inf) == np.inf),
            (x.minimum(-math.inf) < 0.0, np.minimum(a, -np.inf) < 0),
        ]
        values = [(x.maximum(-math.inf), np.maximum(a, -np.inf)), (x.minimum(math.inf), np.minimum(a, np.inf))]
    for cases in (compares, values):
        got = Tensor.cat(*[g for g, _ in cases]).numpy()
        np.testing.assert_array_equal(got, np.concatenate([w for _, w in cases]))


def test_signed_zero_identities(device: str) -> None:
    """x + 0.0 is +0.0 for x = -0.0; x - 0.0, x + -0.0 and x * 1 keep -0.0."""
    for x in (Tensor([-0.0, 1.0], device=device), Tensor.full((2,), -0.0, device=device)):
        w = x.numpy()
        for got, want in ((x + 0.0, w + 0.0), (x - 0.0, w - 0.0), (x + -0.0, w + -0.0), (x * 1.0, w * 1.0)):
            g = got.numpy()
            np.testing.assert_array_equal(g, want)
            np.testing.assert_array_equal(np.signbit(g), np.signbit(want))


def test_float_constants_do_not_regroup(device: str) -> None:
    """(x * 1e30) * 1e-30 overflows in float32 as numpy does; it is not folded to x * 1."""
    x = Tensor([1e10, 2.0], device=device)
    a = x.numpy()
    with np.errstate(over="ignore"):
        want = (a * np.float32(1e30)) * np.float32(1e-30)
        np.testing.assert_array_equal(((x * 1e30) * 1e-30).numpy(), want)
        np.testing.assert_array_equal(((x + 1e30) - 1e30).numpy(), (a + np.float32(1e30)) - np.float32(1e30))


def test_math_of_a_nan_constant(device: str) -> None:
    """`exp2(x * nan)` is NaN (fuzzer, CL seed 3011054: PoCL turned `exp2(v * NAN)` into garbage such as 1.6e-10)."""
    x = np.array([0.5, math.inf, -1.0, 2.0], np.float32)
    for fn, ref in ((lambda t: t.exp2(), np.exp2), (lambda t: t.exp(), np.exp), (lambda t: t.log2(), np.log2)):
        got = fn(Tensor(x, device=device) * math.nan).numpy()
        with np.errstate(invalid="ignore"):
            np.testing.assert_array_equal(got, ref(x * np.float32(math.nan)))
    got64 = (Tensor(x.astype(np.float64), device=device) * math.nan).exp2().numpy()
    assert np.isnan(got64).all()
