"""structure_as: a node's structure recalled from a template equals the one a walk of its graph gives."""

from __future__ import annotations

from tg_uop import Ops, UOp, dtypes
from tg_uop.structure import structure, structure_as


def _buf(size: int = 6, dtype=dtypes.float32) -> UOp:  # type: ignore[no-untyped-def]
    return UOp.new_buffer("CPU", size, dtype)


def _build(a: UOp, b: UOp) -> UOp:
    """A small graph of movement ops and arithmetic over two sources (as a matmul's is)."""
    ra = UOp(Ops.RESHAPE, a.dtype, (a,), (2, 3))
    rb = UOp(Ops.PERMUTE, b.dtype, (UOp(Ops.RESHAPE, b.dtype, (b,), (3, 2)),), (1, 0))
    return UOp(Ops.REDUCE_AXIS, a.dtype, (ra * rb + ra,), (Ops.ADD, (1,)))


def _walked(a: UOp, b: UOp) -> tuple[int, tuple[UOp, ...]]:
    return structure(_build(a, b))  # (no template: the graph is walked)


def test_recalled_structure_is_the_walked_one() -> None:
    a, b, c, d = _buf(), _buf(), _buf(), _buf()
    first = _build(a, b)
    structure_as(first, ("test", 6), (a, b))  # (walked once, remembered)
    second = _build(c, d)
    structure_as(second, ("test", 6), (c, d))  # (recalled)
    assert structure(second) == (structure(first)[0], (c, d))
    assert structure(second) == _walked(*(_buf(), _buf()))[:1] + ((c, d),)


def test_aliased_and_different_sources_are_other_structures() -> None:
    a, b, c = _buf(), _buf(), _buf()
    two = _build(a, b)
    structure_as(two, ("test", 6), (a, b))
    same = _build(c, c)  # (one buffer read twice: another structure, one leaf)
    structure_as(same, ("test", 6), (c, c))
    assert structure(same) == (_walked(*(2 * (_buf(),)))[0], (c,))
    assert structure(same)[0] != structure(two)[0]
    halves = _buf(dtype=dtypes.float16), _buf(dtype=dtypes.float16)
    other = _build(*halves)  # (sources of another dtype: another key, walked)
    structure_as(other, ("test", 6), halves)
    assert structure(other) == (_walked(_buf(dtype=dtypes.float16), _buf(dtype=dtypes.float16))[0], halves)


def test_views_as_sources() -> None:
    """Sources that are views of buffers (a transposed operand) bring their own structure into the key."""
    a, b = _buf(), _buf()
    va, vb = UOp(Ops.RESHAPE, a.dtype, (a,), (6,)), UOp(Ops.RESHAPE, b.dtype, (b,), (6,))
    node = _build(va, vb)
    structure_as(node, ("test", 6), (va, vb))
    c, d = _buf(), _buf()
    again = _build(UOp(Ops.RESHAPE, c.dtype, (c,), (6,)), UOp(Ops.RESHAPE, d.dtype, (d,), (6,)))
    assert structure(again)[0] == structure(node)[0]  # (walked: the same id as the recalled one)
    assert structure(node)[0] != _walked(_buf(), _buf())[0]
