"""Long reductions to few outputs, split in two kernels so the first runs in parallel.

Two forms: a reduction to at most SPLIT_REDUCE_OUT outputs (a sum, a norm statistic) is flattened and cut
into contiguous chunks (`split_reduce`); a longer list of outputs (a conv's weight or bias gradient: a
reduction over batch x height x width) has one reduce axis cut in G parts that become an output axis of the
first kernel (`split_axis`), so it runs G times as many threads; the second kernel sums the G partials.
Without the split, the conv weight gradient of the MNIST step ran on 18 blocks of an H100's 132 SMs.

>>> from tg_tensor.engine.split_reduce import SPLIT_REDUCE_MIN
>>> SPLIT_REDUCE_MIN
32768
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tg_uop import GroupOp, Ops, UOp, dtypes
from tg_uop.helpers import ContextVar, prod

SPLIT_REDUCE_MIN = 1 << 15  # reductions at least this long into at most SPLIT_REDUCE_OUT outputs are split
SPLIT_REDUCE_OUT = 16
# G, the chunks of a split sum: the first that divides it. 128 fills an H100 (a sum of 2^26 floats through a
# TinyJit replay: 2834-2871 GB/s vs 2544-2578 with 64, torch 2839-2846 in the same runs; bench/sweep_sum_split.py)
SPLIT_CHUNKS = (128, 64, 32, 16)
SPLIT_LANES = 8
SPLIT_INNER = 32  # a chunk's length per lane: a multiple of this lets a workgroup share it (the GPU's GROUP)
SPLIT_AXIS_MAX_PARTIALS = 1 << 22  # the first kernel of split_axis writes at most this many partials
SPLIT_AXIS_PARTS = (256, 8)  # G, the parts an axis is cut into: the largest in this range that divides it
SPLIT_AXIS_LAST = False  # G outermost (MNIST step 217 steps/s, vs 96 with G last: bench/sweep_split.py)


def _splits(u: UOp, units: int) -> bool:
    if is_one_hot_sum(u):
        return False
    return split_reduce(u) is not None or split_axis(u) is not None or split_for_units(u, units) is not None


def compares_with_arange(node: UOp, resolve: Mapping[UOp, UOp] | None = None) -> bool:
    """Is `node` `x == arange` or `x != arange` (or an AND of those): the one-hot mask of tensor indexing?"""
    return _aranges(node, resolve) is not None


def _aranges(node: UOp, resolve: Mapping[UOp, UOp] | None = None) -> list[UOp] | None:
    """The ARANGE nodes a one-hot mask compares with (compares_with_arange), or None when `node` is not one."""

    def look(u: UOp) -> UOp:
        return resolve.get(u, u) if resolve is not None else u

    node = look(node)
    if node.op is Ops.AND:
        found: list[UOp] = []
        for s in node.src:
            if (sub := _aranges(s, resolve)) is None:
                return None
            found += sub
        return found
    if node.op is not Ops.CMPNE:
        return None
    if (inner := look(node.src[0])).op is Ops.CMPNE:  # x == y is written (x != y) != True
        node = inner
    return [b for s in node.src if (b := look(s).base).op is Ops.ARANGE] or None


def is_one_hot_sum(node: UOp) -> bool:
    """A sum over the arange's values of where(idx == arange, v, 0): codegen folds it into an indexed load
    (tg_codegen/gather.py), so it must stay one reduction (a split would turn the gather back into a scan of the
    table). Its transpose, a sum over the indices (an embedding's gradient: for each row of the table, the rows of v
    whose index is that row), is a scan either way and is split like any long reduction: the GPT example's token
    embedding gradient (65 x 384 outputs, each a sum over 16384 tokens) ran on 195 blocks for 0.83 ms of its
    17 ms bf16 step on an H200."""
    if node.op is not Ops.REDUCE_AXIS or node.arg[0] is not Ops.ADD:
        return False
    body = node.src[0].base
    while body.op is Ops.CAST:
        body = body.src[0].base
    if body.op is not Ops.WHERE or (aranges := _aranges(body.src[0].base)) is None:
        return False
    shape = tuple(node.src[0].shape or ())
    if not all(isinstance(s, int) for s in shape):
        return True
    reduced = prod(shape[a] for a in node.arg[1])
    return any(prod(a.shape or ()) == reduced for a in aranges)


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
    chunks, pad = _chunking(red, node.arg[0])
    if red < SPLIT_REDUCE_MIN or chunks is None:
        return None
    keep = [i for i in range(len(shape)) if i not in axes]
    split = (chunks, (red + pad) // (chunks * SPLIT_LANES), SPLIT_LANES)
    flat = src.permute(tuple(keep + list(axes))).reshape(tuple(shape[i] for i in keep) + (red,))
    if pad:
        flat = flat.pad(((0, 0),) * len(keep) + ((0, pad),))
    flat = flat.reshape(tuple(shape[i] for i in keep) + split)
    stage1 = flat.r(node.arg[0], (len(keep) + 1,))
    return stage1.r(node.arg[0], (len(keep), len(keep) + 2)).reshape(out)


def _chunking(red: int, op: Ops) -> tuple[int | None, int]:
    """(G, padding): the chunks of a split reduction of length `red` and the zeros appended to it.

    Each chunk's length per lane should be a multiple of SPLIT_INNER, so that a workgroup shares it (GROUP); a sum
    that no G divides so is padded with zeros to one that does (10,778,112 floats: 1,536 zeros), a max is split as
    it divides (or not at all)."""
    for g in SPLIT_CHUNKS:
        if red % (g * SPLIT_LANES * SPLIT_INNER) == 0:
            return g, 0
    if op is Ops.ADD:  # (zeros change no sum)
        unit = SPLIT_CHUNKS[0] * SPLIT_LANES * SPLIT_INNER
        return SPLIT_CHUNKS[0], -red % unit
    return next(((g, 0) for g in SPLIT_CHUNKS if red % (g * SPLIT_LANES) == 0), (None, 0))


def split_axis(node: UOp) -> UOp | None:
    """A reduction at least SPLIT_REDUCE_MIN long per output, with one reduce axis cut in G parts.

    x of (..., B, ...) reduced over axes including B becomes x.reshape(..., G, B/G, ...) with G moved last,
    reduced over the same axes (G partials per output, G times the threads), then reduced over G.
    """
    src = node.src[0]
    shape, out = tuple(src.shape or ()), tuple(node.shape or ())
    if not all(isinstance(s, int) for s in shape) or prod(shape) // max(1, prod(out)) < SPLIT_REDUCE_MIN:
        return None
    most = min(SPLIT_AXIS_PARTS[0], SPLIT_AXIS_MAX_PARTIALS // max(1, prod(out)))
    return _split_in_parts(node, range(most, SPLIT_AXIS_PARTS[1] - 1, -1))


# Split-K: a reduction long enough per output whose outputs fill fewer thread blocks than the device has compute
# units (a weight gradient: 384 x 1536 outputs, each a sum over batch x time = 16384, made 72 blocks of an H200's
# 132 SMs; a bias gradient's 1536 outputs, 24 blocks) is cut in G parts, G the smallest power of two giving
# SPLIT_K_WAVES blocks per unit. A block holds SPLIT_K_TILE outputs of a product (the GPU heuristic's 128 x 64
# matmul tile), SPLIT_K_ROWS of another reduction (256 threads x 8). A product of float32 operands (FMA tiles, one or
# two blocks to an SM: a last wave a fraction full idles most of it) aims at SPLIT_K_WAVES_FP32: the GPT example's
# BIG fp32 step on an H200 42.8 -> 40.6 ms (2, 4, 8, 16: 42.8, 42.4, 40.7, 42.1), TF32 20.5 -> 20.1; its bf16 step
# was slower so (16.9 -> 17.5 ms with 8) and keeps 2.
SPLIT_K_MIN = 4096  # the reduction per output at least this long (a 1024^3 matmul, 128 tiles, is left whole) ...
SPLIT_K_PART_MIN = 64  # ... and each of the G parts at least this long
SPLIT_K_TILE = 8192
SPLIT_K_ROWS = 2048
SPLIT_K_GEMV = 8  # outputs of a matrix-vector product per block (a 2048-row matvec: 256 blocks, left whole)
SPLIT_K_WAVES = ContextVar("SPLIT_K_WAVES", 2)
SPLIT_K_WAVES_FP32 = ContextVar("SPLIT_K_WAVES_FP32", 8)
SPLIT_K_MAX = 256


def _is_product(u: UOp) -> bool:
    """Is `u` (a reduction's input) the product of two operands broadcast against each other: a matmul's?"""
    u = _uncast(u)
    return u.op is Ops.MUL and all(any(n.op is Ops.EXPAND for n in _chain(s)) for s in u.src)


def _uncast(u: UOp) -> UOp:
    while u.op is Ops.CAST:
        u = u.src[0]
    return u


def _is_vector_product(u: UOp, out: tuple[int, ...]) -> bool:
    """Is `u` (a reduction's input, to `out`) a matrix times a vector: a product of which one operand is broadcast,
    to one output axis longer than 1?"""
    while u.op is Ops.CAST:
        u = u.src[0]
    broadcast = [any(n.op is Ops.EXPAND for n in _chain(s)) for s in u.src]
    return u.op is Ops.MUL and sum(broadcast) == 1 and sum(1 for s in out if s != 1) == 1


def _chain(u: UOp) -> list[UOp]:
    """`u` and the movement and cast ops under it, down to what they view."""
    out = [u]
    while u.op in GroupOp.Movement or u.op is Ops.CAST:
        u = u.src[0]
        out.append(u)
    return out


def split_for_units(node: UOp, units: int) -> UOp | None:
    """A long reduction to too few outputs to keep `units` compute units busy, cut in G parts (split-K).

    >>> from tg_uop import Ops, UOp, dtypes
    >>> x = UOp.new_buffer("CPU", 384 * 16384, dtypes.float32).reshape((16384, 384))
    >>> split_for_units(x.r(Ops.ADD, (0,)), units=132).src[0].src[0].shape  # the partials: 256 per output
    (256, 1, 384)
    >>> split_for_units(x.r(Ops.ADD, (0,)), units=0) is None  # (a CPU: its threads split the outputs)
    True
    >>> v, w = UOp.new_buffer("CPU", 8192, dtypes.float32), UOp.new_buffer("CPU", 2048 * 8192, dtypes.float32)
    >>> mv = (v.reshape((1, 8192)).expand((2048, 8192)) * w.reshape((2048, 8192))).r(Ops.ADD, (1,))
    >>> split_for_units(mv, units=132) is None  # (a matrix-vector product: 2048 rows fill 256 blocks)
    True
    """
    src = node.src[0]
    shape, out = tuple(src.shape or ()), tuple(node.shape or ())
    if units <= 0 or not all(isinstance(s, int) for s in shape):
        return None
    outs, red = prod(out), prod(shape) // max(1, prod(out))
    product = _is_product(src)
    per_block = SPLIT_K_GEMV if _is_vector_product(src, out) else SPLIT_K_TILE if product else SPLIT_K_ROWS
    blocks = -(-outs // per_block)
    if red < SPLIT_K_MIN or blocks >= units:
        return None
    waves = SPLIT_K_WAVES_FP32 if product and _uncast(src).dtype == dtypes.float32 else SPLIT_K_WAVES
    want = min(SPLIT_K_MAX, red // SPLIT_K_PART_MIN, -(-waves.value * units // blocks))
    g = 1 << max(0, (want - 1).bit_length())  # the smallest power of two >= want
    parts = [p for p in (g, g // 2, g // 4) if p >= 2 and p * SPLIT_K_PART_MIN <= red]
    return _split_in_parts(node, parts, largest_first=True)


def _split_in_parts(node: UOp, parts: Iterable[int], largest_first: bool = False) -> UOp | None:
    """`node` with a reduce axis cut in G parts (the first of `parts` that divides one: the first axis that takes
    any, or with `largest_first` the first part any axis takes), the G partials as a new output axis of a first
    reduction, then summed by a second one; None when no part count divides."""
    src = node.src[0]
    shape, out = tuple(src.shape or ()), tuple(node.shape or ())
    axes = node.arg[1]
    parts = list(parts)
    tries = [(a, g) for g in parts for a in axes] if largest_first else [(a, g) for a in axes for g in parts]
    cut = next(((a, g) for a, g in tries if shape[a] % g == 0), None)
    if cut is None:
        return None
    a, g = cut
    parted = src.reshape(shape[:a] + (g, shape[a] // g) + shape[a + 1 :])
    rest = [i for i in range(len(shape) + 1) if i != a]
    order = rest + [a] if SPLIT_AXIS_LAST else [a] + rest
    inner = tuple(order.index(x + 1 if x >= a else x) for x in axes)
    partials = parted.permute(tuple(order)).r(node.arg[0], tuple(sorted(inner)))
    return partials.r(node.arg[0], (len(shape) if SPLIT_AXIS_LAST else 0,)).reshape(out)


def split_reduces(root: UOp, realized: Mapping[UOp, UOp], done: dict[UOp, UOp] | None = None, units: int = 0) -> UOp:
    """`root` with every long reduction (not yet realized) replaced by its two-stage form; `units`: the compute
    units of the device (0: none to fill, no split-K).

    `done` (original -> rewritten node) is shared by the roots of one schedule: a node two roots read (an
    optimizer state's ASSIGN read by the parameter's update) is rewritten once, so it is scheduled once.
    """
    nodes = root.toposort
    if not any(u.op is Ops.REDUCE_AXIS and u not in realized and _splits(u, units) for u in nodes):
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
        done[u] = (split_reduce(new) or split_axis(new) or split_for_units(new, units) or new) if split else new
    return done[root]
