"""Merging two views into one by symbolic algebra: compose their index maths, simplify, read a view back.

Two stacked views are one view exactly when the simplified composed index is a linear function of the
position (`offset + sum(i_k * stride_k)`) and the composed validity is a box (`lo_k <= i_k < hi_k`).
The simplifier is brute-force tested, so a merge found here is as trustworthy as the simplifier.

>>> from tg_shape.view import View
>>> inner = View.create((4, 6)).permute((1, 0))
>>> merge_views(inner, View.create((3, 2, 4))).strides
(2, 1, 6)
"""

from __future__ import annotations

import functools

from tg_shape.view import View, index_dtype_for, unravel
from tg_uop import DType, Ops, UOp, dtypes
from tg_uop.helpers import all_int
from tg_uop.symbolic import split_add
from tg_uop.symbolic_terms import split_and as split_valid
from tg_uop.valid import clause_bound, simplify_given_valid


def position_vars(shape: tuple[int, ...], prefix: str = "\x00m", dtype: DType = dtypes.int32) -> list[UOp]:
    """One variable per dim over [0, size-1] (the constant 0 for size-1 dims)."""
    return [
        UOp.variable(f"{prefix}{k}", 0, s - 1, dtype) if s > 1 else UOp.const(dtype, 0) for k, s in enumerate(shape)
    ]


def linear_form(index: UOp, idxs: list[UOp]) -> tuple[list[int], int] | None:
    """(strides, offset) when `index` is offset + sum(idxs[k] * strides[k]) with integer constants."""
    strides = [0] * len(idxs)
    offset = 0
    position = {v: k for k, v in enumerate(idxs) if v.op is Ops.DEFINE_VAR}
    for term in split_add(index):
        if term.op is Ops.CONST:
            offset += int(term.arg)
        elif term in position:
            strides[position[term]] += 1
        elif term.op is Ops.MUL and term.src[0] in position and term.src[1].op is Ops.CONST:
            strides[position[term.src[0]]] += int(term.src[1].arg)
        else:
            return None
    return strides, offset


def box_mask(valid: UOp, idxs: list[UOp], shape: tuple[int, ...]) -> tuple[tuple[int, int], ...] | None:
    """The per-dim [begin, end) ranges when `valid` is a conjunction of bounds on single positions."""
    mask = [(0, s) for s in shape]
    position = {v: k for k, v in enumerate(idxs) if v.op is Ops.DEFINE_VAR}
    if valid.op is Ops.CONST:
        return tuple(mask) if valid.arg else tuple((0, 0) for _ in shape)
    for clause in split_valid(valid):
        b = clause_bound(clause)
        if b is None or b[0] not in position:
            return None
        k = position[b[0]]
        lo, hi = mask[k]
        mask[k] = (max(lo, b[1]) if b[1] is not None else lo, min(hi, b[2] + 1) if b[2] is not None else hi)
    return tuple((lo, max(lo, hi)) for lo, hi in mask)


@functools.lru_cache(maxsize=4096)
def merge_views(inner: View, outer: View) -> View | None:
    """One view equal to reading `inner` through `outer`, or None when no single view can express it."""
    if inner.contiguous:
        return outer
    if not (all_int(inner.shape) and all_int(outer.shape) and all_int(inner.strides) and all_int(outer.strides)):
        return None
    if not (isinstance(inner.offset, int) and isinstance(outer.offset, int)):
        return None
    idxs = position_vars(outer.shape, dtype=index_dtype_for((inner, outer)))
    index, valid = compose_index([inner, outer], idxs)
    valid = valid.simplify()
    if valid.op is Ops.CONST and valid.arg is False:
        # a 0-d view has no dim to carry an empty mask: keep the views apart so the reads stay invalid
        return View.create(outer.shape, mask=tuple((0, 0) for _ in outer.shape)) if outer.shape else None
    index = simplify_given_valid(index, valid)
    form, mask = linear_form(index, idxs), box_mask(valid, idxs, outer.shape)
    if form is None or mask is None:
        return None
    strides, offset = form
    return View.create(outer.shape, tuple(strides), offset, mask)


def compose_index(views: list[View], idxs: list[UOp]) -> tuple[UOp, UOp]:
    """(index, valid) of reading position `idxs` of the last view through every view before it."""
    index, valid = views[-1].to_indexed_uops(idxs)
    for view in reversed(views[:-1]):
        index, valid = view.to_indexed_uops(unravel(view.shape, index), valid)
    return index, valid
