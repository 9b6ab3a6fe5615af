"""Launch dimensions for GPU-style renderers: the kernel's global loops become one grid of thread ids.

Every output loop (RANGE kind "loop") is replaced by digits of a linear thread id
`gidx0 * local + lidx0`, with `local` a power of two (up to 256) that divides the number of outputs, so
neighbouring threads touch neighbouring elements. Reduce loops stay loops inside each thread.
"""

from __future__ import annotations

from tg_codegen.renderer import Renderer
from tg_uop import Ops, UOp, dtypes, graph_rewrite
from tg_uop.helpers import prod
from tg_uop.symbolic import symbolic

LaunchDims = tuple[tuple[int, ...], tuple[int, ...]]


def _local_size(total: int, limit: int) -> int:
    local = 1
    while local * 2 <= limit and total % (local * 2) == 0:
        local *= 2
    return local


def add_gpudims(sink: UOp, renderer: Renderer) -> tuple[UOp, LaunchDims | None]:
    """`sink` with its global loops mapped to SPECIAL thread ids, and (global_size, local_size); None on CPUs."""
    if not renderer.has_local:
        return sink, None
    loops = sorted((u for u in sink.toposort if u.op is Ops.RANGE and u.arg[1] == "loop"), key=lambda r: r.arg)
    if not loops:
        return sink, ((1,), (1,))
    if any(r.src[0].op is not Ops.CONST for r in loops):
        return sink, ((1,), (1,))  # symbolic sizes: run the loops in one thread
    sizes = [int(r.src[0].arg) for r in loops]
    total = prod(sizes)
    local = _local_size(total, min(256, renderer.local_max[0] if renderer.local_max else 256))
    grid = total // local
    i32 = dtypes.int32
    gid = UOp(Ops.SPECIAL, i32, (UOp.const(i32, grid),), "gidx0")
    lid = UOp(Ops.SPECIAL, i32, (UOp.const(i32, local),), "lidx0")
    linear = gid * local + lid if local > 1 else gid
    mapping: dict[UOp, UOp] = {}
    for i, (r, size) in enumerate(zip(loops, sizes)):
        inner = prod(sizes[i + 1 :])
        digit = linear // inner if inner > 1 else linear
        mapping[r] = digit % size if i > 0 else digit
    return graph_rewrite(sink.substitute(mapping), symbolic), ((grid, 1, 1), (local, 1, 1))
