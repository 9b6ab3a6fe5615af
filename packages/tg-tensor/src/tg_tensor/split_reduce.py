"""Long reductions to few outputs, split in two kernels so the first runs in parallel.

>>> from tg_tensor.split_reduce import SPLIT_REDUCE_MIN
>>> SPLIT_REDUCE_MIN
32768
"""

from __future__ import annotations

from collections.abc import Mapping

from tg_uop import Ops, UOp
from tg_uop.helpers import prod

SPLIT_REDUCE_MIN = 1 << 15  # reductions at least this long into at most SPLIT_REDUCE_OUT outputs are split
SPLIT_REDUCE_OUT = 16
SPLIT_CHUNKS = (64, 32, 16)
SPLIT_LANES = 8


def split_reduce(node: UOp) -> UOp | None:
    """A long reduction to few outputs as two kernels: partials of G contiguous chunks, then their combination.

    x of (..., R) reduced over R becomes x.reshape(..., G, R/(G*L), L) reduced over the middle axis
    (G*L partials: chunks run in parallel, the L lanes are adjacent so they load as one vector),
    then reduced over the G*L partials.
    """
    src = node.src[0]
    shape, out = tuple(src.shape or ()), tuple(node.shape or ())
    axes = node.arg[1]
    if not all(isinstance(s, int) for s in shape) or prod(out) > SPLIT_REDUCE_OUT:
        return None
    red = prod(shape[a] for a in axes)
    chunks = next((g for g in SPLIT_CHUNKS if red % (g * SPLIT_LANES) == 0), None)
    if red < SPLIT_REDUCE_MIN or chunks is None:
        return None
    keep = [i for i in range(len(shape)) if i not in axes]
    split = (chunks, red // (chunks * SPLIT_LANES), SPLIT_LANES)
    flat = src.permute(tuple(keep + list(axes))).reshape(tuple(shape[i] for i in keep) + split)
    stage1 = flat.r(node.arg[0], (len(keep) + 1,))
    return stage1.r(node.arg[0], (len(keep), len(keep) + 2)).reshape(out)


def split_reduces(root: UOp, realized: Mapping[UOp, UOp]) -> UOp:
    """`root` with every long reduction (not yet realized) replaced by its two-stage form."""
    nodes = root.toposort
    if not any(u.op is Ops.REDUCE_AXIS and u not in realized and split_reduce(u) is not None for u in nodes):
        return root
    done: dict[UOp, UOp] = {}
    for u in nodes:
        if u in realized or not u.src:
            done[u] = u
            continue
        new = u.replace(src=tuple(done[s] for s in u.src))
        done[u] = split_reduce(new) or new if new.op is Ops.REDUCE_AXIS else new
    return done[root]
