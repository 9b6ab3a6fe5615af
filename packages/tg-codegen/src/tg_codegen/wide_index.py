"""64-bit indexing, decided per kernel from its sizes: int64 loops and index maths only where 2^31 is in reach.

Index maths is int32 by default (fast, and what GPUs count in). A kernel whose loops or views reach 2^30 elements
or addresses (a margin: an index expression can hold a few times an extent before its final `%`) is lowered with
int64 RANGEs and constants instead (a kernel with staged tiles counts the addresses its views span, see
`index_dtype`); the ShapeTracker builds its index and validity in the dtype of the positions it is given. Data keeps
its dtypes. Kernels below the limit are unchanged.

>>> from tg_shape import ShapeTracker
>>> ShapeTracker.from_shape((2**31 + 5,)).views[0].extent() >= WIDE_LIMIT
True
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tg_codegen.axes import AxisType
from tg_uop import DType, Ops, dtypes
from tg_uop.helpers import prod

if TYPE_CHECKING:
    from tg_codegen.kernel import Kernel

WIDE_LIMIT = 2**30  # an extent at or past this makes the kernel's index maths int64


def index_dtype(k: Kernel) -> DType:
    """int64 when the kernel's loops or any view of its AST can reach 2^30, else int32.

    Kernels with staged tiles (STAGE) count addresses instead of loops: a ShapeTracker of one View indexes with
    offset + sum(loop index x stride), every partial sum within its span; where views are stacked, an inner view's
    position is unravelled from a linear position over its shape, so its element count and the loops' whole
    product count too. A GPT step's fp32 products (16384 x 1536 x 384 loops, every index below 2^25) were int64
    by the loop count: int32 made them 2.5% faster on an H200 (bench/bench_tc_opts.py-style probes). Register
    tiles without shared memory keep the loop count: there int32 was slower (docs/gpu.md)."""
    ints = [int(s) for s in k.full_shape if isinstance(s, int)]
    sts = [u.arg for u in k.ast.toposort if u.op is Ops.VIEW]
    if not k.staged:
        extents = [int(prod(ints))] + [v.extent() for st in sts for v in st.views]
        return dtypes.int64 if max(extents) >= WIDE_LIMIT else dtypes.int32
    outputs = [s for s, t in zip(k.full_shape, k.axis_types) if isinstance(s, int) and t not in _REDUCING]
    extents = [int(prod(outputs)), max(ints, default=0)]
    for st in sts:
        if len(st.views) == 1 and (span := st.views[0].span()) is not None:
            extents.append(span)
        else:
            extents += [v.extent() for v in st.views] + [int(prod(ints))]
    return dtypes.int64 if max(extents) >= WIDE_LIMIT else dtypes.int32


_REDUCING = (AxisType.REDUCE, AxisType.UNROLL, AxisType.GROUP)
