"""Failures the codegen fuzzer (tests/test_codegen_fuzz.py) found, one named test each, on every device.

Seeds are those of `python tests/test_codegen_fuzz.py --device PYTHON --seed <s>` when they were found.
"""

from __future__ import annotations

import numpy as np

from tg import Device, Tensor, dtypes

ZEROS = np.array([-0.0, 0.0, -1.5, 2.0, np.nan], np.float32)


def _same(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg="signs of zeros differ")


def test_abs_of_negative_zero_is_zero(device: str) -> None:
    """seed 300213: abs(-0.0) was -0.0 ((x < 0).where(-x, x) keeps it)."""
    for dt, npdt in ((dtypes.float32, np.float32), (dtypes.float16, np.float16)):
        _same(Tensor(ZEROS.astype(npdt), device=device).cast(dt).abs().numpy(), np.abs(ZEROS.astype(npdt)))


def test_plus_zero_turns_negative_zero_positive(device: str) -> None:
    """seeds 300555, 300601: the rewrite x + 0 -> x is wrong for floats, -0.0 + 0.0 is 0.0."""
    x = Tensor(ZEROS, device=device)
    _same((x + 0).numpy(), ZEROS + np.float32(0))
    _same((x.cast(dtypes.float16) + 0).numpy(), ZEROS.astype(np.float16) + np.float16(0))


def test_minus_negative_zero_turns_negative_zero_positive(device: str) -> None:
    """seed 300865: x - (-0.0) -> x is wrong for x = -0.0 (the pattern's 0 also matched -0.0)."""
    x = Tensor(ZEROS, device=device)
    _same((x - Tensor.full((5,), -0.0, device=device)).numpy(), ZEROS - np.float32(-0.0))
    _same((x - (-0.0)).numpy(), ZEROS - np.float32(-0.0))
    _same((x - 0.0).numpy(), ZEROS - np.float32(0.0))  # x - (+0.0) is x, -0.0 included


def test_negative_zero_minus_itself_is_zero(device: str) -> None:
    """seed 300706: -0.0 - -0.0 is 0.0; x - x is not folded for floats (inf - inf and NaN - NaN are NaN)."""
    x = Tensor(ZEROS, device=device)
    with np.errstate(invalid="ignore"):
        _same((x - x).numpy(), ZEROS - ZEROS)
    inf = Tensor(np.array([np.inf, -np.inf], np.float32), device=device)
    assert np.isnan((inf - inf).numpy()).all()


def test_max_of_opposite_zeros_agrees_on_every_device(device: str) -> None:
    """max(a, b) is `a > b ? a : b` everywhere (the PYTHON device took the first of equal values, C the second)."""
    a = Tensor(np.array([0.0, -0.0], np.float32), device=device)
    b = Tensor(np.array([-0.0, 0.0], np.float32), device=device)
    _same(a.maximum(b).numpy(), np.array([-0.0, 0.0], np.float32))


def test_relu_keeps_nan(device: str) -> None:
    """relu is max(x, 0): NaN stays NaN, as in numpy's maximum (the fuzzer's first oracle made it 0)."""
    _same(Tensor(ZEROS, device=device).relu().numpy(), np.maximum(ZEROS, np.float32(0)) + np.float32(0))


def test_schedule_cache_keeps_negative_zero_apart_from_zero(device: str) -> None:
    """Found by test_minus_negative_zero above: the schedule cache keyed constants by value, and -0.0 == 0.0,
    so `x * -0.0` replayed the kernel of `x * 0.0` and 1 / full(-0.0) gave +inf."""
    x = Tensor(np.array([1.0, -2.0], np.float32), device=device)
    _same((x * 0.0).numpy(), np.array([0.0, -0.0], np.float32))
    _same((x * -0.0).numpy(), np.array([-0.0, 0.0], np.float32))
    full = Tensor.full((2,), 0.0, device=device).reciprocal().numpy()
    _same(full, np.array([np.inf, np.inf], np.float32))
    _same(Tensor.full((2,), -0.0, device=device).reciprocal().numpy(), np.array([-np.inf, -np.inf], np.float32))


def test_padding_after_negation_is_positive_zero(device: str) -> None:
    """seed 103243 (CPU): (-x).pad(...) pushed the pad through NEG, so the padding held -(0.0) = -0.0."""
    x = np.array([0.25, -1.5], np.float32)
    _same((-Tensor(x, device=device)).pad(((1, 2),)).numpy(), np.pad(-x, (1, 2)))
    _same((-Tensor(x, device=device) + 1).pad(((0, 1),)).numpy(), np.pad(-x + 1, (0, 1)))


def test_compare_of_where_with_a_nan_branch(device: str) -> None:
    """`where(x == 0, 0, where(x < 0, nan, x)) > 1e-12` was False everywhere: range analysis gave the NaN
    constant the bounds (nan, nan), and min/max of a NaN depend on argument order, so the outer where got
    the range [0, 0] and the compare folded to a constant. A NaN now has no range (its dtype's whole one)."""
    x = np.array([0.0, -1.0, 0.5, 2.0, 1e-13, -0.0, np.nan, np.inf, -np.inf], np.float32)
    t = Tensor(x, device=device)
    with np.errstate(invalid="ignore"):
        inner = np.where(x < 0, np.float32(np.nan), x)
        outer = np.where(x == 0, np.float32(0.0), inner)
        np.testing.assert_array_equal(
            (t.eq(0).where(0.0, (t < 0).where(float("nan"), t)) > 1e-12).numpy(), outer > np.float32(1e-12)
        )
        # the NaN in either branch, and under max
        other = np.where(x < 0, x, np.float32(np.nan))
        np.testing.assert_array_equal(
            (t.eq(0).where(0.0, (t < 0).where(t, float("nan"))) < -0.5).numpy(),
            np.where(x == 0, np.float32(0), other) < -0.5,
        )
        np.testing.assert_array_equal(
            ((t < 0).where(float("nan"), 3.0) < 1.0).numpy(), np.where(x < 0, np.nan, 3.0) < 1.0
        )
        np.testing.assert_array_equal(
            (t.maximum((t < 0).where(float("nan"), -5.0)) >= -5.0).numpy(),
            np.maximum(x, np.where(x < 0, np.float32(np.nan), np.float32(-5.0))) >= -5.0,
        )


def test_sum_of_negative_zeros_is_positive_zero(device: str) -> None:
    """seed 2000460 (PYTHON, NOOPT=1): 1 / sqrt(half(-0.0)).sum(0) was -inf, numpy's inf. A sum starts from +0.0,
    as numpy's and as a loop's accumulator does; the paths without a loop skipped it: a size-1 axis (no
    reduction at all), a fully unrolled reduction (x0 + x1), and the sum of a constant (c * n)."""
    z32, z16 = np.full((2, 1), -0.0, np.float32), np.array([-0.0], np.float16)
    t32, t16 = Tensor(z32, device=device), Tensor(z16, device=device)
    _same(t32.sum(axis=1).numpy(), z32.sum(axis=1))  # size-1 axis
    _same(t32.sum(axis=0).numpy(), z32.sum(axis=0))  # two terms, unrolled by the optimizer
    _same(t32.sum().numpy(), z32.sum())
    _same(t32.mean(axis=1).numpy(), z32.mean(axis=1))
    with np.errstate(divide="ignore"):
        want = 1 / np.sqrt(z16).sum(axis=0, keepdims=True)
    _same((1 / t16.sqrt().sum(axis=0, keepdim=True)).numpy(), want)
    _same(Tensor.full((3,), -0.0, device=device).sum().numpy(), np.full((3,), -0.0, np.float32).sum())
    _same((t32.reshape(1, 2) @ t32).numpy(), z32.reshape(1, 2) @ z32)
    _same((t32[:1] @ Tensor([[1.0]], device=device)).numpy(), z32[:1] @ np.ones((1, 1), np.float32))
    # sums that are not all zeros keep their values, and max keeps -0.0 (nothing is added to it)
    x = np.array([[-0.0, 1.5], [-2.0, 2.0]], np.float32)
    _same(Tensor(x, device=device).sum(axis=1).numpy(), x.sum(axis=1))
    _same(Tensor(x, device=device)[:, :1].max(axis=1).numpy(), np.array([-0.0, -2.0], np.float32))


def test_int_minus_int32_min_does_not_overflow(device: str) -> None:
    """seed 1010999 (CPU): x - INT_MIN (x in [-4, 0], no overflow) was rewritten x + (-INT_MIN) = x + INT_MIN, which
    overflows (undefined in C): gcc made every value INT_MIN."""
    a = np.array([[4], [-6], [1], [-1]], np.int32)
    t = Tensor(a, device=device)
    want = (np.mod(a.astype(np.int64), -5) - (-(2**31))).astype(np.int32)
    got = (t % -5) - Tensor.full((4, 1), -(2**31), dtype=dtypes.int32, device=device)
    np.testing.assert_array_equal(got.numpy(), want)


def test_compare_of_a_sum_with_int32_min(device: str) -> None:
    """seed 1063234 (CPU, also PYTHON and CL): `x + INT_MIN < 0` was rewritten `x < 0 - INT_MIN`, whose constant 2**31
    wraps to INT_MIN, so the comparison folded to False and `(INT_MAX + INT_MIN) // -5` gave -1 instead of 0."""
    a = np.array([2147483647, 5, 2147483600], np.int32)
    t = Tensor(a, device=device) + Tensor.full((3,), -(2**31), dtype=dtypes.int32, device=device)
    s = (a.astype(np.int64) - 2**31).astype(np.int32)
    np.testing.assert_array_equal((t < 0).numpy(), s < 0)
    np.testing.assert_array_equal((t // -5).numpy(), s // -5)


def _linear_resize_axis(a: np.ndarray, axis: int, out: int) -> np.ndarray:
    """numpy: linear interpolation along one axis, half-pixel centres (align_corners=False), edges clamped."""
    n = a.shape[axis]
    src = np.maximum((np.arange(out) + 0.5) * n / out - 0.5, 0)
    i0 = np.floor(src).astype(int)
    i1, w = np.minimum(i0 + 1, n - 1), (src - i0).astype(np.float32)
    shape = [1] * a.ndim
    shape[axis] = out
    w = w.reshape(shape)
    return np.take(a, i0, axis) * (1 - w) + np.take(a, i1, axis) * w


def test_trilinear_interpolate_matches_numpy(device: str) -> None:
    # a vectorizer change (lanes under a bool WHERE rebuilt on packed sources) gave zeros past the first output column
    # here on the CPU: found by tinygrad's test_ops through the shim, not by the fuzzer
    a = np.random.default_rng(0).standard_normal((2, 3, 5, 2, 8)).astype(np.float32)
    want = a
    for axis, out in zip((2, 3, 4), (3, 6, 4)):
        want = _linear_resize_axis(want, axis, out)
    got = Tensor(a, device=device).interpolate(size=(3, 6, 4), mode="linear").numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_lanes_selected_by_one_condition_are_one_vector_select() -> None:
    """The lanes of a WHERE that share one scalar condition become one select of two packed vectors (`c?a:b` in
    C), never a select per lane of an element read out of a packed vector (`c?v[0]:0.0f`, ...): gcc 12 at -O2
    with AVX-512 miscompiles that shape (interpolate on a 5-d input gave zeros past the first column)."""
    import re

    from tg_codegen.program_cache import get_program_cached

    a = np.random.default_rng(1).standard_normal((2, 3, 5, 2, 8)).astype(np.float32)
    t = Tensor(a, device="CPU").interpolate(size=(5, 6, 8), mode="linear")
    srcs = [get_program_cached(item.ast, Device["CPU"].renderer).src for item in t.schedule()]
    assert any(re.search(r"= \(\w+\?\w+:\w+\);", s) for s in srcs)  # the vector select is there
    assert not any(re.search(r"\?\w+\[\d+\]:", s) for s in srcs)  # and no per-lane select of packed elements
    want = _linear_resize_axis(a, 3, 6)
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-4, atol=1e-5)


def test_cpu_vector_values_are_naturally_aligned() -> None:
    """Vector values have their natural alignment; memory is read and written through the element-aligned `_u`
    type. With an under-aligned value type, clang's OpenMP outlining read a vector declared before the parallel
    loop through a pointer with an aligned move: a random kernel (Tensor.normal(256, 384)) faulted now and then."""
    from tg_codegen import get_program
    from tg_codegen.renderer.cstyle import ClangRenderer
    from tg_tensor.engine.realizer import current

    t = Tensor(np.arange(64 * 64, dtype=np.float32).reshape(64, 64)) * 2 + 1
    (item,) = [it for it in t.schedule() if it.ast.op.name == "SINK"]
    current().unqueue(item)
    src = get_program(item.ast, ClangRenderer(threads=2, vector_bytes=32)).src
    assert "typedef float tg_float8 __attribute__((vector_size(32), may_alias));" in src
    assert "typedef float tg_float8_u __attribute__((vector_size(32), aligned(4), may_alias));" in src
    assert "(tg_float8_u*)" in src and "(tg_float8*)" not in src


def test_cpu_gated_vector_loads_compile() -> None:
    """A cat of 8-wide pieces loads each piece as a vector under its mask: `c ? load : zero` with both arms of the
    value type (a load through the `_u` type in one arm and a value in the other did not compile)."""
    rng = np.random.default_rng(0)
    parts = [rng.standard_normal(n).astype(np.float32) for n in (4096, 8192, 1024)]
    out = Tensor.cat(*[Tensor(p) for p in parts]).numpy()
    np.testing.assert_array_equal(out, np.concatenate(parts))
