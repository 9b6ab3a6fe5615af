"""ShapeTracker and View: merging, composition, strides, symbolic shapes and bad input."""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pytest

from tg_shape import ShapeTracker, View
from tg_uop import UOp
from tg_uop.evaluate import evaluate_many


def read_all(t: ShapeTracker, env: dict[UOp, int] | None = None) -> list[int]:
    """buffer index (or -1 where invalid) of every position, row-major, through the evaluator."""
    shape = [
        int(s) if isinstance(s, int) else int(evaluate_many(s, {k: [v] for k, v in (env or {}).items()})[0])
        for s in t.shape
    ]
    idxs = [UOp.variable(f"p{k}", 0, max(s - 1, 0)) for k, s in enumerate(shape)]
    index, valid = t.to_indexed_uops(idxs)
    points = list(itertools.product(*(range(s) for s in shape)))
    values = {v: [p[k] for p in points] for k, v in enumerate(idxs)}
    values.update({k: [v] * len(points) for k, v in (env or {}).items()})
    idx, ok = evaluate_many(index, values), evaluate_many(valid, values)
    idx, ok = (idx * len(points) if len(idx) == 1 else idx), (ok * len(points) if len(ok) == 1 else ok)
    return [int(i) if o else -1 for i, o in zip(idx, ok)]


# ---- the flatten-then-unflatten acceptance check ----


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (8, 16, 32, 3), (7, 1, 9, 2)])
def test_flatten_unflatten_index_is_plain_linear(shape: tuple[int, ...]) -> None:
    flat = (math.prod(shape),)
    merged = ShapeTracker.from_shape(shape).reshape(flat).reshape(shape)
    stacked = ShapeTracker((View.create(shape), View.create(flat), View.create(shape)))  # forced: no view merging
    idxs = [UOp.variable(f"i{k}", 0, s - 1) for k, s in enumerate(shape)]
    strides = View.create(shape).strides
    linear = sum((i * st for i, st, s in zip(idxs, strides, shape) if s != 1), UOp.const(idxs[0].dtype, 0))
    for t in (merged, stacked):
        index, valid = t.to_indexed_uops(idxs)
        assert "//" not in index.render() and "%" not in index.render(), index.render()
        assert index is linear.simplify()
        assert valid.op.name == "CONST" and valid.arg is True
    assert merged.views == (View.create(shape),)


def test_transposed_flatten_unflatten_merges() -> None:
    t = ShapeTracker.from_shape((2, 3, 4, 5)).permute((3, 2, 1, 0)).reshape((120,)).reshape((5, 4, 3, 2))
    assert len(t.views) == 1 and t.views[0].strides == (1, 5, 20, 60)


# ---- reshape merging and simplify ----


def test_reshape_of_padded_rows_stays_one_view() -> None:
    t = ShapeTracker.from_shape((8,)).pad(((4, 4),)).reshape((4, 4))
    assert len(t.views) == 1 and t.views[0].mask == ((1, 3), (0, 4))
    assert read_all(t) == [-1] * 4 + list(range(8)) + [-1] * 4


def test_reshape_of_padded_dim_to_flat_stays_one_view() -> None:
    t = ShapeTracker.from_shape((4, 4)).pad(((1, 1), (0, 0))).reshape((24,))
    assert len(t.views) == 1
    assert read_all(t) == [-1] * 4 + list(range(16)) + [-1] * 4


def test_reshape_that_needs_two_views() -> None:
    t = ShapeTracker.from_shape((4, 6)).permute((1, 0)).reshape((24,))
    assert len(t.views) == 2
    assert read_all(t) == np.arange(24).reshape(4, 6).T.reshape(-1).tolist()


def test_simplify_merges_adjacent_views() -> None:
    t = ShapeTracker((View.create((4, 6)).permute((1, 0)), View.create((3, 2, 4))))
    s = t.simplify()
    assert len(s.views) == 1 and s.views[0].strides == (2, 1, 6)
    assert read_all(s) == read_all(t)


def test_simplify_keeps_views_that_cannot_merge() -> None:
    t = ShapeTracker((View.create((4, 6)).permute((1, 0)), View.create((24,))))
    assert t.simplify() == t


def test_add_composes_trackers() -> None:
    a = ShapeTracker.from_shape((4, 6)).permute((1, 0)).shrink(((1, 5), (0, 4)))
    b = ShapeTracker.from_shape(a.shape).reshape((2, 2, 4)).flip((False, True, False))
    direct = a.reshape((2, 2, 4)).flip((False, True, False))
    assert (a + b).shape == (2, 2, 4)
    assert read_all(a + b) == read_all(direct)


# ---- properties ----


def test_contiguous_consecutive_size() -> None:
    t = ShapeTracker.from_shape((3, 4))
    assert t.contiguous and t.consecutive and t.size == 12
    s = t.shrink(((1, 3), (0, 4)))
    assert not s.contiguous and s.size == 8
    assert not t.permute((1, 0)).contiguous


def test_real_strides() -> None:
    t = ShapeTracker.from_shape((3, 4)).permute((1, 0))
    assert t.real_strides() == (1, 4) and t.unit_stride_axes() == [0]
    e = ShapeTracker.from_shape((3, 1)).expand((3, 5))
    assert e.real_strides() == (1, 0)
    p = ShapeTracker.from_shape((3, 4)).pad(((1, 1), (0, 0)))
    assert p.real_strides() == (None, 1) and p.real_strides(ignore_valid=True) == (4, 1)
    two = ShapeTracker.from_shape((4, 6)).permute((1, 0)).reshape((3, 8))
    assert len(two.views) == 2 and two.real_strides() == (2, None)  # (2r + c//4) + (c%4)*6
    ok = ShapeTracker.from_shape((4, 6)).permute((1, 0)).reshape((6, 2, 2))
    assert ok.real_strides() == (1, 12, 6) and ok.unit_stride_axes() == [0]


# ---- symbolic shapes ----


def test_symbolic_shapes() -> None:
    n = UOp.variable("n", 1, 8)
    base = ShapeTracker.from_shape((n, 4))
    chains = {
        "reshape": base.reshape((n, 2, 2)),
        "expand": ShapeTracker.from_shape((1, 4)).expand((n, 4)),
        "shrink": base.shrink(((0, n), (1, 3))),
        "pad": base.pad(((0, 0), (1, 2))),
        "permute": base.permute((1, 0)),
    }
    assert len(chains["reshape"].views) == 1 and chains["reshape"].shape[0] is n
    assert n in chains["pad"].vars()
    for val in (1, 3, 8):
        a = np.arange(val * 4).reshape(val, 4)
        want = {
            "reshape": a.reshape(val, 2, 2),
            "expand": np.broadcast_to(np.arange(4).reshape(1, 4), (val, 4)),
            "shrink": a[:, 1:3],
            "pad": np.pad(a, ((0, 0), (1, 2)), constant_values=-1),
            "permute": a.T,
        }
        for name, t in chains.items():
            got = read_all(t, {n: val})
            flat = np.arange(val * 4).reshape(-1)
            expect = want[name].reshape(-1).tolist() if name == "pad" else flat[want[name].reshape(-1)].tolist()
            assert got == expect, name


def test_symbolic_shrink_pad_of_variable_amount() -> None:
    i = UOp.variable("i", 0, 4)
    t = ShapeTracker.from_shape((10,)).shrink(((i, i + 5),))
    for val in range(5):
        assert read_all(t, {i: val}) == list(range(val, val + 5))


# ---- bad input ----


@pytest.mark.parametrize(
    "op,arg,match",
    [
        ("reshape", (5, 5), r"\(3, 4\).*\(5, 5\)"),
        ("permute", (0, 0), r"\(0, 0\).*\(3, 4\)"),
        ("permute", (1,), r"\(1,\).*\(3, 4\)"),
        ("expand", (6, 4), r"\(3, 4\).*\(6, 4\)"),
        ("pad", ((0, 0), (-1, 0)), r"-1.*\(3, 4\)"),
        ("shrink", ((0, 4), (0, 4)), r"\(0, 4\).*\(3, 4\)"),
        ("shrink", ((2, 1), (0, 4)), r"\(2, 1\).*\(3, 4\)"),
        ("stride", (0, 1), r"\(0, 1\).*\(3, 4\)"),
        ("flip", (True,), r"\(True,\).*\(3, 4\)"),
    ],
)
def test_bad_movement_raises(op: str, arg: object, match: str) -> None:
    """The message names the shape and the argument (in either order)."""
    with pytest.raises(ValueError) as e:
        getattr(ShapeTracker.from_shape((3, 4)), op)(arg)
    first, second = match.split(".*")
    assert re.search(first, str(e.value)) and re.search(second, str(e.value)), str(e.value)


def test_unbind_bound_shapes() -> None:
    n = UOp.variable("n", 1, 10)
    t = ShapeTracker.from_shape((n.bind(3), 4)).shrink(((0, n.bind(3)), (1, 3)))
    unbound, values = t.unbind()
    assert values == {n: 3} and all(v.op.name != "BIND" for v in unbound.vars())
    assert read_all(unbound, {n: 3}) == read_all(t) == [1, 2, 5, 6, 9, 10]
