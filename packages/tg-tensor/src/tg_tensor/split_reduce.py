"""Long reductions to few outputs, split in two kernels so the first runs in parallel.

Two forms: a reduction to at most SPLIT_REDUCE_OUT outputs (a sum, a norm statistic) is flattened and cut
into contiguous chunks (`split_reduce`); a longer list of outputs (a conv's weight or bias gradient: a
reduction over batch x height x width) has one reduce axis cut in G parts that become an output axis of the
first kernel (`split_axis`), so it runs G times as many threads; the second kernel sums the G partials.
Without the split, the conv weight gradient of the MNIST step ran on 18 blocks of an H100's 132 SMs.

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
# G, the chunks of a split sum: the first that divides it. 128 fills an H100 (a sum of 2^26 floats through a
# TinyJit replay: 2834-2871 GB/s vs 2544-2578 with 64, torch 2839-2846 in the same runs; bench/sweep_sum_split.py)
SPLIT_CHUNKS = (128, 64, 32, 16)
SPLIT_LANES = 8
SPLIT_AXIS_MAX_PARTIALS = 1 << 22  # the first kernel of split_axis writes at most this many partials
SPLIT_AXIS_PARTS = (256, 8)  # G, the parts an axis is cut into: the largest in this range that divides it
SPLIT_AXIS_LAST = False  # G outermost (MNIST step 217 steps/s, vs 96 with G last: bench/sweep_split.py)


def _splits(u: UOp) -> bool:
    return not is_one_hot_sum(u) and (split_reduce(u) is not None or split_axis(u) is not None)


def compares_with_arange(node: UOp, resolve: Mapping[UOp, UOp] | None = None) -> bool:
    """Is `node` `x == arange` or `x != arange` (or an AND of those): the one-hot mask of tensor indexing?"""
    node = resolve.get(node, node) if resolve is not None else node
    if node.op is Ops.AND:
        return all(compares_with_arange(s, resolve) for s in node.src)
    if node.op is not Ops.CMPNE:
        return False
    inner = resolve.get(node.src[0], node.src[0]) if resolve is not None else node.src[0]
    if inner.op is Ops.CMPNE:  # x == y is written (x != y) != True
        node = inner
    return any((resolve.get(s, s) if resolve is not None else s).base.op is Ops.ARANGE for s in node.src)


def is_one_hot_sum(node: UOp) -> bool:
    """A sum of where(idx == arange, v, 0): codegen folds it into an indexed load (tg_codegen/gather.py),
    so it must stay one reduction (a split would turn the gather back into a scan of the table)."""
    if node.op is not Ops.REDUCE_AXIS or node.arg[0] is not Ops.ADD:
        return False
    body = node.src[0].base
    while body.op is Ops.CAST:
        body = body.src[0].base
    return body.op is Ops.WHERE and compares_with_arange(body.src[0].base)


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


def split_axis(node: UOp) -> UOp | None:
    """A reduction at least SPLIT_REDUCE_MIN long per output, with one reduce axis cut in G parts.

    x of (..., B, ...) reduced over axes including B becomes x.reshape(..., G, B/G, ...) with G moved last,
    reduced over the same axes (G partials per output, G times the threads), then reduced over G.
    """
    src = node.src[0]
    shape, out = tuple(src.shape or ()), tuple(node.shape or ())
    axes = node.arg[1]
    if not all(isinstance(s, int) for s in shape) or prod(shape) // max(1, prod(out)) < SPLIT_REDUCE_MIN:
        return None
    most = min(SPLIT_AXIS_PARTS[0], SPLIT_AXIS_MAX_PARTIALS // max(1, prod(out)))
    cut = next(((a, g) for a in axes for g in range(most, SPLIT_AXIS_PARTS[1] - 1, -1) if shape[a] % g == 0), None)
    if cut is None:
        return None
    a, g = cut
    parted = src.reshape(shape[:a] + (g, shape[a] // g) + shape[a + 1 :])
    rest = [i for i in range(len(shape) + 1) if i != a]
    order = rest + [a] if SPLIT_AXIS_LAST else [a] + rest
    inner = tuple(order.index(x + 1 if x >= a else x) for x in axes)
    partials = parted.permute(tuple(order)).r(node.arg[0], tuple(sorted(inner)))
    return partials.r(node.arg[0], (len(shape) if SPLIT_AXIS_LAST else 0,)).reshape(out)


def split_reduces(root: UOp, realized: Mapping[UOp, UOp], done: dict[UOp, UOp] | None = None) -> UOp:
    """`root` with every long reduction (not yet realized) replaced by its two-stage form.

    `done` (original -> rewritten node) is shared by the roots of one schedule: a node two roots read (an
    optimizer state's ASSIGN read by the parameter's update) is rewritten once, so it is scheduled once.
    """
    nodes = root.toposort
    if not any(u.op is Ops.REDUCE_AXIS and u not in realized and _splits(u) for u in nodes):
        return root
    done = {} if done is None else done
    for u in nodes:
        if u in done:
            continue
        if u in realized or not u.src:
            done[u] = u
            continue
        new = u.replace(src=tuple(done[s] for s in u.src))
        split = new.op is Ops.REDUCE_AXIS and not is_one_hot_sum(new)
        done[u] = (split_reduce(new) or split_axis(new) or new) if split else new
    return done[root]
