"""Differential test of the Tensor API tinygrad has and tg added (issue 12): every method against numpy.

Each case draws a random shape (0- and 1-sized dims included), dtype, axis and parameters, sometimes
a non-contiguous view, runs the method and compares with a numpy reference; float cases also compare
the gradient of sum(f(x) * w) with central differences of the numpy reference (in float64).

CI runs a sample on CPU and PYTHON. `FUZZ=1` runs FUZZ_CASES (default 10,000) cases on CPU and prints
the count and the time:  FUZZ=1 uv run pytest -q -s tests/test_api_differential.py -k fuzz
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tg import Tensor, dtypes
from tg_uop import DType

Rng = np.random.Generator
FLOATS = ("float32", "float16")
INTS = ("int32", "int8", "uint8")
ALL = FLOATS + INTS + ("bool",)


# ---- inputs ----
def rand_shape(rng: Rng, lo: int = 0, hi: int = 3, min_size: int = 0, max_size: int = 5) -> tuple[int, ...]:
    nd = int(rng.integers(lo, hi + 1))
    return tuple(int(rng.integers(min_size, max_size + 1)) for _ in range(nd))


def rand_array(rng: Rng, shape: tuple[int, ...], dtype: str, nan: bool = False) -> np.ndarray[Any, Any]:
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in INTS:
        lo, hi = (0, 10) if dtype == "uint8" else (-5, 6)
        return rng.integers(lo, hi, size=shape).astype(dtype)
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    if rng.random() < 0.3 and x.size:  # ties
        x = np.round(x)
    if nan and x.size and rng.random() < 0.2:
        x.flat[int(rng.integers(0, x.size))] = np.nan
    return x.astype(dtype)


def tensor(rng: Rng, x: np.ndarray[Any, Any], device: str, requires_grad: bool = False) -> Tensor:
    """x as a tensor; sometimes a non-contiguous view (a transpose of its transposed copy)."""
    if x.ndim >= 2 and rng.random() < 0.3 and not requires_grad:
        return Tensor(np.ascontiguousarray(x.swapaxes(0, -1)), device=device).transpose(0, -1)
    return Tensor(x, device=device, requires_grad=requires_grad or None)


def tol(dtype: str) -> dict[str, float]:
    return {"rtol": 1e-2, "atol": 1e-2} if dtype == "float16" else {"rtol": 1e-5, "atol": 1e-5}


def check(out: Tensor, ref: Any, dtype: str | None = None, **kw: float) -> None:
    got = out.numpy()
    ref = np.asarray(ref)
    assert got.shape == ref.shape, f"shape {got.shape} != numpy's {ref.shape}"
    if ref.dtype.kind in "fc" or got.dtype.kind == "f":
        opts = {k: max(v, kw.get(k, 0.0)) for k, v in tol(dtype or "float32").items()}
        np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), equal_nan=True, **opts)
    else:
        np.testing.assert_array_equal(got, ref)


def grad_check(
    rng: Rng,
    f_tg: Callable[[Tensor], Tensor],
    f_np: Callable[[np.ndarray[Any, Any]], Any],
    x: np.ndarray[Any, Any],
    device: str,
) -> None:
    """d/dx sum(f(x) * w) against central differences of the float64 reference."""
    x64 = x.astype(np.float64)
    out = np.asarray(f_np(x64))
    if x.size == 0 or out.size == 0 or x.size > 40:
        return
    w = rng.standard_normal(out.shape)
    t = Tensor(x.astype(np.float32), device=device, requires_grad=True)
    (f_tg(t) * Tensor(w.astype(np.float32), device=device)).sum().backward()
    assert t.grad is not None
    eps, fd = 1e-4, np.zeros_like(x64)
    for i in range(x.size):
        hi, lo = x64.copy(), x64.copy()
        hi.flat[i] += eps
        lo.flat[i] -= eps
        fd.flat[i] = (np.sum(np.asarray(f_np(hi)) * w) - np.sum(np.asarray(f_np(lo)) * w)) / (2 * eps)
    np.testing.assert_allclose(t.grad.numpy(), fd, rtol=2e-2, atol=2e-2)


def axis_of(rng: Rng, ndim: int) -> int:
    n = max(ndim, 1)
    return int(rng.integers(-n, n))


def smooth(rng: Rng, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    """Distinct, well-separated float32 values (for gradients of piecewise functions)."""
    n = math.prod(shape)
    return (rng.permutation(n).astype(np.float32) * 0.5 + rng.random(n).astype(np.float32) * 0.1).reshape(shape)


# ---- references ----
def np_sort(x: np.ndarray[Any, Any], axis: int, descending: bool) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Stable sort with NaN as the largest value."""
    if x.ndim == 0:
        return x, np.zeros((), np.int32)
    moved = np.moveaxis(x, axis, -1)
    flat = moved.reshape(-1, moved.shape[-1])
    idx = np.zeros(flat.shape, np.int32)
    for r, row in enumerate(flat):
        vals = row.astype(np.float64)

        def key(i: int, vals: np.ndarray[Any, Any] = vals) -> tuple[bool, float]:
            v = vals[i]
            return (not np.isnan(v), -v) if descending else (bool(np.isnan(v)), v)

        idx[r] = sorted(range(len(row)), key=key)
    idx = idx.reshape(moved.shape)
    vals = np.take_along_axis(moved, idx, -1)
    return np.moveaxis(vals, -1, axis), np.moveaxis(idx, -1, axis)


def np_running(x: np.ndarray[Any, Any], axis: int, largest: bool) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Running max/min with the index of the first occurrence."""
    if x.ndim == 0:
        return x, np.zeros((), np.int32)
    moved = np.moveaxis(x, axis, -1)
    vals = (np.maximum if largest else np.minimum).accumulate(moved, axis=-1) if moved.shape[-1] else moved
    idx = np.zeros(moved.shape, np.int32)
    for pos in np.ndindex(moved.shape[:-1]):
        best = 0
        for i in range(moved.shape[-1]):
            better = moved[pos][i] > moved[pos][best] if largest else moved[pos][i] < moved[pos][best]
            best = i if better else best
            idx[pos][i] = best
    return np.moveaxis(vals, -1, axis), np.moveaxis(idx, -1, axis)


# ---- cases: each draws its inputs, runs tg and numpy, and asserts ----
def case_sort(rng: Rng, device: str) -> None:
    dt = str(rng.choice(ALL))
    x = rand_array(rng, rand_shape(rng), dt, nan=True)
    ax, desc = axis_of(rng, x.ndim), bool(rng.random() < 0.5)
    v, i = tensor(rng, x, device).sort(ax, desc)
    rv, ri = np_sort(x, ax, desc)
    check(v, rv, dt)
    check(i, ri)
    check(tensor(rng, x, device).argsort(ax, desc), ri)
    if dt == "float32" and rng.random() < 0.3 and x.ndim:
        xs = smooth(rng, x.shape)
        grad_check(rng, lambda t: t.sort(ax, desc)[0], lambda a: np_sort(a, ax, desc)[0], xs, device)


def case_topk(rng: Rng, device: str) -> None:
    dt = str(rng.choice(ALL))
    x = rand_array(rng, rand_shape(rng, lo=1), dt)
    ax = axis_of(rng, x.ndim)
    k, largest = int(rng.integers(0, x.shape[ax] + 1)), bool(rng.random() < 0.7)
    v, i = tensor(rng, x, device).topk(k, ax, largest)
    rv, ri = np_sort(x, ax, largest)
    check(v, np.take(rv, range(k), axis=ax), dt)
    check(i, np.take(ri, range(k), axis=ax))


def case_cummax_cummin(rng: Rng, device: str) -> None:
    dt = str(rng.choice(ALL))
    x = rand_array(rng, rand_shape(rng), dt)
    ax, largest = axis_of(rng, x.ndim), bool(rng.random() < 0.5)
    v, i = (tensor(rng, x, device).cummax if largest else tensor(rng, x, device).cummin)(ax)
    rv, ri = np_running(x, ax, largest)
    check(v, rv, dt)
    check(i, ri)


def case_cumprod(rng: Rng, device: str) -> None:
    dt = str(rng.choice(("float32", "int32", "int8")))
    x = rand_array(rng, rand_shape(rng, lo=1), dt)
    if dt == "float32":
        x = (x / 3).astype(np.float32)
    ax = axis_of(rng, x.ndim)
    out = tensor(rng, x, device).cumprod(ax)
    check(out, np.cumprod(x.astype(np.float64 if dt == "float32" else np.int64), axis=ax), dt, rtol=1e-4)
    if dt == "float32":
        grad_check(rng, lambda t: t.cumprod(ax), lambda a: np.cumprod(a, axis=ax), x, device)


def case_logcumsumexp(rng: Rng, device: str) -> None:
    dt = str(rng.choice(("float32", "float16", "int32")))
    x = rand_array(rng, rand_shape(rng, lo=1), dt)
    ax = axis_of(rng, x.ndim)
    ref = np.logaddexp.accumulate(x.astype(np.float64), axis=ax) if x.size else x.astype(np.float64)
    check(tensor(rng, x, device).logcumsumexp(ax), ref, dt if dt != "int32" else "float32", rtol=1e-4, atol=1e-4)
    if dt == "float32":
        grad_check(rng, lambda t: t.logcumsumexp(ax), lambda a: np.logaddexp.accumulate(a, axis=ax), x, device)


def case_diag(rng: Rng, device: str) -> None:
    dt = str(rng.choice(ALL))
    x = rand_array(rng, rand_shape(rng, lo=1, hi=1), dt)
    check(tensor(rng, x, device).diag(), np.diag(x), dt)


def case_diagonal(rng: Rng, device: str) -> None:
    dt = str(rng.choice(ALL))
    x = rand_array(rng, rand_shape(rng, lo=2, hi=4), dt)
    a = int(rng.integers(0, x.ndim))
    b = int((a + rng.integers(1, x.ndim)) % x.ndim)
    off = int(rng.integers(-3, 4))
    check(tensor(rng, x, device).diagonal(off, a, b), np.diagonal(x, off, a, b), dt)
    if dt == "float32":
        grad_check(rng, lambda t: t.diagonal(off, a, b), lambda v: np.diagonal(v, off, a, b), x, device)


def case_unfold(rng: Rng, device: str) -> None:
    dt = str(rng.choice(ALL))
    x = rand_array(rng, rand_shape(rng, lo=1), dt)
    ax = axis_of(rng, x.ndim) % x.ndim
    size, step = int(rng.integers(0, x.shape[ax] + 1)), int(rng.integers(1, 4))
    win = np.lib.stride_tricks.sliding_window_view(x, size, axis=ax)
    ref = np.take(win, range(0, win.shape[ax], step), axis=ax)
    check(tensor(rng, x, device).unfold(ax, size, step), ref, dt)
    if dt == "float32":
        grad_check(
            rng,
            lambda t: t.unfold(ax, size, step),
            lambda v: np.take(
                np.lib.stride_tricks.sliding_window_view(v, size, axis=ax), range(0, win.shape[ax], step), axis=ax
            ),
            x,
            device,
        )


def case_meshgrid(rng: Rng, device: str) -> None:
    dt = str(rng.choice(ALL))
    xs = [rand_array(rng, rand_shape(rng, lo=1, hi=1), dt) for _ in range(int(rng.integers(1, 4)))]
    indexing = str(rng.choice(("ij", "xy")))
    got = Tensor(xs[0], device=device).meshgrid(*(Tensor(x, device=device) for x in xs[1:]), indexing=indexing)
    for g, r in zip(got, np.meshgrid(*xs, indexing=indexing)):
        check(g, r, dt)


def case_pad_shrink_to(rng: Rng, device: str) -> None:
    dt = str(rng.choice(ALL))
    x = rand_array(rng, rand_shape(rng), dt)
    grow = tuple(int(s + rng.integers(0, 3)) for s in x.shape)
    value = int(rng.integers(0, 3))
    ref = np.pad(x, [(0, g - s) for g, s in zip(grow, x.shape)], constant_values=value) if x.ndim else x
    check(tensor(rng, x, device).pad_to(grow, value=value), ref, dt)
    cut = tuple(int(rng.integers(0, s + 1)) for s in x.shape)
    check(tensor(rng, x, device).shrink_to(cut), x[tuple(slice(0, c) for c in cut)], dt)


def case_rearrange(rng: Rng, device: str) -> None:
    dt = str(rng.choice(ALL))
    x = rand_array(rng, rand_shape(rng, lo=3, hi=3, min_size=1, max_size=4), dt)
    names = ["a", "b", "c"]
    perm = [int(p) for p in rng.permutation(3)]
    out = [names[p] for p in perm]
    if rng.random() < 0.5:  # merge the last two output axes
        rhs, ref = f"{out[0]} ({out[1]} {out[2]})", np.transpose(x, perm).reshape(x.shape[perm[0]], -1)
    else:
        rhs, ref = " ".join(out), np.transpose(x, perm)
    check(tensor(rng, x, device).rearrange(f"a b c -> {rhs}"), ref, dt)
    p = int(rng.integers(1, 4))
    x2 = rand_array(rng, (p * x.shape[0], *x.shape[1:]), dt)
    ref2 = x2.reshape(p, x.shape[0], *x.shape[1:]).transpose(1, 0, 2, 3)
    check(tensor(rng, x2, device).rearrange("(p q) b c -> q p b c", p=p), ref2, dt)
    check(tensor(rng, x, device).rearrange("... c -> c ..."), np.moveaxis(x, -1, 0), dt)


def case_binary_math(rng: Rng, device: str) -> None:
    fn = str(rng.choice(("copysign", "fmod", "logaddexp", "isclose")))
    dt = str(rng.choice(FLOATS if fn == "logaddexp" else ("float32", "float16", "int32", "int8")))
    shape = rand_shape(rng)
    x = rand_array(rng, shape, dt)
    y = rand_array(rng, shape[int(rng.integers(0, len(shape) + 1)) :], dt)  # broadcasts
    if fn == "fmod":
        y = np.where(y == 0, 3, y).astype(dt)  # division by zero is issue 21's
    if fn == "isclose" and rng.random() < 0.5:
        y = (x + rng.standard_normal(x.shape) * 1e-6).astype(dt) if dt in FLOATS else x
    a, b = tensor(rng, x, device), tensor(rng, y, device)
    if fn == "copysign":
        ref = np.copysign(x.astype(np.float64), y.astype(np.float64)).astype(np.result_type(x, y))
        check(a.copysign(b), ref, dt)
    elif fn == "fmod":
        check(a.fmod(b), np.fmod(x, y), dt, rtol=1e-4, atol=1e-4)
    elif fn == "logaddexp":
        check(a.logaddexp(b), np.logaddexp(x.astype(np.float64), y.astype(np.float64)), dt)
        if dt == "float32" and x.shape == y.shape:
            grad_check(rng, lambda t: t.logaddexp(Tensor(y, device=device)), lambda v: np.logaddexp(v, y), x, device)
    else:
        check(a.isclose(b), np.isclose(x, y), dt)
        check(a.allclose(b), np.allclose(x, y) if x.size or y.size else True, dt)


def case_unary_math(rng: Rng, device: str) -> None:
    fn = str(rng.choice(("log10", "softmin", "normalize", "short", "bfloat16")))
    dt = str(rng.choice(FLOATS if fn != "short" else ALL))
    x = rand_array(rng, rand_shape(rng, lo=1 if fn in ("softmin", "normalize") else 0), dt)
    t = tensor(rng, x, device)
    x64 = x.astype(np.float64)
    if fn == "log10":
        x = np.abs(x) + 0.5
        check(tensor(rng, x, device).log10(), np.log10(x.astype(np.float64)), dt)
    elif fn == "softmin":
        ax = axis_of(rng, x.ndim)
        e = np.exp(-x64 - np.max(-x64, axis=ax, keepdims=True)) if x.size else x64
        check(t.softmin(ax), e / e.sum(axis=ax, keepdims=True), dt)
        if dt == "float32":
            grad_check(
                rng, lambda v: v.softmin(ax), lambda v: np.exp(-v) / np.exp(-v).sum(axis=ax, keepdims=True), x, device
            )
    elif fn == "normalize":
        ax, p = axis_of(rng, x.ndim), float(rng.choice((1.0, 2.0, 3.0)))
        norm = np.sum(np.abs(x64) ** p, axis=ax, keepdims=True) ** (1 / p)
        check(t.normalize(p, ax), x64 / np.maximum(norm, 1e-12), dt, rtol=1e-4, atol=1e-5)
    elif fn == "short":
        check(t.short(), x.astype(np.int16) if dt != "bool" else x.astype(np.int16))
    else:
        bf = Tensor(x, device="PYTHON").bfloat16()  # bfloat16 kernels on gcc are issue 12b's (no __bf16 there)
        assert bf.dtype == dtypes.bfloat16
        check(bf, x64, "float32", rtol=1e-2, atol=1e-2)


def case_params(rng: Rng, device: str) -> None:
    """Parameters tinygrad has: pad(mode='circular'), reshape(None), dtype names, softmax(dtype=), shifts(reverse)."""
    x = rand_array(rng, rand_shape(rng, lo=1, min_size=1), "float32")
    pads = [(int(rng.integers(0, s + 1)), int(rng.integers(0, s + 1))) for s in x.shape]
    check(tensor(rng, x, device).pad(pads, mode="circular"), np.pad(x, pads, mode="wrap"))
    keep = tuple(None if rng.random() < 0.5 else s for s in x.shape)
    check(tensor(rng, x, device).reshape(keep), x)
    name = str(rng.choice(("uint8", "int", "float16", "half", "bool", "int8")))
    src = np.abs(x) if name == "uint8" else x
    ref = src.astype({"int": "int32", "half": "float16"}.get(name, name))
    check(tensor(rng, src, device).cast(name), ref, "float16" if name in ("float16", "half") else None)
    assert Tensor(src, device=device, dtype=name).dtype == dtypes.fields()[name]
    ax = axis_of(rng, x.ndim)
    e = np.exp(x.astype(np.float64) - x.max(axis=ax, keepdims=True))
    check(tensor(rng, x, device).softmax(ax, dtype="float16"), e / e.sum(axis=ax, keepdims=True), "float16")
    i = rand_array(rng, x.shape, "int32")
    s = int(rng.integers(0, 4))
    check(tensor(rng, np.abs(i), device).lshift(s, reverse=False), np.abs(i) << s)
    check(Tensor(np.full(x.shape, s, np.int32), device=device).lshift(3, reverse=True), np.left_shift(3, s) + 0 * i)


CASES: dict[str, Callable[[Rng, str], None]] = {
    "sort": case_sort,
    "topk": case_topk,
    "cummax_cummin": case_cummax_cummin,
    "cumprod": case_cumprod,
    "logcumsumexp": case_logcumsumexp,
    "diag": case_diag,
    "diagonal": case_diagonal,
    "unfold": case_unfold,
    "meshgrid": case_meshgrid,
    "pad_shrink_to": case_pad_shrink_to,
    "rearrange": case_rearrange,
    "binary_math": case_binary_math,
    "unary_math": case_unary_math,
    "params": case_params,
}

CI_SEEDS = int(os.getenv("DIFF_SEEDS", "3"))


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_differential(name: str, device: str) -> None:
    for seed in range(CI_SEEDS):
        rng = np.random.default_rng([seed, sorted(CASES).index(name), device == "CPU"])
        CASES[name](rng, device)


@pytest.mark.skipif(not os.getenv("FUZZ"), reason="the 10,000-case run is FUZZ=1 (CI runs the sample above)")
def test_fuzz() -> None:
    total, device = int(os.getenv("FUZZ_CASES", "10000")), os.getenv("FUZZ_DEVICE", "CPU")
    names = sorted(CASES)
    start, failures = time.perf_counter(), []
    for n in range(total):
        name = names[n % len(names)]
        rng = np.random.default_rng([n, 12])
        try:
            CASES[name](rng, device)
        except Exception as e:  # a mismatch (AssertionError) or a crash: both count as failures
            failures.append(f"case {n} ({name}): {type(e).__name__}: {str(e)[:300]}")
    print(
        f"\napi differential fuzz: {total} cases on {device}, {len(failures)} failures, "
        f"{time.perf_counter() - start:.1f} s"
    )
    assert not failures, "\n".join(failures[:20])


def _dtype_name(d: DType) -> str:
    return next(k for k, v in dtypes.fields().items() if v == d)
