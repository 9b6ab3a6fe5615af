"""Wide loads: scalar LOADs of neighbouring addresses merged into one vector LOAD (for renderers that set
`supports_float4`, as CUDA does), so a thread issues one 8- or 16-byte access instead of several small ones.

>>> from tg_codegen.wideload import widen_loads  # doctest: +SKIP
"""

from __future__ import annotations

import functools
from collections import defaultdict

from tg_uop import DType, Ops, UOp, dtypes, graph_rewrite, run_pass
from tg_uop.symbolic import symbolic

WIDE_LOADS = (8, 4, 2)
MAX_BYTES = 16


def _widenable(dt: DType) -> bool:
    return (
        dt.count == 1 and dt != dtypes.bool and dt.itemsize in (2, 4, 8) and (dtypes.is_float(dt) or dtypes.is_int(dt))
    )


def _terms(x: UOp) -> tuple[list[UOp], int]:
    """The non-constant terms and the constant of a sum, however its ADDs nest."""
    if x.op is Ops.CONST:
        return [], int(x.arg)
    if x.op is not Ops.ADD:
        return [x], 0
    (ta, ca), (tb, cb) = _terms(x.src[0]), _terms(x.src[1])
    return ta + tb, ca + cb


def _base_offset(x: UOp) -> tuple[tuple[UOp, ...], int]:
    """x as (its terms in a fixed order, constant offset): equal sums written in different orders compare equal."""
    terms, const = _terms(x)
    return tuple(sorted(terms, key=id)), const  # hash-consed: equal terms are the same object


def _aligned(base: tuple[UOp, ...], width: int) -> bool:
    """Is the sum of `base` a multiple of `width` for every value of its variables?"""
    if not base:
        return True
    rem = graph_rewrite(functools.reduce(lambda a, b: a + b, base) % width, symbolic)
    return rem.op is Ops.CONST and rem.arg == 0


def _aligned_buffer(buf: UOp) -> bool:
    """Device allocations are 256-byte aligned, STAGE's shared tiles (tc/stage.py) 16-byte (the renderer declares
    them so); other shared arrays maybe not."""
    return buf.op is Ops.DEFINE_GLOBAL or (buf.op is Ops.DEFINE_LOCAL and str(buf.arg).startswith("stage"))


def widen_loads(sink: UOp) -> UOp:
    """Scalar LOADs at neighbouring addresses (same buffer, base and gate) become one wide LOAD (of at most
    16 bytes) whose lanes they read (GEP); the first address of each wide load is a multiple of its width.
    A named pass: the loads are grouped over the whole kernel, then substituted."""
    return run_pass("wide loads", _widen_loads, sink)


def _widen_loads(sink: UOp) -> UOp:
    groups: dict[tuple[UOp, tuple[UOp, ...], tuple[UOp, ...]], dict[int, UOp]] = defaultdict(dict)
    for u in sink.toposort:
        if u.op is Ops.LOAD and _widenable(u.dtype) and u.src[0].op is Ops.INDEX:
            buf, idx = u.src[0].src[:2]
            if not _aligned_buffer(buf):
                continue
            base, off = _base_offset(idx)
            groups[(buf, base, u.src[1:])][off] = u
    mapping: dict[UOp, UOp] = {}
    for (_, base, _), loads in groups.items():
        for start in sorted(loads):
            if loads[start] in mapping:
                continue
            for width in (w for w in WIDE_LOADS if w * loads[start].dtype.itemsize <= MAX_BYTES):
                run = [loads.get(start + i) for i in range(width)]
                if start % width or any(x is None or x in mapping for x in run) or not _aligned(base, width):
                    continue
                first = loads[start]
                wide = UOp(Ops.LOAD, first.dtype.vec(width), first.src)
                mapping.update({x: wide.gep(i) for i, x in enumerate(run) if x is not None})
                break
    return sink.substitute(mapping) if mapping else sink
