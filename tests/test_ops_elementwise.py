"""Elementwise ops against numpy on every device: broadcasting, non-contiguous inputs, 0-d, size-0, dtypes."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tg import Tensor, dtypes

F = Callable[..., Any]


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(x.astype(np.float64)).astype(np.float32)


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0, x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def _round_half_even(x: np.ndarray) -> np.ndarray:
    return np.round(x)


# name: (tg function, numpy function, (low, high) input range)
UNARY: dict[str, tuple[F, F, tuple[float, float]]] = {
    "neg": (lambda t: -t, np.negative, (-3, 3)),
    "abs": (lambda t: t.abs(), np.abs, (-3, 3)),
    "sign": (lambda t: t.sign(), np.sign, (-3, 3)),
    "reciprocal": (lambda t: t.reciprocal(), np.reciprocal, (0.5, 3)),
    "sqrt": (lambda t: t.sqrt(), np.sqrt, (0.1, 4)),
    "rsqrt": (lambda t: t.rsqrt(), lambda x: 1 / np.sqrt(x), (0.1, 4)),
    "exp": (lambda t: t.exp(), np.exp, (-3, 3)),
    "exp2": (lambda t: t.exp2(), np.exp2, (-3, 3)),
    "log": (lambda t: t.log(), np.log, (0.1, 4)),
    "log2": (lambda t: t.log2(), np.log2, (0.1, 4)),
    "sin": (lambda t: t.sin(), np.sin, (-3, 3)),
    "cos": (lambda t: t.cos(), np.cos, (-3, 3)),
    "tan": (lambda t: t.tan(), np.tan, (-1.2, 1.2)),
    "asin": (lambda t: t.asin(), np.arcsin, (-0.99, 0.99)),
    "acos": (lambda t: t.acos(), np.arccos, (-0.99, 0.99)),
    "atan": (lambda t: t.atan(), np.arctan, (-3, 3)),
    "sinh": (lambda t: t.sinh(), np.sinh, (-3, 3)),
    "cosh": (lambda t: t.cosh(), np.cosh, (-3, 3)),
    "tanh": (lambda t: t.tanh(), np.tanh, (-3, 3)),
    "asinh": (lambda t: t.asinh(), np.arcsinh, (-3, 3)),
    "acosh": (lambda t: t.acosh(), np.arccosh, (1.1, 4)),
    "atanh": (lambda t: t.atanh(), np.arctanh, (-0.9, 0.9)),
    "erf": (lambda t: t.erf(), _erf, (-3, 3)),
    "relu": (lambda t: t.relu(), lambda x: np.maximum(x, 0), (-3, 3)),
    "relu6": (lambda t: t.relu6(), lambda x: np.clip(x, 0, 6), (-3, 9)),
    "leaky_relu": (lambda t: t.leaky_relu(0.1), lambda x: np.where(x < 0, 0.1 * x, x), (-3, 3)),
    "elu": (lambda t: t.elu(), lambda x: np.where(x > 0, x, np.exp(x) - 1), (-3, 3)),
    "celu": (lambda t: t.celu(0.5), lambda x: np.maximum(0, x) + np.minimum(0, 0.5 * (np.exp(x / 0.5) - 1)), (-3, 3)),
    "selu": (lambda t: t.selu(), lambda x: 1.0507 * np.where(x >= 0, x, 1.67326 * (np.exp(x) - 1)), (-3, 3)),
    "gelu": (lambda t: t.gelu(), _gelu, (-3, 3)),
    "quick_gelu": (lambda t: t.quick_gelu(), lambda x: x * _sigmoid(1.702 * x), (-3, 3)),
    "silu": (lambda t: t.silu(), lambda x: x * _sigmoid(x), (-3, 3)),
    "swish": (lambda t: t.swish(), lambda x: x * _sigmoid(x), (-3, 3)),
    "mish": (lambda t: t.mish(), lambda x: x * np.tanh(_softplus(x)), (-3, 3)),
    "softplus": (lambda t: t.softplus(), _softplus, (-20, 20)),
    "softsign": (lambda t: t.softsign(), lambda x: x / (1 + np.abs(x)), (-3, 3)),
    "sigmoid": (lambda t: t.sigmoid(), _sigmoid, (-20, 20)),
    "logsigmoid": (lambda t: t.logsigmoid(), lambda x: -_softplus(-x), (-20, 20)),
    "hardsigmoid": (lambda t: t.hardsigmoid(), lambda x: np.clip(x / 6 + 0.5, 0, 1), (-5, 5)),
    "hardswish": (lambda t: t.hardswish(), lambda x: x * np.clip(x + 3, 0, 6) / 6, (-5, 5)),
    "hardtanh": (lambda t: t.hardtanh(), lambda x: np.clip(x, -1, 1), (-3, 3)),
    "floor": (lambda t: t.floor(), np.floor, (-5, 5)),
    "ceil": (lambda t: t.ceil(), np.ceil, (-5, 5)),
    "trunc": (lambda t: t.trunc(), np.trunc, (-5, 5)),
    "round": (lambda t: t.round(), _round_half_even, (-5, 5)),
    "square": (lambda t: t.square(), np.square, (-3, 3)),
    "clip": (lambda t: t.clip(-1, 0.5), lambda x: np.clip(x, -1, 0.5), (-3, 3)),
}


def _inputs(rng: np.random.Generator, lo: float, hi: float, shape: tuple[int, ...]) -> np.ndarray:
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_float(device: str, name: str) -> None:
    fn, ref, (lo, hi) = UNARY[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    x = _inputs(rng, lo, hi, (3, 4))
    if name == "round":
        x[0, :3] = [0.5, 1.5, -2.5]  # ties go to even
    # a non-contiguous input: the transpose of a contiguous buffer
    t = Tensor(np.ascontiguousarray(x.T), device=device).T
    out = fn(t)
    assert out.shape == (3, 4)
    np.testing.assert_allclose(out.numpy(), ref(x), rtol=2e-5, atol=2e-6)
    # 0-d and size-0
    scalar = np.float32(x[1, 2])
    np.testing.assert_allclose(fn(Tensor(scalar, device=device)).numpy(), ref(scalar), rtol=2e-5, atol=2e-6)
    assert fn(Tensor(np.zeros((0, 3), np.float32), device=device)).shape == (0, 3)


def test_special_values(device: str) -> None:
    x = Tensor([math.inf, -math.inf, math.nan, 0.0, 1.0], device=device)
    assert x.isinf().tolist() == [True, True, False, False, False]
    assert x.isinf(detect_negative=False).tolist() == [True, False, False, False, False]
    assert x.isnan().tolist() == [False, False, True, False, False]
    assert x.isfinite().tolist() == [False, False, False, True, True]
    np.testing.assert_equal(x.sigmoid().numpy()[:2], [1.0, 0.0])


# name: (tg function of (a, b), numpy function)
BINARY: dict[str, tuple[F, F]] = {
    "add": (lambda a, b: a + b, np.add),
    "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply),
    "div": (lambda a, b: a / b, np.true_divide),
    "maximum": (lambda a, b: a.maximum(b), np.maximum),
    "minimum": (lambda a, b: a.minimum(b), np.minimum),
    "lt": (lambda a, b: a < b, np.less),
    "gt": (lambda a, b: a > b, np.greater),
    "le": (lambda a, b: a <= b, np.less_equal),
    "ge": (lambda a, b: a >= b, np.greater_equal),
    "eq": (lambda a, b: a == b, np.equal),
    "ne": (lambda a, b: a != b, np.not_equal),
}
INT_ONLY: dict[str, tuple[F, F]] = {
    "floordiv": (lambda a, b: a // b, np.floor_divide),
    "mod": (lambda a, b: a % b, np.mod),
    "and": (lambda a, b: a & b, np.bitwise_and),
    "or": (lambda a, b: a | b, np.bitwise_or),
    "xor": (lambda a, b: a ^ b, np.bitwise_xor),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_float_broadcast(device: str, name: str) -> None:
    fn, ref = BINARY[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    a = rng.uniform(-3, 3, (2, 1, 4)).astype(np.float32)
    b = rng.uniform(0.5, 3, (3, 1)).astype(np.float32)
    b[0, 0] = a[0, 0, 0]  # an exact tie for comparisons, maximum and minimum
    out = fn(Tensor(a, device=device), Tensor(b, device=device))
    assert out.shape == (2, 3, 4)
    np.testing.assert_allclose(out.numpy(), ref(a, b), rtol=1e-6)
    # scalars on either side
    np.testing.assert_allclose(fn(Tensor(a, device=device), 1.5).numpy(), ref(a, np.float32(1.5)), rtol=1e-6)
    if name not in ("maximum", "minimum"):  # methods: no reflected form
        np.testing.assert_allclose(fn(2.0, Tensor(b, device=device)).numpy(), ref(np.float32(2.0), b), rtol=1e-6)


@pytest.mark.parametrize("name", sorted(BINARY) + sorted(INT_ONLY))
def test_binary_int(device: str, name: str) -> None:
    fn, ref = {**BINARY, **INT_ONLY}[name]
    a = np.array([[-7, -3, 0, 5, 9]], dtype=np.int32)
    b = np.array([[2], [-3], [4]], dtype=np.int32)
    out = fn(Tensor(a, device=device), Tensor(b, device=device))
    expected = ref(a, b)
    assert out.shape == expected.shape
    if name == "div":
        assert out.dtype == dtypes.float32
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)


def test_pow(device: str) -> None:
    a = np.array([[-2.0, -0.5, 0.0, 0.5, 3.0]], dtype=np.float32)
    t = Tensor(a, device=device)
    for n in (0, 1, 2, 3, -1, -2):
        np.testing.assert_allclose((t**n).numpy(), a.astype(np.float64) ** n, rtol=1e-6)
    np.testing.assert_allclose((t**2.0).numpy(), a**2.0, rtol=1e-6)
    np.testing.assert_allclose((t**3.0).numpy(), a**3.0, rtol=1e-5)
    pos = np.array([0.5, 1.0, 2.5], dtype=np.float32)
    np.testing.assert_allclose((Tensor(pos, device=device) ** 0.5).numpy(), pos**0.5, rtol=1e-6)
    np.testing.assert_allclose((2 ** Tensor(pos, device=device)).numpy(), 2**pos, rtol=1e-6)
    assert math.isnan((Tensor([-2.0], device=device) ** 0.5).item())
    assert (Tensor([2, 3], device=device) ** 3).tolist() == [8, 27]


def test_where_lerp_and_logic(device: str) -> None:
    c = np.array([[True], [False]])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = Tensor(c, device=device).where(Tensor(x, device=device), -1.0)
    np.testing.assert_equal(out.numpy(), np.where(c, x, -1.0))
    assert Tensor([True, False], device=device).where(1, 2).tolist() == [1, 2]
    a, b = Tensor([1.0, 2.0], device=device), Tensor([3.0, 6.0], device=device)
    np.testing.assert_allclose(a.lerp(b, 0.25).numpy(), [1.5, 3.0])
    p, q = Tensor([True, True, False], device=device), Tensor([True, False, False], device=device)
    assert p.logical_and(q).tolist() == [True, False, False]
    assert p.logical_or(q).tolist() == [True, True, False]
    assert p.logical_xor(q).tolist() == [False, True, False]
    assert p.logical_not().tolist() == [False, False, True]
    assert (~Tensor([0, 5], device=device)).tolist() == [-1, -6]
    assert (Tensor([1, 3], device=device) << 2).tolist() == [4, 12]
    assert (Tensor([-8, 12], device=device) >> 2).tolist() == [-2, 3]


def test_casts(device: str) -> None:
    t = Tensor([1.7, -2.5, 0.0], device=device)
    assert t.int().tolist() == [1, -2, 0] and t.int().dtype == dtypes.int32
    assert t.bool().tolist() == [True, True, False]
    assert t.half().dtype == dtypes.float16 and t.half().float().tolist() == [1.7001953125, -2.5, 0.0]
    assert t.double().dtype == dtypes.float64 and t.long().dtype == dtypes.int64
    assert Tensor([1.0], device=device).bitcast(dtypes.int32).item() == 0x3F800000
    assert Tensor([True, False], device=device).float().tolist() == [1.0, 0.0]


def test_half_bitcasts(device: str) -> None:
    """16-bit integers to half and back, computed (a GGUF block's scale from its bytes; an OpenCL device without
    cl_khr_fp16 computes half in float, so the bits go through vload_half/vstore_half)."""
    bits = np.array([0x3C00, 0xC100, 0x0001, 0x7BFF], np.uint16)  # 1, -2.5, the smallest subnormal, the largest
    got = (Tensor(bits, device=device) + 0).bitcast(dtypes.float16).float().numpy()
    np.testing.assert_array_equal(got, bits.view(np.float16).astype(np.float32))
    back = (Tensor(bits.view(np.float16), device=device) * 1).bitcast(dtypes.uint16).numpy()
    np.testing.assert_array_equal(back, bits)


def test_dtype_promotion(device: str) -> None:
    i, f = Tensor([1, 2], device=device), Tensor([1.0, 2.0], device=device)
    assert (i + f).dtype == dtypes.float32
    assert (i + 1).dtype == dtypes.int32 and (i + 1.5).dtype == dtypes.float32
    assert (i.cast(dtypes.int8) + i.cast(dtypes.int16)).dtype == dtypes.int16
    assert (f.half() * 2).dtype == dtypes.float16
    assert (Tensor([True], device=device) + 1).dtype == dtypes.int32


def test_bad_input_errors(device: str) -> None:
    with pytest.raises(ValueError, match=r"\(2, 3\) and \(4,\)"):
        Tensor.ones(2, 3, device=device) + Tensor.ones(4, device=device)
    with pytest.raises(TypeError, match="bitwise_and needs an integer or bool tensor, got dtype dtypes.float"):
        Tensor([1.0], device=device) & Tensor([2.0], device=device)
    with pytest.raises(TypeError, match="bitwise_not needs an integer"):
        Tensor([1.0], device=device).bitwise_not()
    with pytest.raises(TypeError, match="ambiguous"):
        bool(Tensor([1, 2], device=device) == 1)


def _random_broadcast_pair(rng: np.random.Generator) -> tuple[tuple[int, ...], tuple[int, ...]]:
    ndim = int(rng.integers(0, 4))
    full = tuple(int(s) for s in rng.integers(1, 4, ndim))
    a = tuple(1 if rng.random() < 0.3 else s for s in full)
    b = tuple(1 if rng.random() < 0.3 else s for s in full)[int(rng.integers(0, ndim + 1)) :]
    return a, b


@pytest.mark.parametrize("name", ["add", "mul", "maximum", "lt", "where"])
def test_random_broadcast_shapes(device: str, name: str) -> None:
    rng = np.random.default_rng(sum(map(ord, name)) + 7)
    for _ in range(4):
        sa, sb = _random_broadcast_pair(rng)
        a = rng.integers(-5, 5, sa).astype(np.int32)
        b = rng.standard_normal(sb).astype(np.float32)
        ta, tb = Tensor(a, device=device), Tensor(np.array(b.T, order="C"), device=device).T  # b non-contiguous
        if name == "where":
            out, ref = (ta > 0).where(tb, -1.0), np.where(a > 0, b, np.float32(-1.0))
        else:
            fn, npfn = BINARY[name]
            out, ref = fn(ta, tb), npfn(a, b)
        assert out.shape == ref.shape, (sa, sb)
        assert out.dtype == (dtypes.bool if name == "lt" else dtypes.float32)
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-6, err_msg=f"{sa} {sb}")


def test_unary_int(device: str) -> None:
    a = np.array([[-3, 0, 7], [2, -1, -8]], dtype=np.int32)
    t = Tensor(a, device=device)
    for out, ref in [
        (-t, -a),
        (t.abs(), np.abs(a)),
        (t.sign(), np.sign(a)),
        (t.relu(), np.maximum(a, 0)),
        (t.square(), a * a),
        (t.clip(-2, 3), np.clip(a, -2, 3)),
        (t.minimum(1), np.minimum(a, 1)),
        (t.floor(), a),
    ]:
        assert out.dtype == dtypes.int32
        np.testing.assert_equal(out.numpy(), ref)
    np.testing.assert_allclose(t.exp().numpy(), np.exp(a), rtol=1e-6)  # ints go through the default float
    assert t.sqrt().dtype == dtypes.float32
