"""Launch dimensions for GPU-style renderers: output axes become group ids, local axes local ids.

OpenCL and CUDA launch at most 3 dimensions. The innermost axis gets dimension 0; when there are more
than 3 axes, the outer ones share dimension 2 and are recovered by division and modulo. Where a dimension's
total would exceed the device's limit for it, another packing that fits is used.

>>> from tg_codegen.gpudims import special_indexes  # doctest: +SKIP
"""

from __future__ import annotations

from tg_codegen.limits import assign_dims
from tg_uop import Ops, UOp, dtypes
from tg_uop.helpers import prod


def special_indexes(sizes: list[int], prefix: str, maxes: tuple[int, ...] | None = None) -> list[UOp]:
    """One index expression per axis (in axis order) built from at most 3 SPECIAL ids named prefix+dim.

    The innermost axis takes dimension 0 and the next dimension 1 where they fit `maxes` (the device's
    per-dimension limits); otherwise another packing that fits (see limits.assign_dims).
    """
    if not sizes:
        return []
    ret: list[UOp] = [UOp.const(dtypes.int32, 0)] * len(sizes)
    for dim, axes in assign_dims(sizes, maxes):
        total = int(prod(sizes[a] for a in axes))
        sp = UOp(Ops.SPECIAL, dtypes.int32, (UOp.const(dtypes.int32, total),), (f"{prefix}{dim}", total))
        below = total
        for a in axes:
            below //= sizes[a]
            idx = sp if len(axes) == 1 else (sp // below) % sizes[a] if below > 1 else sp % sizes[a]
            ret[a] = idx if sizes[a] > 1 else UOp.const(dtypes.int32, 0)
    return ret


def launch_dims(uops: list[UOp], prefix: str) -> tuple[int, ...] | None:
    """The sizes of the SPECIALs named prefix+dim in a program, dimension 0 first (None when there are none)."""
    dims = {u.arg[0]: u.arg[1] for u in uops if u.op is Ops.SPECIAL and u.arg[0].startswith(prefix)}
    if not dims:
        return None
    return tuple(dims.get(f"{prefix}{d}", 1) for d in range(max(int(k[len(prefix) :]) for k in dims) + 1))
