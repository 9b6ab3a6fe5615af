"""Property test: pad / shrink / reshape(()) / size-1 reshapes / cat chains keep their masks (vs numpy).

A tensor-level `cat` is a pad of every piece followed by an add; here each piece is its own tracker over its
own buffer, every movement op applies to all pieces, and the result is the sum of what each piece reads
(0 where its mask hides it). Indexing a single element is a shrink to size 1 followed by `reshape(())`,
which is where masks of padding used to be lost. CI runs a few hundred chains; FUZZ=1 runs 20,000.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tg_shape import ShapeTracker
from tg_uop import UOp
from tg_uop.evaluate import evaluate_many

EXAMPLES = 20_000 if os.getenv("FUZZ") else 300
MAX_SIZE = 200
Piece = tuple[ShapeTracker, np.ndarray]
Op = tuple[str, Any]


def _ones_shape(draw: Any, n: int) -> tuple[int, ...]:
    """`n` with size-1 dims sprinkled around it (or () when n == 1 and nothing is drawn)."""
    dims = [n] if n != 1 or draw(st.booleans()) else []
    for _ in range(draw(st.integers(0, 2))):
        dims.insert(draw(st.integers(0, len(dims))), 1)
    return tuple(dims)


def _draw_op(draw: Any, shape: tuple[int, ...]) -> Op:
    """One op valid on `shape`, biased to pad, shrink, index-to-0-d and cat."""
    n, size = len(shape), math.prod(shape)
    kinds = ["pad", "shrink", "index", "ones", "cat", "expand", "flip", "permute"]
    kind = draw(st.sampled_from(kinds if n else ["ones", "pad_ones", "expand"]))
    if kind == "pad_ones":  # from a 0-d view: back to size-1 dims, then pad
        return "reshape", (1,) * draw(st.integers(1, 2))
    if kind == "pad":
        arg = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)
        ok = math.prod(s + b + a for s, (b, a) in zip(shape, arg)) <= MAX_SIZE
        return ("pad", arg) if ok else ("flip", (True,) * n)
    if kind == "shrink":
        arg = []
        for s in shape:
            b = draw(st.integers(0, s))
            arg.append((b, draw(st.integers(b, s))))
        return "shrink", tuple(arg)
    if kind == "index":  # t[i, j, ...] with every index drawn: a size-1 shrink then reshape(())
        if 0 in shape:
            return "reshape", shape
        return "index", tuple(draw(st.integers(0, s - 1)) for s in shape)
    if kind == "ones":
        if size == 0:
            return "reshape", shape
        return "reshape", _ones_shape(draw, size)
    if kind == "cat":
        axis = draw(st.integers(0, n - 1))
        extra = draw(st.integers(1, 3))
        ok = size // max(shape[axis], 1) * (shape[axis] + extra) <= MAX_SIZE
        return ("cat", (axis, extra, draw(st.booleans()))) if ok else ("flip", (False,) * n)
    if kind == "expand":
        new = tuple(draw(st.integers(1, 3)) if s == 1 else s for s in shape)
        return ("expand", new) if math.prod(new) <= MAX_SIZE else ("flip", (False,) * n)
    if kind == "flip":
        return "flip", tuple(draw(st.booleans()) for _ in shape)
    return "permute", tuple(draw(st.permutations(range(n))))


def _numpy(a: np.ndarray, kind: str, arg: Any, fresh: np.ndarray | None) -> np.ndarray:
    if kind == "reshape":
        return a.reshape(arg)
    if kind == "pad":
        return np.pad(a, arg)
    if kind == "shrink":
        return a[tuple(slice(b, e) for b, e in arg)]
    if kind == "index":
        return np.asarray(a[arg])
    if kind == "expand":
        return np.broadcast_to(a, arg)
    if kind == "flip":
        return a[tuple(slice(None, None, -1) if f else slice(None) for f in arg)]
    if kind == "permute":
        return a.transpose(arg)
    axis, _, before = arg
    assert fresh is not None
    return np.concatenate([fresh, a] if before else [a, fresh], axis=axis)


def _tracker(t: ShapeTracker, kind: str, arg: Any) -> ShapeTracker:
    if kind == "index":
        return t.shrink(tuple((i, i + 1) for i in arg)).reshape(())
    return getattr(t, kind)(arg)  # type: ignore[no-any-return]


def _cat(pieces: list[Piece], shape: tuple[int, ...], arg: Any, fresh: np.ndarray) -> list[Piece]:
    """cat as the tensor layer does it: pad every old piece, pad the new one into the gap."""
    axis, extra, before = arg
    old = [(0, 0)] * len(shape)
    old[axis] = (extra, 0) if before else (0, extra)
    new = [(0, 0)] * len(shape)
    new[axis] = (0, shape[axis]) if before else (shape[axis], 0)
    pieces = [(t.pad(tuple(old)), b) for t, b in pieces]
    return [*pieces, (ShapeTracker.from_shape(fresh.shape).pad(tuple(new)), fresh.reshape(-1))]


def read_through(t: ShapeTracker, buf: np.ndarray) -> np.ndarray:
    """Every element of the tracker's view of `buf` (0 where invalid), via the evaluated index UOps."""
    shape = tuple(int(s) for s in t.shape)
    count = math.prod(shape)
    if count == 0:
        return np.zeros(shape, dtype=buf.dtype)
    idxs = [UOp.variable(f"i{k}", 0, max(s - 1, 0)) for k, s in enumerate(shape)]
    index, valid = t.to_indexed_uops(idxs)
    grid = np.indices(shape).reshape(len(shape), -1).tolist() if shape else []
    env = {v: grid[k] for k, v in enumerate(idxs) if grid[k]}
    idx_vals, ok_vals = evaluate_many(index, env), evaluate_many(valid, env)
    idx_vals, ok_vals = idx_vals * (count // len(idx_vals)), ok_vals * (count // len(ok_vals))
    out = np.zeros(count, dtype=buf.dtype)
    for k, (i, ok) in enumerate(zip(idx_vals, ok_vals)):
        if ok:
            assert 0 <= int(i) < buf.size, f"valid position {k} reads out of bounds index {i}"
            out[k] = buf[int(i)]
    return out.reshape(shape)


@st.composite
def chains(draw: Any) -> tuple[tuple[int, ...], list[Op]]:
    base = tuple(draw(st.lists(st.integers(1, 4), min_size=0, max_size=3)))
    ops, shape = [], base
    for _ in range(draw(st.integers(1, 7))):
        kind, arg = _draw_op(draw, shape)
        ops.append((kind, arg))
        fresh = _fresh_for(shape, kind, arg, 0)
        shape = _numpy(np.zeros(shape), kind, arg, fresh).shape
    return base, ops


def _fresh_for(shape: tuple[int, ...], kind: str, arg: Any, start: int) -> np.ndarray | None:
    """The buffer a cat appends: distinct positive values from `start` (0 still marks padding)."""
    if kind != "cat":
        return None
    fresh_shape = tuple(arg[1] if k == arg[0] else s for k, s in enumerate(shape))
    return np.arange(start, start + math.prod(fresh_shape)).reshape(fresh_shape) + 1


def run_chain(base: tuple[int, ...], ops: list[Op]) -> tuple[np.ndarray, np.ndarray, list[Piece]]:
    """(numpy's answer, the trackers' answer, the final pieces)."""
    buf = np.arange(1, math.prod(base) + 1)
    want: np.ndarray = buf.reshape(base)
    pieces: list[Piece] = [(ShapeTracker.from_shape(base), buf)]
    used = buf.size
    for kind, arg in ops:
        fresh = _fresh_for(want.shape, kind, arg, used)
        if fresh is not None:
            used += fresh.size
            pieces = _cat(pieces, want.shape, arg, fresh)
        else:
            pieces = [(_tracker(t, kind, arg), b) for t, b in pieces]
        want = _numpy(want, kind, arg, fresh)
    got = sum((read_through(t, b) for t, b in pieces), np.zeros(want.shape, dtype=buf.dtype))
    return want, got, pieces


@settings(
    max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck), derandomize=True
)
@given(chains())
def test_mask_chain_matches_numpy(case: tuple[tuple[int, ...], list[Op]]) -> None:
    base, ops = case
    want, got, pieces = run_chain(base, ops)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want, err_msg=f"{base} {ops} {[t for t, _ in pieces]}")
    for t, b in pieces:  # the simplified stack reads the same as the stack it came from
        np.testing.assert_array_equal(read_through(t.simplify(), b), read_through(t, b))


def test_issue_reproducers() -> None:
    """pad[1], cat[1] and a value-pad[2] read as 0-d views (the cases that read a real element)."""
    want, got, _ = run_chain((3,), [("pad", ((3, 1),)), ("index", (1,))])
    assert got.shape == () and int(got) == int(want) == 0
    want, got, _ = run_chain((2,), [("cat", (0, 2, False)), ("index", (1,))])
    assert int(got) == int(want) == 2
    want, got, _ = run_chain(
        (2,), [("pad", ((0, 1),)), ("index", (2,)), ("reshape", (1, 1)), ("pad", ((1, 0), (0, 1)))]
    )
    np.testing.assert_array_equal(got, want)


def test_zero_d_of_padding_stays_invalid() -> None:
    t = ShapeTracker.from_shape((3,)).pad(((3, 1),)).shrink(((1, 2),)).reshape(())
    _, valid = t.to_indexed_uops()
    assert valid.op.name == "CONST" and valid.arg is False, t
    back = t.reshape((1, 1))  # and back to size-1 dims: still invalid
    _, valid = back.to_indexed_uops()
    assert valid.arg is False, back
