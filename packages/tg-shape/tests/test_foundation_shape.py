"""tg_shape alone: every movement op read through to_indexed_uops matches numpy."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tg_shape import ShapeTracker
from tg_uop import Ops, UOp, dtypes


def read(st: ShapeTracker, buf: np.ndarray) -> np.ndarray:
    """Evaluate the tracker's index/valid expressions at every position (0 where invalid)."""
    out = np.zeros(st.shape, dtype=buf.dtype)
    idxs = [UOp.variable(f"i{d}", 0, max(int(s) - 1, 0)) for d, s in enumerate(st.shape)]
    index, valid = st.to_indexed_uops(idxs)
    for pos in itertools.product(*(range(int(s)) for s in st.shape)):
        sub = {v: UOp.const(dtypes.int32, p) for v, p in zip(idxs, pos)}
        ok, i = valid.substitute(sub).simplify(), index.substitute(sub).simplify()
        assert ok.op is Ops.CONST and i.op is Ops.CONST
        out[pos] = buf[i.arg] if ok.arg else 0
    return out


def test_permute_reshape_expand() -> None:
    buf = np.arange(24)
    st = ShapeTracker.from_shape((2, 3, 4)).permute((2, 0, 1)).reshape((4, 6)).reshape((4, 1, 6)).expand((4, 2, 6))
    ref = np.broadcast_to(buf.reshape(2, 3, 4).transpose(2, 0, 1).reshape(4, 1, 6), (4, 2, 6))
    np.testing.assert_equal(read(st, buf), ref)


def test_pad_shrink_flip() -> None:
    buf = np.arange(12)
    st = ShapeTracker.from_shape((3, 4)).pad(((1, 1), (0, 2))).shrink(((0, 5), (1, 6))).flip((True, False))
    ref = np.pad(buf.reshape(3, 4), ((1, 1), (0, 2)))[0:5, 1:6][::-1]
    np.testing.assert_equal(read(st, buf), ref)


def test_flatten_unflatten_is_plain_index() -> None:
    st = ShapeTracker.from_shape((2, 3, 4, 5)).reshape((120,)).reshape((2, 3, 4, 5))
    assert len(st.views) == 1 and st.contiguous
    index, _ = st.to_indexed_uops()
    text = index.simplify().render()
    assert "//" not in text and "%" not in text


def test_bad_movement_args() -> None:
    st = ShapeTracker.from_shape((2, 3))
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, 2\)"):
        st.reshape((4, 2))
    with pytest.raises(ValueError, match="permutation"):
        st.permute((0, 0))
    with pytest.raises(ValueError, match="expand"):
        st.expand((4, 3))
    with pytest.raises(ValueError, match="pad"):
        st.pad(((-1, 0), (0, 0)))
    with pytest.raises(ValueError, match="shrink"):
        st.shrink(((0, 3), (0, 3)))
