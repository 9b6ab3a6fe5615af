"""Property test: random chains of movement ops read an arange buffer exactly as numpy does.

Every element goes through `to_indexed_uops` (and the unsimplified index too) and is evaluated by the UOp
evaluator. CI runs 300 examples; FUZZ=1 runs 20,000.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tg_shape import ShapeTracker
from tg_uop import UOp
from tg_uop.evaluate import evaluate_many

EXAMPLES = 20_000 if os.getenv("FUZZ") else 300
MAX_SIZE = 360
SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck), derandomize=True
)


def _factorize(draw: Any, n: int) -> tuple[int, ...]:
    """A random shape of size n with 1 to 4 dims (size-1 dims included)."""
    if n == 0:
        return tuple(draw(st.permutations([0, *draw(st.lists(st.integers(1, 3), max_size=2))])))
    dims: list[int] = []
    rest = n
    for _ in range(draw(st.integers(0, 3))):
        divisors = [d for d in range(1, rest + 1) if rest % d == 0]
        d = draw(st.sampled_from(divisors))
        dims.append(d)
        rest //= d
    dims.append(rest)
    return tuple(draw(st.permutations(dims)))


def _draw_op(draw: Any, shape: tuple[int, ...]) -> tuple[str, Any]:
    """One movement op that is valid on `shape` and keeps the size under MAX_SIZE."""
    n = len(shape)
    kind = draw(st.sampled_from(["reshape", "permute", "expand", "pad", "shrink", "flip", "stride"]))
    size = math.prod(shape)
    if kind == "reshape":
        return kind, _factorize(draw, size)
    if kind == "permute":
        return kind, tuple(draw(st.permutations(range(n))))
    if kind == "expand":
        new = tuple(draw(st.integers(1, 3)) if s == 1 else s for s in shape)
        return (kind, new) if math.prod(new) <= MAX_SIZE else ("flip", (False,) * n)
    if kind == "pad":
        arg = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)
        new_size = math.prod(s + b + a for s, (b, a) in zip(shape, arg))
        return (kind, arg) if new_size <= MAX_SIZE else ("flip", (True,) * n)
    if kind == "shrink":
        arg = []
        for s in shape:
            b = draw(st.integers(0, s))
            arg.append((b, draw(st.integers(b, s))))
        return kind, tuple(arg)
    if kind == "flip":
        return kind, tuple(draw(st.booleans()) for _ in shape)
    return kind, tuple(draw(st.sampled_from([1, 2, 3, -1, -2])) for _ in shape)


def apply_numpy(a: np.ndarray, kind: str, arg: Any) -> np.ndarray:
    if kind == "reshape":
        return a.reshape(arg)
    if kind == "permute":
        return a.transpose(arg)
    if kind == "expand":
        return np.broadcast_to(a, arg)
    if kind == "pad":
        return np.pad(a, arg)
    if kind == "shrink":
        return a[tuple(slice(b, e) for b, e in arg)]
    if kind == "flip":
        return a[tuple(slice(None, None, -1) if f else slice(None) for f in arg)]
    return a[tuple(slice(None, None, m) for m in arg)]


def apply_tracker(t: ShapeTracker, kind: str, arg: Any) -> ShapeTracker:
    return getattr(t, kind)(arg)  # type: ignore[no-any-return]


@st.composite
def chains(draw: Any) -> tuple[tuple[int, ...], list[tuple[str, Any]]]:
    base = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
    ops, shape = [], base
    for _ in range(draw(st.integers(1, 8))):
        kind, arg = _draw_op(draw, shape)
        ops.append((kind, arg))
        shape = apply_numpy(np.empty(shape), kind, arg).shape
    return base, ops


def read_through(t: ShapeTracker, buf: np.ndarray, raw: bool = False) -> np.ndarray:
    """Every element of the tracker's view of `buf` (0 where invalid), via the evaluated index UOps."""
    shape = tuple(int(s) for s in t.shape)
    idxs = [UOp.variable(f"i{k}", 0, max(s - 1, 0)) for k, s in enumerate(shape)]
    index, valid = t.to_indexed_uops_raw(idxs) if raw else t.to_indexed_uops(idxs)
    grid = np.indices(shape).reshape(len(shape), -1).tolist() if shape else []
    env = {v: grid[k] for k, v in enumerate(idxs) if grid and grid[k]}
    count = math.prod(shape)
    if count == 0:
        return np.zeros(shape, dtype=buf.dtype)
    idx_vals = evaluate_many(index, env) if env else evaluate_many(index, {})
    ok_vals = evaluate_many(valid, env) if env else evaluate_many(valid, {})
    idx_vals, ok_vals = _broadcast(idx_vals, count), _broadcast(ok_vals, count)
    out = np.zeros(count, dtype=buf.dtype)
    for k, (i, ok) in enumerate(zip(idx_vals, ok_vals)):
        if ok:
            assert 0 <= int(i) < buf.size, f"valid position {k} reads out of bounds index {i}"
            out[k] = buf[int(i)]
    return out.reshape(shape)


def _broadcast(vals: list[Any], n: int) -> list[Any]:
    return vals * n if len(vals) == 1 and n != 1 else vals


@SETTINGS
@given(chains())
def test_chain_matches_numpy(case: tuple[tuple[int, ...], list[tuple[str, Any]]]) -> None:
    base, ops = case
    buf = np.arange(1, math.prod(base) + 1)  # 0 marks padding
    want, t = buf.reshape(base), ShapeTracker.from_shape(base)
    for kind, arg in ops:
        want, t = apply_numpy(want, kind, arg), apply_tracker(t, kind, arg)
    assert t.shape == want.shape
    event(f"views: {len(t.views)}, masked: {any(v.mask is not None for v in t.views)}")
    np.testing.assert_array_equal(read_through(t, buf), want, err_msg=f"{base} {ops} {t}")
    np.testing.assert_array_equal(read_through(t, buf, raw=True), want)
    np.testing.assert_array_equal(read_through(t.simplify(), buf), want)


def _chain_on(draw: Any, shape: tuple[int, ...]) -> list[tuple[str, Any]]:
    ops = []
    for _ in range(draw(st.integers(1, 4))):
        kind, arg = _draw_op(draw, shape)
        ops.append((kind, arg))
        shape = apply_numpy(np.empty(shape), kind, arg).shape
    return ops


@st.composite
def two_chains(draw: Any) -> tuple[tuple[int, ...], list[tuple[str, Any]], list[tuple[str, Any]]]:
    base = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    first = _chain_on(draw, base)
    mid = base
    for kind, arg in first:
        mid = apply_numpy(np.empty(mid), kind, arg).shape
    return base, first, _chain_on(draw, mid)


@settings(SETTINGS, max_examples=max(EXAMPLES // 3, 100))
@given(two_chains())
def test_composition_and_real_strides(case: tuple[tuple[int, ...], list[Any], list[Any]]) -> None:
    """`a + b` reads a through b; every stride real_strides reports is the step of the evaluated index."""
    base, first, second = case
    buf = np.arange(1, math.prod(base) + 1)
    a, want = ShapeTracker.from_shape(base), buf.reshape(base)
    for kind, arg in first:
        a, want = apply_tracker(a, kind, arg), apply_numpy(want, kind, arg)
    b = ShapeTracker.from_shape(a.shape)
    for kind, arg in second:
        b, want = apply_tracker(b, kind, arg), apply_numpy(want, kind, arg)
    composed = a + b
    np.testing.assert_array_equal(read_through(composed, buf), want)
    _check_real_strides(composed)


def _check_real_strides(t: ShapeTracker) -> None:
    shape = tuple(int(s) for s in t.shape)
    if math.prod(shape) == 0:
        return
    idxs = [UOp.variable(f"i{k}", 0, max(s - 1, 0)) for k, s in enumerate(shape)]
    index, valid = t.to_indexed_uops_raw(idxs)
    points = np.indices(shape).reshape(len(shape), -1).tolist()
    env = {v: points[k] for k, v in enumerate(idxs)}
    idx = _broadcast(evaluate_many(index, env), len(points[0]))
    ok = _broadcast(evaluate_many(valid, env), len(points[0]))
    where = {tuple(p[k] for p in points): (i, o) for k, (i, o) in enumerate(zip(idx, ok))}
    for axis, stride in enumerate(t.real_strides()):
        if stride is None:
            continue
        for pos, (i, o) in where.items():
            nxt = pos[:axis] + (pos[axis] + 1,) + pos[axis + 1 :]
            if o and nxt in where and where[nxt][1]:
                assert where[nxt][0] - i == stride, (t, axis, stride, pos)
