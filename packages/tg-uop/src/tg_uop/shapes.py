"""Shapes of tensor-level and kernel-level UOps (movement ops, reductions, elementwise ops, views).

>>> from tg_uop import UOp, dtypes
>>> b = UOp.new_buffer("PYTHON", 12, dtypes.float32)
>>> b.reshape((3, 4)).permute((1, 0)).shape
(4, 3)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tg_uop.ops import GroupOp, Ops

if TYPE_CHECKING:
    from tg_uop.uop import UOp

sint = int | Any


def ssimplify(x: sint) -> sint:
    """A symbolic size simplified (`(n + 1) - n` is 1, `n - 0` is n); an int stays an int."""
    if isinstance(x, int):
        return x
    s = x.simplify()
    return int(s.arg) if s.op is Ops.CONST else s


_FIRST_SOURCE_SHAPE = GroupOp.Elementwise - {Ops.WHERE}  # (checked first: the most common nodes)


def uop_shape(u: UOp) -> tuple[sint, ...] | None:
    op = u.op
    if op in _FIRST_SOURCE_SHAPE:
        return u.src[0].shape if u.src else None
    if op is Ops.VIEW:
        return tuple(u.arg.shape)
    if op is Ops.BUFFER:
        return (u.arg[1],)
    if op is Ops.CONST:
        if not u.src:
            return None
        return () if u.src[0].op is Ops.DEVICE else u.src[0].shape
    if op is Ops.ARANGE:
        return (u.arg,) if u.src[0].op is Ops.DEVICE else u.src[0].shape
    if op is Ops.RESHAPE or op is Ops.EXPAND:
        return tuple(u.arg)
    if op is Ops.MULTI:
        return _multi_shape(u)
    if op is Ops.COLLECTIVE:
        return (u.arg[2],)
    if op is Ops.CUSTOM and u.src and u.src[-1].op is Ops.DEVICE:  # a tensor-level kernel from source: arg (size, ..)
        return (u.arg[0],)
    src_shape = u.src[0].shape if u.src else None
    if op in (Ops.LOAD, Ops.STORE) and len(u.src) > 1 and u.src[1].op is Ops.VIEW:
        return u.src[1].shape
    if src_shape is None:
        return None
    if op is Ops.PERMUTE:
        return tuple(src_shape[i] for i in u.arg)
    if op is Ops.PAD:
        return tuple(ssimplify(s + b + a) for s, (b, a) in zip(src_shape, u.arg))
    if op is Ops.SHRINK:
        return tuple(e if isinstance(b, int) and b == 0 else ssimplify(e - b) for b, e in u.arg)
    if op is Ops.REDUCE_AXIS:
        return tuple(1 if i in u.arg[1] else s for i, s in enumerate(src_shape))
    if op in GroupOp.Elementwise and op is Ops.WHERE:
        return u.src[1].shape
    if op in GroupOp.Elementwise or op in (Ops.FLIP, Ops.COPY, Ops.CONTIGUOUS, Ops.DETACH, Ops.ASSIGN):
        return src_shape
    return None


def _multi_shape(u: UOp) -> tuple[sint, ...] | None:
    """The whole shape of a tensor split over devices: the shards' shape, times their count on the sharded axis."""
    shard = u.src[0].shape
    if shard is None or u.arg is None:
        return shard
    n = len(u.src) - 1
    return tuple(s * n if i == u.arg else s for i, s in enumerate(shard))
