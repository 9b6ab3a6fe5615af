"""64-bit indexing, decided per kernel from its sizes: int64 loops and index maths only where 2^31 is in reach.

Index maths is int32 by default (fast, and what GPUs count in). A kernel whose loops or views reach 2^30
elements or addresses (a margin: an index expression can hold a few times an extent before its final `%`)
is lowered with int64 RANGEs and constants instead; the ShapeTracker builds its index and validity in the
dtype of the positions it is given. Data keeps its dtypes. Kernels below the limit are unchanged.

>>> from tg_shape import ShapeTracker
>>> ShapeTracker.from_shape((2**31 + 5,)).views[0].extent() >= WIDE_LIMIT
True
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tg_uop import DType, Ops, dtypes
from tg_uop.helpers import prod

if TYPE_CHECKING:
    from tg_codegen.kernel import Kernel

WIDE_LIMIT = 2**30  # an extent at or past this makes the kernel's index maths int64


def index_dtype(k: Kernel) -> DType:
    """int64 when the kernel's loops or any view of its AST can reach 2^30, else int32."""
    extents = [int(prod(s for s in k.full_shape if isinstance(s, int)))]
    extents += [v.extent() for u in k.ast.toposort if u.op is Ops.VIEW for v in u.arg.views]
    return dtypes.int64 if max(extents) >= WIDE_LIMIT else dtypes.int32
