"""Differential test of the Tensor API tinygrad has and tg added (issue 12): every method against numpy.

Each case draws a random shape (0- and 1-sized dims included), dtype, axis and parameters, sometimes
a non-contiguous view, runs the method and compares with a numpy reference; float cases also compare
the gradient of sum(f(x) * w) with central differences of the numpy reference (in float64).

CI runs a sample (DIFF_SEEDS=2 seeds per case) on CPU and PYTHON. `FUZZ=1` runs FUZZ_CASES (default
10,000) cases from FUZZ_START on FUZZ_DEVICE (default CPU) and prints the count and the time:
    FUZZ=1 FUZZ_DEVICE=PYTHON uv run pytest -q -s tests/test_api_differential.py -k fuzz
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
    return np.asarray(x.astype(dtype))


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
    x64 = np.array(x, dtype=np.float64)  # an ndarray even for 0-d input (a numpy scalar's .flat is a copy)
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
    if x.ndim == 0 or x.size == 0:
        return x, np.zeros(x.shape, np.int32)
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
    ref = np.cumprod(x.astype(np.float64 if dt == "float32" else np.int64), axis=ax)
    check(out, ref if dt == "float32" else ref.astype(dt), dt, rtol=1e-4)  # ints keep their dtype and wrap
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


def case_masked_select_nonzero(rng: Rng, device: str) -> None:
    dt = str(rng.choice(ALL))
    x = rand_array(rng, rand_shape(rng), dt)
    mask = rng.random(x.shape[int(rng.integers(0, x.ndim + 1)) :]) < 0.5  # broadcasts
    check(tensor(rng, x, device).masked_select(Tensor(mask, device=device)), x[np.broadcast_to(mask, x.shape)], dt)
    size = int(rng.integers(0, 6))
    ref = x[np.broadcast_to(mask, x.shape)][:size]
    ref = np.concatenate([ref, np.full(size - len(ref), 7, x.dtype)])
    check(tensor(rng, x, device).masked_select(Tensor(mask, device=device), size=size, fill_value=7), ref, dt)
    ref_nz = np.stack(np.nonzero(x), axis=1).astype(np.int32) if x.ndim else np.zeros((int(x != 0), 0), np.int32)
    check(tensor(rng, x, device).nonzero(), ref_nz)
    ref_nz = np.concatenate([ref_nz, np.full((max(0, size - len(ref_nz)), x.ndim), -1, np.int32)])[:size]
    check(tensor(rng, x, device).nonzero(size=size, fill_value=-1), ref_nz)


def np_scatter_reduce(x: Any, dim: int, index: Any, src: Any, reduce: str, include_self: bool) -> Any:
    out = x.astype(np.float64).copy()
    groups: dict[tuple[int, ...], list[float]] = {}
    for pos in np.ndindex(index.shape):
        tgt = list(pos)
        tgt[dim] = int(index[pos])
        groups.setdefault(tuple(tgt), []).append(float(src[pos]))
    fns = {"sum": np.sum, "prod": np.prod, "mean": np.mean, "amax": np.max, "amin": np.min}
    for tgt, vals in groups.items():
        out[tgt] = fns[reduce]([float(x[tgt]), *vals] if include_self else vals)
    return out


def case_scatter_reduce(rng: Rng, device: str) -> None:
    dt = str(rng.choice(("float32", "int32")))
    shape = rand_shape(rng, lo=1, min_size=1)
    x = rand_array(rng, shape, dt)
    dim = int(rng.integers(0, x.ndim))
    ishape = tuple(
        int(rng.integers(1, s + 2)) if i == dim else int(rng.integers(1, s + 1)) for i, s in enumerate(shape)
    )
    index = rng.integers(0, shape[dim], size=ishape).astype(np.int32)
    src = rand_array(rng, tuple(s + int(rng.integers(0, 2)) for s in ishape), dt)
    reduce = str(rng.choice(("sum", "prod", "mean", "amax", "amin")))
    include = bool(rng.random() < 0.5)
    out = tensor(rng, x, device).scatter_reduce(
        dim - x.ndim, Tensor(index, device=device), Tensor(src, device=device), reduce, include_self=include
    )
    ref = np_scatter_reduce(x, dim, index, src, reduce, include)
    ints = dt == "int32" and reduce != "mean"  # a mean of ints is a float (as tinygrad)
    if dt == "int32" and reduce == "prod":
        ref = np_scatter_reduce(x, dim, index, src.astype(np.int64), reduce, include).astype(np.int64)
    check(out, ref.astype(x.dtype) if ints else ref, dt, rtol=1e-4)


def case_pool_indices(rng: Rng, device: str) -> None:
    n, c = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    h, w = int(rng.integers(2, 6)), int(rng.integers(2, 6))
    x = smooth(rng, (n, c, h, w))
    k = int(rng.integers(1, min(h, w) + 1))
    v, idx = Tensor(x, device=device).max_pool2d(k, return_indices=True)
    oh, ow = h // k, w // k
    win = x[:, :, : oh * k, : ow * k].reshape(n, c, oh, k, ow, k).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, oh, ow, -1)
    arg = win.argmax(-1)
    ref_idx = ((np.arange(oh)[:, None] * k + arg // k) * w + np.arange(ow)[None, :] * k + arg % k).astype(np.int32)
    check(v, win.max(-1))
    check(idx, ref_idx)
    up = v.max_unpool2d(idx, k, output_size=(h, w))
    ref = np.zeros((n, c, h * w), np.float32)
    np.put_along_axis(ref, ref_idx.reshape(n, c, -1), win.max(-1).reshape(n, c, -1), axis=-1)
    check(up, ref.reshape(n, c, h, w))


def case_nll_loss(rng: Rng, device: str) -> None:
    n, cls = int(rng.integers(1, 5)), int(rng.integers(1, 5))
    extra = rand_shape(rng, lo=0, hi=1, min_size=1, max_size=3)
    logp = rand_array(rng, (n, cls, *extra), "float32")
    y = rng.integers(0, cls, size=(n, *extra)).astype(np.int32)
    weight = rng.random(cls).astype(np.float32) + 0.1 if rng.random() < 0.5 else None
    ignore = int(rng.integers(0, cls)) if rng.random() < 0.3 else None
    reduction = str(rng.choice(("mean", "sum", "none")))
    picked = np.take_along_axis(logp, y[:, None], 1)[:, 0]
    w = weight[y] if weight is not None else np.ones_like(picked)
    w = np.where(y == ignore, 0, w) if ignore is not None else w
    loss = -picked * w
    ref = loss.sum() / w.sum() if reduction == "mean" else loss.sum() if reduction == "sum" else loss
    wt = Tensor(weight, device=device) if weight is not None else None
    out = tensor(rng, logp, device).nll_loss(Tensor(y, device=device), wt, ignore, reduction)
    check(out, ref, rtol=1e-4)


def case_random(rng: Rng, device: str) -> None:
    """multinomial and randperm: deterministic properties (the values depend on the seed)."""
    Tensor.manual_seed(int(rng.integers(0, 1000)))
    n = int(rng.integers(0, 20))
    perm = Tensor.randperm(n, device=device).numpy()
    assert perm.dtype == np.int32 and sorted(perm.tolist()) == list(range(n))
    rows, cats = int(rng.integers(1, 4)), int(rng.integers(1, 6))
    w = rng.random((rows, cats)).astype(np.float32) * (rng.random((rows, cats)) < 0.7)
    w[:, 0] += 0.1  # every row has some weight
    k = int(rng.integers(1, int((w > 0).sum(1).min()) + 1))
    out = Tensor(w, device=device).multinomial(k).numpy()
    assert out.shape == (rows, k) and out.dtype == np.int32
    for r in range(rows):
        assert len(set(out[r].tolist())) == k and all(w[r, i] > 0 for i in out[r])
    out = Tensor(w[0], device=device).multinomial(5, replacement=True).numpy()
    assert out.shape == (5,) and all(w[0, i] > 0 for i in out)


def case_decomp(rng: Rng, device: str) -> None:
    m, n = int(rng.integers(1, 5)), int(rng.integers(1, 5))
    batch = rand_shape(rng, lo=0, hi=1, min_size=1, max_size=2)
    a = rand_array(rng, (*batch, m, n), "float32")
    q, r = Tensor(a, device=device).qr()
    qn, rn = q.numpy().astype(np.float64), r.numpy().astype(np.float64)
    np.testing.assert_allclose(qn @ rn, a, atol=1e-4)
    np.testing.assert_allclose(np.swapaxes(qn, -1, -2) @ qn, np.broadcast_to(np.eye(m), qn.shape), atol=1e-5)
    np.testing.assert_allclose(np.tril(rn, -1), 0, atol=1e-5)
    if rng.random() < 0.5 and min(m, n) <= 3:
        full = bool(rng.random() < 0.5)
        u, s, vt = (t.numpy().astype(np.float64) for t in Tensor(a, device=device).svd(full_matrices=full))
        np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False), rtol=1e-4, atol=1e-4)
        kk = min(m, n)
        np.testing.assert_allclose((u[..., :, :kk] * s[..., None, :]) @ vt[..., :kk, :], a, atol=1e-4)
        assert u.shape[-1] == (m if full else kk) and vt.shape[-2] == (n if full else kk)


def case_params2(rng: Rng, device: str) -> None:
    """gelu(approximate='none'), scaled_dot_product_attention(enable_gqa), einsum/linear(dtype=), clone(device=)."""
    from math import erf

    x = rand_array(rng, rand_shape(rng), "float32")
    ref = 0.5 * x * (1 + np.vectorize(erf)(x.astype(np.float64) / np.sqrt(2))) if x.size else x
    check(tensor(rng, x, device).gelu(approximate="none"), ref, rtol=1e-4, atol=1e-5)
    kv, groups, t, d = (
        int(rng.integers(1, 3)),
        int(rng.integers(1, 3)),
        int(rng.integers(1, 4)),
        int(rng.integers(1, 4)),
    )
    q, k, v = (rand_array(rng, (2, h, t, d), "float32") for h in (kv * groups, kv, kv))
    kr, vr = np.repeat(k, groups, axis=1), np.repeat(v, groups, axis=1)
    sc = q @ kr.transpose(0, 1, 3, 2) / np.sqrt(d)
    e = np.exp(sc - sc.max(-1, keepdims=True))
    ref = (e / e.sum(-1, keepdims=True)) @ vr
    out = Tensor(q, device=device).scaled_dot_product_attention(
        Tensor(k, device=device), Tensor(v, device=device), enable_gqa=True
    )
    check(out, ref, rtol=1e-4, atol=1e-4)
    a, b = rand_array(rng, (2, 3), "int8"), rand_array(rng, (3, 4), "int8")
    got = Tensor.einsum("ij,jk->ik", Tensor(a, device=device), Tensor(b, device=device), dtype="int32")
    assert got.dtype == dtypes.int32
    check(got, a.astype(np.int32) @ b.astype(np.int32))
    check(
        Tensor(a, device=device).linear(Tensor(b, device=device), dtype=dtypes.int16),
        (a.astype(np.int32) @ b).astype(np.int16),
    )
    c = Tensor(x, device=device).clone(device="PYTHON")
    assert c.device == "PYTHON"
    check(c, x)
    r = Tensor(np.zeros(x.shape, np.int32), device=device)
    check(r.replace(Tensor(x, device=device)), x)
    check(Tensor(x, device=device).to_("PYTHON"), x)


def case_newton_schulz(rng: Rng, device: str) -> None:
    a = rand_array(rng, (int(rng.integers(1, 4)), int(rng.integers(1, 4))), "float32")
    params, steps = (3.4445, -4.7750, 2.0315), int(rng.integers(1, 4))
    g = a.astype(np.float64)
    flip = g.shape[0] > g.shape[1]
    g = g.T if flip else g
    g = g / (np.sqrt((g * g).sum()) + 1e-7)
    for _ in range(steps):
        gram, term, total = g @ g.T, g, 0
        for c in params:
            total, term = total + c * term, gram @ term
        g = total
    check(Tensor(a, device=device).newton_schulz(steps, params), g.T if flip else g, rtol=1e-3, atol=1e-4)


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
    "masked_select_nonzero": case_masked_select_nonzero,
    "scatter_reduce": case_scatter_reduce,
    "pool_indices": case_pool_indices,
    "nll_loss": case_nll_loss,
    "random": case_random,
    "decomp": case_decomp,
    "params2": case_params2,
    "newton_schulz": case_newton_schulz,
}

CI_SEEDS = int(os.getenv("DIFF_SEEDS", "2"))


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_differential(name: str, device: str) -> None:
    for seed in range(CI_SEEDS):
        rng = np.random.default_rng([seed, sorted(CASES).index(name), device == "CPU"])
        CASES[name](rng, device)


@pytest.mark.skipif(not os.getenv("FUZZ"), reason="the 10,000-case run is FUZZ=1 (CI runs the sample above)")
def test_fuzz() -> None:
    total, device = int(os.getenv("FUZZ_CASES", "10000")), os.getenv("FUZZ_DEVICE", "CPU")
    first = int(os.getenv("FUZZ_START", "0"))  # to split a run over processes: FUZZ_START=5000 FUZZ_CASES=5000
    names = sorted(CASES)
    start, failures = time.perf_counter(), []
    for n in range(first, first + total):
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
