"""STAGE: the operand tiles of a reduction staged in shared memory, loaded once per workgroup and read by all.

In a matmul or conv kernel with a workgroup (LOCAL axes), neighbouring threads read the same operand values:
a thread computing row m of C reads row m of A, and so does every thread of its workgroup that computes another
column. `Opt(OptOps.STAGE)` makes the workgroup load each such operand's tile once per step of the reduce loop:

    for each step of the reduce loop(s):
        barrier                           (every thread is done reading the previous tile)
        smem_a[...] = A[...]; smem_b[...] = B[...]   (each thread copies a share: element j*threads + tid)
        barrier                           (the tiles are complete)
        the usual unrolled body, reading smem_a and smem_b instead of A and B

A load is staged when it moves along a reduce axis and some LOCAL axis does not move it (so threads share it).
Its tile is every element it reads for one step: the LOCAL, UPCAST and UNROLL axes it moves along. The copy
walks the tile with the smallest global stride fastest (neighbouring threads read neighbouring addresses); the
tile is stored UNROLL axes outermost, then LOCAL, then UPCAST (a thread's register tile is contiguous, so its
reads merge into wide loads). Masked (padded) elements are stored as 0, as a gated load reads them.

>>> Opt(OptOps.STAGE).op.name
'STAGE'
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tg_codegen.axes import AxisType
from tg_codegen.opt import KernelOptError, Opt, OptOps
from tg_shape import ShapeTracker
from tg_uop import Ops, UOp, dtypes
from tg_uop.helpers import prod

if TYPE_CHECKING:
    from tg_codegen.kernel import Kernel
    from tg_codegen.lowerer import Lowerer

# also their order in shared memory, outermost first (a tensor core's tile axes innermost, M then N then K)
TILE_AXES = (AxisType.UNROLL, AxisType.LOCAL, AxisType.UPCAST, AxisType.TCM, AxisType.TCN, AxisType.TCK)


@dataclass(frozen=True)
class Tile:
    """Where one staged load's tile lives: its axes in shared-memory order, their strides there, its size."""

    axes: tuple[int, ...]
    strides: tuple[int, ...]
    size: int
    copy_order: tuple[int, ...]  # the axes as the copy walks them, fastest last


def _real_strides(load: UOp) -> tuple[object, ...]:
    st: ShapeTracker = load.src[1].arg
    return st.real_strides()


def staged_loads(k: Kernel) -> list[UOp]:
    """The loads of `k`'s reduction that STAGE puts in shared memory (empty when nothing qualifies)."""
    if len(k.reduceops) != 1:
        return []
    locals_ = [a for a in k.axes_of(AxisType.LOCAL) if k.full_shape[a] != 1]
    reduces = k.axes_of(AxisType.REDUCE, AxisType.UNROLL)
    ret = []
    for u in k.reduceops[0].src[0].toposort:
        if u.op is not Ops.LOAD or len(u.src) != 2 or u.src[0].op is not Ops.DEFINE_GLOBAL:
            continue  # gathered loads (extra index sources) are read in place
        strides = _real_strides(u)
        if any(strides[a] != 0 for a in reduces) and any(strides[a] == 0 for a in locals_):
            ret.append(u)
    return ret


def tile_of(k: Kernel, load: UOp) -> Tile:
    """The shared-memory tile of a staged load in kernel `k` (its current axes)."""
    strides = _real_strides(load)
    rank = {t: i for i, t in enumerate(TILE_AXES)}
    axes = sorted(
        (a for a in k.axes_of(*TILE_AXES) if strides[a] != 0 and k.full_shape[a] != 1),
        key=lambda a: (rank[k.axis_types[a]], a),
    )
    sizes = [int(k.full_shape[a]) for a in axes]
    smem = tuple(int(prod(sizes[i + 1 :])) for i in range(len(sizes)))

    def global_stride(a: int) -> int:
        s = strides[a]
        return abs(s) if isinstance(s, int) else 1 << 40

    copy_order = tuple(sorted(axes, key=lambda a: (-global_stride(a), a)))
    return Tile(tuple(axes), smem, int(prod(sizes)), copy_order)


def stage_bytes(k: Kernel) -> int:
    """Shared memory the staged tiles of `k` take (0 when STAGE is not applied)."""
    if not k.staged:
        return 0
    return sum(tile_of(k, u).size * u.dtype.itemsize for u in staged_loads(k))


def apply_stage(k: Kernel, opt: Opt) -> None:
    """Check that STAGE applies to `k` and mark it (the tiles are built when the kernel is lowered)."""
    if not k.opts.has_local or not k.opts.has_shared:
        raise KernelOptError(f"{opt}: the {k.opts.device or 'generic'} renderer has no local (shared) memory")
    if k.staged:
        raise KernelOptError(f"{opt}: STAGE was already applied")
    if k.axes_of(AxisType.GROUP):
        raise KernelOptError(f"{opt}: STAGE does not combine with GROUP")
    if not k.axes_of(AxisType.LOCAL):
        raise KernelOptError(f"{opt}: STAGE needs a workgroup (LOCAL axes) whose threads share loads")
    k.staged = True
    if not staged_loads(k):
        raise KernelOptError(f"{opt}: no load of the reduction is shared by the workgroup's threads")


class Stager:
    """Builds a kernel's staged tiles while it is lowered: the copies, the barriers and the shared-memory reads."""

    def __init__(self, lw: Lowerer) -> None:
        self.lw, self.k = lw, lw.k
        self.loads = staged_loads(self.k)
        self.bufs: dict[UOp, tuple[UOp, Tile]] = {}
        self.ready: UOp | None = None  # the barrier after every tile is copied

    def read(self, load: UOp, idxs: tuple[UOp, ...]) -> UOp | None:
        """`load` at `idxs` read from its staged tile, or None when `load` is not staged."""
        if load not in self.loads:
            return None
        if self.ready is None:
            self.ready = self._copy_all()
        buf, tile = self.bufs[load]
        addr = functools.reduce(lambda x, y: x + y, [idxs[a] * s for a, s in zip(tile.axes, tile.strides)], self._c(0))
        return UOp(Ops.LOAD, load.dtype, (UOp(Ops.INDEX, buf.dtype, (buf, addr, self.ready)),))

    def _c(self, v: int) -> UOp:
        return UOp.const(self.lw.idx_dt, v)

    def _copy_all(self) -> UOp:
        lw, k = self.lw, self.k
        loops = tuple(lw.loop[a] for a in k.axes_of(AxisType.REDUCE) if lw.loop[a].op is Ops.RANGE)
        # every thread has read the previous step's tiles before any thread overwrites them
        done = UOp(Ops.BARRIER, dtypes.void, loops)
        stores: list[UOp] = []
        for load in self.loads:
            tile = tile_of(k, load)
            buf = UOp(Ops.DEFINE_LOCAL, load.dtype.ptr(tile.size, local=True), (), f"stage{lw.n_locals}")
            lw.n_locals += 1
            self.bufs[load] = (buf, tile)
            stores += self._copy(load, buf, tile, done)
        return UOp(Ops.BARRIER, dtypes.void, tuple(stores))

    def _copy(self, load: UOp, buf: UOp, tile: Tile, done: UOp) -> list[UOp]:
        """Each thread copies elements tid, tid + threads, ... of the tile (in copy order) to shared memory."""
        lw, k = self.lw, self.k
        locals_ = [a for a in k.axes_of(AxisType.LOCAL) if k.full_shape[a] != 1]
        sizes = [int(k.full_shape[a]) for a in locals_]
        lane = getattr(lw, "lane", None)  # tensor cores: the warp's 32 lanes are threads too (tc_lower.py)
        tid = functools.reduce(
            lambda x, y: x + y, [lw.loop[a] * int(prod(sizes[i + 1 :])) for i, a in enumerate(locals_)], self._c(0)
        )
        threads = int(prod(sizes))
        if lane is not None and k.axes_of(AxisType.TCK):
            tid, threads = tid * 32 + lane, threads * 32
        st: ShapeTracker = load.src[1].arg
        smem_stride = dict(zip(tile.axes, tile.strides))
        order_sizes = [int(k.full_shape[a]) for a in tile.copy_order]
        stores = []
        for j in range(-(-tile.size // threads)):
            flat = tid + j * threads
            coords = {
                a: (flat // int(prod(order_sizes[i + 1 :]))) % order_sizes[i] for i, a in enumerate(tile.copy_order)
            }
            idxs = [
                coords[a] if a in coords else self._c(0) if t in TILE_AXES else lw.loop[a]
                for a, t in enumerate(k.axis_types)
            ]
            index, valid = st.to_indexed_uops(idxs)
            inside = (flat < tile.size,) if tile.size % threads else ()
            gates = ((valid,) if not (valid.op is Ops.CONST and valid.arg is True) else ()) + inside
            gate = (functools.reduce(lambda x, y: x & y, gates),) if gates else ()
            value = UOp(Ops.LOAD, load.dtype, (UOp(Ops.INDEX, load.src[0].dtype, (load.src[0], index)),) + gate)
            addr = functools.reduce(lambda x, y: x + y, [coords[a] * smem_stride[a] for a in tile.axes], self._c(0))
            # past the tile's end (when threads do not divide it) the store is skipped as well as the load
            stores.append(UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, buf.dtype, (buf, addr, done)), value) + inside))
        return stores


# ---------------------------------------------------------------------------------------------
# the hand-coded choice

# 16x16 threads, each an 8x8 register tile (a 128x128 block of C), K staged 16 at a time: fp32 matmul 4096 on an
# H100 33.3 TFLOPS with 8 at a time, 34.5 with 16, against 27.7 for the register tile without shared memory
# (torch 50.9; bench/bench_tc_opts.py --dtype fp32)
STAGE_MIN_WORKGROUPS = 128  # fewer 128x128 blocks than this leave SMs idle: 128x64 blocks instead
# 128x64 blocks are staged down to this many (fp32 matmul 768 on an H100: 72 blocks, 10.9 TFLOPS against 6.8 for the
# register tile; a GPT-2-small block's c_proj weight gradient likewise, bench_tc_opts.py / bench_gpu.py); below it
# the register tile
STAGE_MIN_NARROW = 64


def matmul_axes(k: Kernel, strides: list[tuple[int | None, ...]]) -> tuple[int, int, list[int]] | None:
    """(M, N, batch axes) of a matmul-like kernel, as full-shape axes, from its loads' strides (one tuple per load;
    None: not affine, moving): its two largest operands that move along the one reduce axis are A and B; M is the
    one output axis along which only A moves, N the one along which only B does, and both move along the batch
    axes (the batch and heads of attention's matmuls). Smaller loads (a bias added to an operand, a scale) do not
    count. None where the kernel is not of that form (a conv: three output axes move only its input)."""
    globals_ = [a for a in k.axes_of(AxisType.GLOBAL) if k.full_shape[a] != 1]
    reduces = k.axes_of(AxisType.REDUCE)
    if len(reduces) != 1 or not all(isinstance(s, int) for s in k.full_shape):  # (a symbolic size: no tile)
        return None
    moving = [st for st in strides if st[reduces[0]] != 0]
    if len(moving) < 2:
        return None

    def footprint(st: tuple[int | None, ...]) -> int:
        return int(prod(int(k.full_shape[a]) for a in range(len(st)) if st[a] != 0))

    a, b = sorted(moving, key=footprint, reverse=True)[:2]
    m = [ax for ax in globals_ if a[ax] != 0 and b[ax] == 0]
    n = [ax for ax in globals_ if b[ax] != 0 and a[ax] == 0]
    if len(m) != 1 or len(n) != 1 or any(a[ax] == 0 and b[ax] == 0 for ax in globals_):
        return None
    return m[0], n[0], [ax for ax in globals_ if ax not in (m[0], n[0])]


def staged_matmul(k: Kernel, strides: list[tuple[int | None, ...]]) -> bool:
    """Apply a shared-memory staged tile to a matmul (`strides`: its loads' strides, see matmul_axes); False, and
    `k` unchanged, where it does not fit. Batch axes stay in the grid. The tile is 128x128 (16x16 threads, 8x8
    each), or 128x64 (8x4 each) where N is a multiple of 64 only (an attention head's width) or 128x128 tiles
    would be too few (STAGE_MIN_WORKGROUPS, STAGE_MIN_NARROW)."""
    if k.applied_opts or not k.opts.has_shared or len(k.reduceops) != 1 or k.reduceops[0].arg[0] is not Ops.ADD:
        return False
    if (found := matmul_axes(k, strides)) is None:
        return False
    axes = k.axes_of(AxisType.GLOBAL)
    # (in axis order, but a 128-multiple first: N may be the 64 wide one)
    pair = sorted((axes.index(found[0]), axes.index(found[1])))
    m, n = sorted(pair, key=lambda g: int(k.full_shape[axes[g]]) % 128 != 0)
    size_m, size_n = int(k.full_shape[axes[m]]), int(k.full_shape[axes[n]])
    batch = prod(int(k.full_shape[a]) for a in found[2])
    # the wide tile where it divides N and leaves enough workgroups, else the narrow one (twice the workgroups: the
    # c_attn weight gradient of GPT-2 small, 2304 x 768, makes 108 wide tiles for an H100's 132 SMs)
    tiles = ((128, STAGE_MIN_WORKGROUPS), (64, STAGE_MIN_NARROW))
    tile_n = next((t for t, least in tiles if size_n % t == 0 and size_m // 128 * (size_n // t) * batch >= least), 0)
    if size_m % 128 or not tile_n:
        return False
    opts = [Opt(OptOps.LOCAL, m, 16), Opt(OptOps.LOCAL, n, 16), Opt(OptOps.UPCAST, m, 8)]
    opts += [Opt(OptOps.UPCAST, n, tile_n // 16), Opt(OptOps.UNROLL, 0, 16), Opt(OptOps.STAGE)]
    trial = k.copy()
    try:
        trial.apply_opts(opts)
    except KernelOptError:
        return False
    k.apply_opts(opts)
    return True
