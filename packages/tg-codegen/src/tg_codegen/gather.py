"""Gather folding: a one-hot compare-and-sum over a table becomes one indexed load per output element.

Tensor indexing by a tensor (`X[idx]`, `gather`, embeddings) is written at the tensor level as

    out = sum over r of where(idx == arange(r), V(r), 0)

which, computed as written, reads the whole table for every index: O(indices x table). When the
sum runs over the axes the arange walks, the index does not depend on them, and V is made of loads
(and ops that keep 0 at 0), the sum has at most one non-zero term, so it equals

    out = V(idx) where 0 <= idx < n, else 0

that is, each load of V reads at `idx * stride` along the summed axis (a bounds-checked, gated
load) and the reduction disappears: O(indices x row).

In the kernel AST the folded load is `LOAD(DEFINE_GLOBAL, VIEW(st), *idx)` with `arg` holding one
`(stride, n)` per summed axis; `st` has size 1 on those axes. The lowerer adds `idx * stride` to the
address and gates the load with `0 <= idx < n`.

>>> from tg_codegen.gather import fold_gathers  # doctest: +SKIP
"""

from __future__ import annotations

from tg_shape import ShapeTracker
from tg_uop import GroupOp, Ops, UOp, map_graph

# ops V may contain: f(0, ..., 0) == 0, so a gated load's 0 out of range stays 0
_VALUE_OPS = (GroupOp.PadSafe | {Ops.CAST, Ops.LOAD, Ops.VIEW, Ops.DEFINE_GLOBAL}) - {Ops.CMPNE, Ops.CMPLT}


def fold_gathers(ast: UOp) -> UOp:
    """The kernel AST with every foldable one-hot sum replaced by gathered loads (see the module doc)."""
    return map_graph("fold one-hot gathers", _fold_one, ast)


def _fold_one(u: UOp, src: tuple[UOp, ...]) -> UOp:
    new = u.replace(src=src) if src != u.src else u
    if new.op is Ops.REDUCE_AXIS and new.arg[0] is Ops.ADD and (folded := _fold(new)) is not None:
        return folded
    return new


def _fold(red: UOp) -> UOp | None:
    axes = tuple(red.arg[1])
    casts, body = [], red.src[0]
    while body.op is Ops.CAST:
        casts.append(body.dtype)
        body = body.src[0]
    if body.op is not Ops.WHERE or not _is_zero(body.src[2]):
        return None
    cond, value = body.src[0], body.src[1]
    pairs = _index_pairs(cond)
    if pairs is None or sorted(a for a, _, _ in pairs) != sorted(axes) or len(set(axes)) != len(pairs):
        return None
    if any(not _independent(idx, axes) for _, idx, _ in pairs):
        return None
    if not {n.op for n in value.toposort} <= _VALUE_OPS:
        return None
    idxs = tuple(_shrink(idx, axes) for _, idx, _ in pairs)
    out = _gathered(value, pairs, idxs, axes)
    if out is None:
        return None
    for dt in reversed(casts):
        out = out.cast(dt)
    return out if out.dtype == red.dtype else out.cast(red.dtype)


def _is_zero(u: UOp) -> bool:
    return u.op is Ops.CONST and u.arg == 0


def _index_pairs(cond: UOp) -> list[tuple[int, UOp, int]] | None:
    """cond as an AND of `idx == arange along axis a`: [(a, idx, n)], or None."""
    if cond.op is Ops.AND:
        left, right = _index_pairs(cond.src[0]), _index_pairs(cond.src[1])
        return None if left is None or right is None else left + right
    # a == b is written CMPNE(CMPNE(a, b), True)
    if cond.op is not Ops.CMPNE or not (cond.src[1].op is Ops.CONST and cond.src[1].arg is True):
        return None
    ne = cond.src[0]
    if ne.op is not Ops.CMPNE:
        return None
    for ar, idx in ((ne.src[1], ne.src[0]), (ne.src[0], ne.src[1])):
        if ar.op is Ops.ARANGE and (axis := _arange_axis(ar)) is not None:
            return [(axis, idx, int(ar.arg))]
    return None


def _arange_axis(ar: UOp) -> int | None:
    """The axis an ARANGE walks with value == loop index (stride 1, no offset or mask), else None."""
    st: ShapeTracker = ar.src[0].arg
    if len(st.views) != 1:
        return None
    v = st.views[0]
    if v.offset != 0 or v.mask is not None:
        return None
    ones = [i for i, s in enumerate(v.strides) if s != 0]
    if len(ones) != 1 or v.strides[ones[0]] != 1 or v.shape[ones[0]] != ar.arg:
        return None
    return ones[0]


def _views(u: UOp) -> list[ShapeTracker]:
    return [n.arg for n in u.toposort if n.op is Ops.VIEW]


def _independent(idx: UOp, axes: tuple[int, ...]) -> bool:
    """Does `idx` read the same value all along `axes` (stride 0, no mask there)?"""
    if any(n.op is Ops.REDUCE_AXIS for n in idx.toposort):
        return False
    for st in _views(idx):
        if len(st.views) != 1:
            return False
        v = st.views[0]
        for a in axes:
            if v.strides[a] != 0 or (v.mask is not None and v.mask[a] != (0, v.shape[a])):
                return False
    return True


def _shrink_st(st: ShapeTracker, axes: tuple[int, ...]) -> ShapeTracker:
    return st.shrink(tuple((0, 1) if i in axes else (0, s) for i, s in enumerate(st.shape)))


def _shrink(u: UOp, axes: tuple[int, ...]) -> UOp:
    """`u` with every view cut to its first position along `axes`."""
    done: dict[UOp, UOp] = {}
    for n in u.toposort:
        if n.op is Ops.VIEW:
            done[n] = n.replace(arg=_shrink_st(n.arg, axes))
        else:
            done[n] = n.replace(src=tuple(done[s] for s in n.src))
    return done[u]


def _gathered(
    value: UOp, pairs: list[tuple[int, UOp, int]], idxs: tuple[UOp, ...], axes: tuple[int, ...]
) -> UOp | None:
    """`value` with each load reading at the index along the summed axes; None if a load cannot."""
    done: dict[UOp, UOp] = {}
    for n in value.toposort:
        if n.op is Ops.LOAD:
            st: ShapeTracker = n.src[1].arg
            if len(st.views) != 1 or len(n.src) != 2:
                return None
            v = st.views[0]
            if v.mask is not None and any(v.mask[a] != (0, v.shape[a]) for a, _, _ in pairs):
                return None
            arg = tuple((v.strides[a], size) for a, _, size in pairs)
            view = n.src[1].replace(arg=_shrink_st(st, axes))
            done[n] = UOp(Ops.LOAD, n.dtype, (n.src[0], view, *idxs), arg)
        elif n.op is Ops.VIEW:
            done[n] = n
        else:
            done[n] = n.replace(src=tuple(done[s] for s in n.src))
    return done[value]
