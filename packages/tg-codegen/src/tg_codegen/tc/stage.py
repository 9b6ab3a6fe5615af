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
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tg_codegen.axes import AxisType
from tg_codegen.opt import KernelOptError, Opt, OptOps
from tg_codegen.wideload import _aligned, _base_offset
from tg_shape import ShapeTracker
from tg_uop import DType, Ops, UOp, dtypes
from tg_uop.helpers import ContextVar, prod

if TYPE_CHECKING:
    from tg_codegen.kernel import Kernel
    from tg_codegen.lowerer import Lowerer

# also their order in shared memory, outermost first (a tensor core's tile axes innermost, M then N then K)
TILE_AXES = (AxisType.UNROLL, AxisType.LOCAL, AxisType.UPCAST, AxisType.TCM, AxisType.TCN, AxisType.TCK)


@dataclass(frozen=True)
class Tile:
    """Where one staged load's tile lives: its axes in shared-memory order, their strides there, its size (elements
    copied) and span (elements of shared memory it takes: its rows may be padded, see tile_of)."""

    axes: tuple[int, ...]
    strides: tuple[int, ...]
    size: int
    copy_order: tuple[int, ...]  # the axes as the copy walks them, fastest last
    span: int

    def offset(self, idxs: dict[int, UOp] | tuple[UOp, ...], zero: UOp) -> UOp:
        """The element offset in the tile of the position `idxs` (indexed by kernel axis)."""
        return functools.reduce(lambda x, y: x + y, [idxs[a] * s for a, s in zip(self.axes, self.strides)], zero)


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
        # (a warpgroup MMA reads both operands from shared memory, even one each warpgroup reads alone)
        if any(strides[a] != 0 for a in reduces) and (any(strides[a] == 0 for a in locals_) or k.wgmma):
            ret.append(u)
    return ret


def copied_layout(k: Kernel) -> bool:
    """Are `k`'s tiles stored in the order they are copied (the global layout, compacted)? For pipelined tensor-core
    tiles on a renderer with asynchronous copies: 16-byte pieces are then contiguous in global and shared memory
    alike, and 8 neighbouring elements of a fragment's row are contiguous for `ldmatrix`."""
    return k.stage_depth >= 2 and k.opts.has_async_copy and bool(k.axes_of(AxisType.TCK))


def tile_of(k: Kernel, load: UOp) -> Tile:
    """The shared-memory tile of a staged load in kernel `k` (its current axes)."""
    strides = _real_strides(load)
    rank = {t: i for i, t in enumerate(TILE_AXES)}

    def global_stride(a: int) -> int:
        s = strides[a]
        return abs(s) if isinstance(s, int) else 1 << 40

    found = [a for a in k.axes_of(*TILE_AXES) if strides[a] != 0 and k.full_shape[a] != 1]
    copy_order = tuple(sorted(found, key=lambda a: (-global_stride(a), a)))
    axes = copy_order if copied_layout(k) else tuple(sorted(found, key=lambda a: (rank[k.axis_types[a]], a)))
    if not copied_layout(k) and not k.wgmma and not k.axes_of(AxisType.TCK):
        axes = _outer_upcasts_first(k, load, axes, global_stride)
    if k.wgmma and load.dtype.itemsize == 4:  # TF32 warpgroup MMAs read K-major tiles only: K innermost
        axes = tuple(sorted(axes, key=lambda a: k.axis_types[a] in (AxisType.UNROLL, AxisType.TCK)))
    sizes = [int(k.full_shape[a]) for a in axes]
    smem = [int(prod(sizes[i + 1 :])) for i in range(len(sizes))]
    if smem:
        smem[0] += _row_padding(k, load, axes, copy_order, smem[0])
    return Tile(tuple(axes), tuple(smem), int(prod(sizes)), copy_order, smem[0] * sizes[0] if sizes else 1)


def _outer_upcasts_first(
    k: Kernel, load: UOp, axes: tuple[int, ...], global_stride: Callable[[int], int]
) -> tuple[int, ...]:
    """`axes` with the UPCAST axes that a thread's 16-byte reads do not need stored outside the LOCAL ones.

    A thread's register tile along one operand axis of 8 (UPCAST 4, LOCAL 16, UPCAST 2: its elements 4 apart in
    two groups 64 apart) is read as two 16-byte vectors. Stored thread by thread ([LOCAL][8]), the 16 threads of a
    warp that read different vectors hit them 32 bytes apart: 4-way bank conflicts. Stored as [2][LOCAL][4], they
    read 16 neighbouring vectors, and the copy, which walks the operand's contiguous axis, writes neighbouring
    addresses too. The innermost UPCAST axes (least global stride) up to one 16-byte vector stay innermost; with a
    single UPCAST axis nothing moves."""
    upcasts = sorted((a for a in axes if k.axis_types[a] is AxisType.UPCAST), key=global_stride)
    vector, inner = max(1, 16 // load.dtype.itemsize), 0
    while inner < len(upcasts) and prod(int(k.full_shape[a]) for a in upcasts[:inner]) < vector:
        inner += 1
    outer = sorted(upcasts[inner:], key=lambda a: -global_stride(a))
    if not outer:
        return axes
    unroll = [a for a in axes if k.axis_types[a] is AxisType.UNROLL]
    return tuple(unroll + outer + [a for a in axes if a not in unroll and a not in outer])


# Elements of padding after each row of a tile copied element by element along its rows' index (an fp32 matmul's A
# tile: copied along K, where A is contiguous, and stored along M, as the threads read it): unpadded, the 16 rows of
# 128 elements a warp's copy writes fall in one bank (16-way conflicts); padded by 4, in 8 banks (4-way), and every
# row stays 16-byte aligned for the float4 reads. fp32 matmul on an H200: 16384x1536x384 31.1 -> 39.3 TFLOPS,
# 16384x384x1536 33.3 -> 37.6, 4096^3 34.6 -> 38.9 (torch 45-50); the GPT example's BIG fp32 step 48.9 -> 43.6 ms
STAGE_PAD = ContextVar("STAGE_PAD", 4)


def _row_padding(k: Kernel, load: UOp, axes: tuple[int, ...], copy_order: tuple[int, ...], row: int) -> int:
    """STAGE_PAD for a tile copied element by element (no tensor cores) whose copy walks its rows' index fastest
    (neighbouring threads write neighbouring rows), where a row is a multiple of 8 banks long (its rows would start
    in 4 banks at most); else 0."""
    if len(axes) < 2 or copy_order[-1] != axes[0] or copied_layout(k) or k.wgmma or k.axes_of(AxisType.TCK):
        return 0
    return STAGE_PAD.value if math.gcd(row * load.dtype.itemsize // 4, 32) >= 8 else 0


def stage_bytes(k: Kernel) -> int:
    """Shared memory the staged tiles of `k` take (0 when STAGE is not applied)."""
    if not k.staged:
        return 0
    return max(1, k.stage_depth) * sum(tile_of(k, u).span * u.dtype.itemsize for u in staged_loads(k))


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
    if opt.arg > MAX_STAGE_DEPTH:
        raise KernelOptError(f"{opt}: arg {opt.arg} tiles in flight; STAGE keeps at most {MAX_STAGE_DEPTH}")
    if opt.arg >= 2 and len(reduce_loops(k)) != 1:
        raise KernelOptError(f"{opt}: a pipelined STAGE (arg >= 2) needs one reduce loop, got {len(reduce_loops(k))}")
    k.staged, k.stage_depth = True, opt.arg
    if not staged_loads(k):
        raise KernelOptError(f"{opt}: no load of the reduction is shared by the workgroup's threads")


MAX_STAGE_DEPTH = 4  # tiles in flight at most (`Opt(OptOps.STAGE, None, depth)`)


def reduce_loops(k: Kernel) -> list[int]:
    """The reduce axes of `k` that are loops (size > 1)."""
    return [a for a in k.axes_of(AxisType.REDUCE) if k.full_shape[a] != 1]


@dataclass(frozen=True)
class Ldmatrix:
    """How a tensor-core operand's fragment is read from its tile with one `ldmatrix` per lane (see Stager.fragment).

    role: "a" (x4: four 8x8 matrices) or "b" (x2); trans: the tile is contiguous along the fragment's rows (M of A,
    N of B) rather than along K, and `ldmatrix.trans` transposes; row_axis: the axis the 8 row addresses of one
    matrix step along; chunks_per_row: that axis's stride in 16-byte pieces (the XOR swizzle's row length)."""

    role: str
    trans: bool
    row_axis: int
    chunks_per_row: int


@dataclass(frozen=True)
class WgmmaTile:
    """How a warpgroup MMA (wgmma, Hopper) reads an operand's tile from shared memory by descriptor.

    The tile is stored as rows of `row` elements along its contiguous dimension (K: "K-major"; M or N: "MN-major"),
    split into atoms of `atom` elements (128 bytes at most) stored one after another (all rows of atom 0, then of
    atom 1, ...), each 16-byte piece XOR-swizzled by its row within the atom's 8-row group: the canonical layouts of
    the PTX ISA's wgmma section (swizzle mode 128, 64 or 32 bytes = the atom's width). lbo and sbo are the
    descriptor's leading and stride byte offsets: K-major, sbo steps 8 rows (lbo unused); MN-major, lbo steps one
    atom along M or N and sbo 8 rows of K."""

    k_major: bool
    row: int
    atom: int
    rows: int
    lbo: int
    sbo: int
    mode: int  # the descriptor's swizzle mode: 1 = 128-byte, 2 = 64-byte, 3 = 32-byte


class Stager:
    """Builds a kernel's staged tiles while it is lowered: the copies, the barriers and the shared-memory reads.

    With `Opt(OptOps.STAGE, None, depth)`, depth >= 2, the tiles are pipelined: `depth` slots per tile, the copies of
    steps 0..depth-2 before the reduce loop, and in step r the copy of step r+depth-1 goes out before step r's
    tiles are read. Where the renderer has asynchronous copies (CUDA's cp.async), 16-byte pieces are copied without
    passing through registers and step r waits only for its own group of copies; tensor-core fragments are then
    read with `ldmatrix` from tiles whose 16-byte pieces are XOR-swizzled (no bank conflicts)."""

    def __init__(self, lw: Lowerer) -> None:
        self.lw, self.k = lw, lw.k
        self.loads = staged_loads(self.k)
        self.depth = max(1, self.k.stage_depth)
        self.tiles = {u: tile_of(self.k, u) for u in self.loads}
        self.bufs: dict[UOp, UOp] = {}
        self.chunk: dict[UOp, int] = {}  # elements per asynchronous 16-byte copy (0: copied element by element)
        self.ldsm: dict[UOp, Ldmatrix] = {}  # tensor-core operands read with ldmatrix (set by the TC lowerer)
        self.skewed: dict[UOp, int] = {}  # TF32 operands read element by element along K rows: pieces per row
        self.wgmma: dict[UOp, WgmmaTile] = {}  # operands a warpgroup MMA reads by descriptor (plan_wgmma)
        self.ready: UOp | None = None  # the barrier after every tile of this step is copied
        self.rng: UOp | None = None  # the pipelined reduce loop
        self.reads: list[UOp] = []  # every read of a tile (the prefetched copies' stores wait for them, see finish)
        self.prefetched: list[tuple[UOp, UOp, UOp, UOp]] = []  # (load, step, slot, gate) stored at the step's end

    def _c(self, v: int) -> UOp:
        return UOp.const(self.lw.idx_dt, v)

    # ---- reading
    def read(self, load: UOp, idxs: tuple[UOp, ...]) -> UOp | None:
        """`load` at `idxs` read from its staged tile, or None when `load` is not staged."""
        if load not in self.loads:
            return None
        ready = self._ready()
        ret = UOp(
            Ops.LOAD,
            load.dtype,
            (UOp(Ops.INDEX, self.bufs[load].dtype, (self.bufs[load], self._addr(load, idxs), ready)),),
        )
        self.reads.append(ret)
        return ret

    def finish(self) -> tuple[UOp, ...]:
        """What the kernel's SINK must also hold: with prefetched copies, each step's stores of the values loaded at
        its start into the slot of a later step, ordered after every read of this step's tiles, and the barrier
        after them (the one barrier of a step); else nothing."""
        if not self.prefetched:
            return ()
        after = UOp(Ops.NOOP, dtypes.void, tuple(self.reads))  # (an ordering only: renders as nothing)
        stores = [st for load, step, slot, ok in self.prefetched for st in self._copy(load, step, slot, after, ok)]
        return (UOp(Ops.BARRIER, dtypes.void, tuple(stores)),)

    def fragment(self, load: UOp, idxs: tuple[UOp, ...], dtype: DType) -> UOp | None:
        """A tensor-core fragment of `load` read with one ldmatrix: `idxs` is the position whose address this lane
        gives (TCLowerer._ldmatrix_row); None when `load` is not read that way."""
        if (lds := self.ldsm.get(load)) is None:
            return None
        ready = self._ready()
        buf = self.bufs[load]
        name = f"__tg_ldmatrix_{'x4' if lds.role == 'a' else 'x2'}{'_trans' if lds.trans else ''}"
        ptr = UOp(Ops.INDEX, buf.dtype, (buf, self._addr(load, idxs), ready))
        return UOp(Ops.CUSTOM, dtype, (ptr,), f"{name}<{{T}}>({{0}})")

    def plan_ldmatrix(self, load: UOp, role: str, tc_axes: tuple[int, int, int]) -> None:
        """Read `load` (operand `role` of the tensor core) with ldmatrix where its tile allows it."""
        # (copied_layout: pipelined tensor-core tiles on a renderer with asynchronous copies)
        if load not in self.loads or not copied_layout(self.k) or load.dtype.itemsize not in (2, 4):
            return
        tile, size = self.tiles[load], load.dtype.itemsize
        per = 16 // size
        m_or_n = tc_axes[0] if role == "a" else tc_axes[1]
        inner = tile.axes[-1]
        if inner == tc_axes[2]:
            trans, row_axis = False, m_or_n
        elif inner == m_or_n and size == 2:
            trans, row_axis = True, tc_axes[2]
        elif inner == m_or_n and tc_axes[2] in tile.axes:
            # TF32 contiguous along M (N): no transposing ldmatrix for 32-bit elements; a lane reads (row k = t,
            # column g) one element at a time, and rows t = 0..3 would fall in the same banks: skewed instead
            k_stride = tile.strides[tile.axes.index(tc_axes[2])]
            if k_stride % per == 0 and (k_stride // per) % 8 == 0:
                self.skewed[load] = k_stride // per
            return
        else:
            return
        if int(self.k.full_shape[inner]) % per or row_axis not in tile.axes:
            return
        stride = tile.strides[tile.axes.index(row_axis)]
        if stride % per:
            return
        self.ldsm[load] = Ldmatrix(role, trans, row_axis, stride // per)

    def plan_wgmma(self, load: UOp, tc_axes: tuple[int, int, int], tc_axis: int) -> WgmmaTile | None:
        """Lay out `load`'s tile for a warpgroup MMA (`tc_axis`: its TCM or TCN axis); None where the tile cannot
        take a canonical layout: 16-bit tiles must be copied in 16-byte pieces (TF32 ones, always K-major, may be
        copied element by element: a transposing copy), its contiguous dimension's axes last (the tensor core's
        axis innermost among them) and the other dimension's likewise, a row at most 128 bytes when K is
        contiguous (a multiple of 128 when M or N is), and rows in groups of 8."""
        if load not in self.loads or not copied_layout(self.k) or load.dtype.itemsize not in (2, 4):
            return None
        k, tile, size = self.k, self.tiles[load], load.dtype.itemsize
        if size == 2 and not self._chunk(load):
            return None
        is_k = [k.axis_types[a] in (AxisType.UNROLL, AxisType.TCK) for a in tile.axes]
        n_inner = next((i for i in range(len(is_k)) if all(x == is_k[-1] for x in is_k[i:])), 0)
        inner, outer = tile.axes[n_inner:], tile.axes[:n_inner]
        k_major = is_k[-1]
        if size == 4 and not k_major:
            return None  # (tile_of stores TF32 wgmma tiles K-major)
        if not outer or any(is_k[i] == k_major for i in range(n_inner)):
            return None  # the other dimension's axes are not all outside the contiguous one's
        if inner[-1] != (tc_axes[2] if k_major else tc_axis) or outer[-1] != (tc_axis if k_major else tc_axes[2]):
            return None
        row = int(prod(int(k.full_shape[a]) for a in inner))
        atom = min(row, 128 // size)
        rows = tile.size // row
        if atom * size not in (32, 64, 128) or row % atom or rows % 8 or (k_major and row != atom):
            return None
        mode = {128: 1, 64: 2, 32: 3}[atom * size]
        if k_major:
            lbo, sbo = 16, 8 * row * size
        else:
            lbo, sbo = rows * atom * size, 8 * atom * size
        self.wgmma[load] = WgmmaTile(k_major, row, atom, rows, lbo, sbo, mode)
        return self.wgmma[load]

    def descriptor(self, load: UOp, idxs: tuple[UOp, ...]) -> UOp:
        """The 64-bit shared-memory descriptor of `load`'s tile with its corner at `idxs` (the tensor core's axes
        at 0) for a warpgroup MMA: the corner's unswizzled address, the tile's byte offsets and swizzle mode."""
        wg = self.wgmma[load]
        ready = self._ready()
        buf = self.bufs[load]
        ptr = UOp(Ops.INDEX, buf.dtype, (buf, self._addr(load, idxs, swizzled=False), ready))
        return UOp(Ops.CUSTOM, dtypes.uint64, (ptr,), f"__tg_wgmma_desc({{0}}, {wg.lbo}, {wg.sbo}, {wg.mode})")

    def _split(self, load: UOp, off: UOp) -> UOp:
        """A wgmma tile's element offset `off` (row-major rows of `row`) in its layout of atoms (see WgmmaTile)."""
        if (wg := self.wgmma.get(load)) is None or wg.row == wg.atom:
            return off
        r, i = off // wg.row, off % wg.row
        return (i // wg.atom) * (wg.rows * wg.atom) + r * wg.atom + i % wg.atom

    def _addr(self, load: UOp, idxs: tuple[UOp, ...] | dict[int, UOp], swizzled: bool = True) -> UOp:
        """The element offset of `idxs` in `load`'s tile and this step's slot (unswizzled: a descriptor's corner)."""
        tile = self.tiles[load]
        addr = self._split(load, tile.offset(idxs, self._c(0)))
        addr = self._swizzle(load, addr) if swizzled else addr
        if self.depth == 1:
            return addr
        assert self.rng is not None
        return addr + (self.rng % self.depth) * tile.span

    def _swizzle(self, load: UOp, addr: UOp) -> UOp:
        """The XOR swizzle of a tile copied in 16-byte pieces and read by ldmatrix: piece q of a row of R pieces is
        stored at q ^ ((q // max(R, 8)) % min(R, 8)), so the 8 rows one ldmatrix matrix reads (and the pieces a warp
        copies) fall in distinct banks; TF32 tiles read element by element along K rows are skewed (see
        plan_ldmatrix); a warpgroup MMA's tiles take the canonical swizzle however they are copied. Other tiles are
        stored as they are."""
        if not (per := self.chunk.get(load, 0) or (16 // load.dtype.itemsize if load in self.wgmma else 0)):
            return addr
        q = addr // per
        if load in self.skewed:  # piece q of row r at q ^ 2*(r % 4): a warp's 4 rows x 2 pieces, 32 banks
            skew = ((q // self.skewed[load]) % 4) * 2
        elif load in self.ldsm and min(rows := self.ldsm[load].chunks_per_row, 8) > 1:
            skew = (q // max(rows, 8)) % min(rows, 8)
        elif load in self.wgmma:  # the canonical swizzle: piece q of an atom's row r (8-row groups) at q ^ (r % 8)
            skew = (q // 8) % (self.wgmma[load].atom * load.dtype.itemsize // 16)
        else:
            return addr
        return (q ^ skew) * per + addr % per

    # ---- copying
    def _ready(self) -> UOp:
        if self.ready is None:
            self.ready = self._copy_all()
        return self.ready

    def _copy_all(self) -> UOp:
        lw, k = self.lw, self.k
        loops = tuple(lw.loop[a] for a in k.axes_of(AxisType.REDUCE) if lw.loop[a].op is Ops.RANGE)
        for load in self.loads:
            tile = self.tiles[load]
            self.bufs[load] = UOp(
                Ops.DEFINE_LOCAL, load.dtype.ptr(tile.span * self.depth, local=True), (), f"stage{lw.n_locals}"
            )
            lw.n_locals += 1
            self.chunk[load] = self._chunk(load)
        if self.depth == 1:
            # every thread has read the previous step's tiles before any thread overwrites them
            done = UOp(Ops.BARRIER, dtypes.void, loops)
            copies = [st for load in self.loads for st in self._copy(load, None, self._c(0), done, None)]
            return UOp(Ops.BARRIER, dtypes.void, tuple(copies))
        (axis,) = reduce_loops(k)
        self.rng, n = lw.loop[axis], int(k.full_shape[axis])
        asynchronous = any(self.chunk.values())
        before: tuple[UOp, ...] = ()
        for j in range(self.depth - 1):  # the prologue: steps 0..depth-2, before the loop
            first = tuple(
                st
                for load in self.loads
                if j < n
                for st in self._copy(load, self._c(j), self._c(j * self.tiles[load].span), None, None)
            )
            before = (UOp(Ops.CUSTOM, dtypes.void, before + first, COMMIT),) if asynchronous else before + first
        step = self.rng + (self.depth - 1)
        slot = step % self.depth
        if not asynchronous and not k.wgmma and not k.axes_of(AxisType.TCK):
            # prefetched through registers: a step loads a later step's elements first, reads its own tiles (the
            # loads' latency hidden behind its arithmetic), then stores them (finish) and waits at one barrier. The
            # slot it stores into was last read a step before, behind that step's barrier
            self.prefetched = [(u, step, slot * self.tiles[u].span, step < n) for u in self.loads]
            values = tuple(st.src[1] for u, at, off, ok in self.prefetched for st in self._copy(u, at, off, None, ok))
            return UOp(Ops.NOOP, dtypes.void, (UOp(Ops.BARRIER, dtypes.void, before), *values))
        done = UOp(Ops.BARRIER, dtypes.void, (self.rng, *before))
        nxt = tuple(
            st for load in self.loads for st in self._copy(load, step, slot * self.tiles[load].span, done, step < n)
        )
        if asynchronous:  # this step's pieces (committed depth - 1 groups ago) have landed
            # (a warpgroup MMA reads shared memory through the async proxy: the copies are fenced for it)
            fence = f"; {PROXY_FENCE}" if self.k.wgmma else ""
            nxt = (UOp(Ops.CUSTOM, dtypes.void, nxt, f"{COMMIT}; {WAIT.format(self.depth - 1)}{fence}"),)
        elif self.k.wgmma:  # (TF32 tiles all copied through registers)
            nxt = (UOp(Ops.CUSTOM, dtypes.void, nxt, PROXY_FENCE),)
        return UOp(Ops.BARRIER, dtypes.void, nxt)

    def _chunk(self, load: UOp) -> int:
        """Elements per 16-byte asynchronous copy of `load`'s tile, or 0 where it is copied element by element: the
        renderer copies asynchronously, the tile is pipelined, its innermost axis is contiguous in global memory,
        a multiple of a piece and not masked, and every piece starts 16-byte aligned (proved on the index)."""
        k, tile = self.k, self.tiles[load]
        per = 16 // load.dtype.itemsize if load.dtype.itemsize in (1, 2, 4, 8) else 0
        if not per or self.depth < 2 or not k.opts.has_async_copy or load.dtype.count != 1:
            return 0
        st: ShapeTracker = load.src[1].arg
        inner = tile.axes[-1]
        if len(st.views) != 1 or inner != tile.copy_order[-1] or _real_strides(load)[inner] != 1:
            return 0
        view = st.views[0]
        if int(k.full_shape[inner]) % per or (view.mask is not None and view.mask[inner] != (0, view.shape[inner])):
            return 0
        idxs = [self._c(0) if a in tile.axes else self.lw.loop[a] for a in range(len(k.full_shape))]
        for a in tile.axes:  # every piece's first element: multiples of `per` along the innermost axis
            idxs[a] = UOp.variable(f"t{a}", 0, int(k.full_shape[a]) - 1, self.lw.idx_dt)
        idxs[inner] = idxs[inner] * per
        index, _ = st.to_indexed_uops(idxs)
        base, off = _base_offset(index)
        return per if off % per == 0 and _aligned(base, per) else 0

    def _copy(self, load: UOp, step: UOp | None, slot: UOp, done: UOp | None, ok: UOp | None) -> list[UOp]:
        """This thread's share of one step's copy of `load`'s tile into the tile's `slot` (an element offset): pieces
        (or elements) tid, tid + threads, ... in copy order. `step` replaces the reduce loop's index (None: the loop
        itself), `done` orders the copy after the barrier that frees the slot, `ok` gates it (a step past the end)."""
        lw, k = self.lw, self.k
        buf, tile = self.bufs[load], self.tiles[load]
        per = max(1, self.chunk[load])
        locals_ = [a for a in k.axes_of(AxisType.LOCAL) if k.full_shape[a] != 1]
        sizes = [int(k.full_shape[a]) for a in locals_]
        lane = getattr(lw, "lane", None)  # tensor cores: the warp's 32 lanes are threads too (lower.py)
        tid = functools.reduce(
            lambda x, y: x + y, [lw.loop[a] * int(prod(sizes[i + 1 :])) for i, a in enumerate(locals_)], self._c(0)
        )
        threads = int(prod(sizes))
        if lane is not None and k.axes_of(AxisType.TCK):  # (32 lanes of a warp, 128 of a warpgroup)
            lanes = int(getattr(getattr(lw, "tc", None), "threads", 32))
            tid, threads = tid * lanes + lane, threads * lanes
        st: ShapeTracker = load.src[1].arg
        order_sizes = [int(k.full_shape[a]) // (per if a == tile.axes[-1] else 1) for a in tile.copy_order]
        pieces = tile.size // per
        reduce_axis = reduce_loops(k)[0] if step is not None else None  # (None: the loop's own index)
        stores = []
        for j in range(-(-pieces // threads)):
            flat = tid + j * threads
            coords = {
                a: (flat // int(prod(order_sizes[i + 1 :]))) % order_sizes[i] for i, a in enumerate(tile.copy_order)
            }
            if per > 1:
                coords[tile.axes[-1]] = coords[tile.axes[-1]] * per
            idxs = [
                coords[a]
                if a in coords
                else self._c(0)
                if t in TILE_AXES
                else step
                if a == reduce_axis and step is not None  # (both or neither: step narrowed for the type checker)
                else lw.loop[a]
                for a, t in enumerate(k.axis_types)
            ]
            index, valid = st.to_indexed_uops(idxs)
            inside = (flat < pieces,) if pieces % threads else ()
            gates = (
                ((valid,) if not (valid.op is Ops.CONST and valid.arg is True) else ())
                + inside
                + ((ok,) if ok is not None else ())
            )
            gate = functools.reduce(lambda x, y: x & y, gates) if gates else None
            dst = UOp(
                Ops.INDEX,
                buf.dtype,
                (buf, slot + self._swizzle(load, self._split(load, tile.offset(coords, self._c(0)))))
                + ((done,) if done is not None else ()),
            )
            if per > 1:  # 16 bytes without registers; a gated-off piece is zero-filled (nothing read)
                src = UOp(
                    Ops.INDEX,
                    load.src[0].dtype,
                    (load.src[0], index if gate is None else gate.where(index, index.const_like(0))),
                )
                on = gate if gate is not None else UOp.const(dtypes.bool, True)
                # past the tile's end (threads do not divide its pieces) nothing is written, not even zeros
                text = "__tg_cp_async16({0}, {1}, {2})" if not inside else "if ({3}) __tg_cp_async16({0}, {1}, {2})"
                stores.append(UOp(Ops.CUSTOM, dtypes.void, (dst, src, on) + inside, text))
                continue
            value = UOp(
                Ops.LOAD,
                load.dtype,
                (UOp(Ops.INDEX, load.src[0].dtype, (load.src[0], index)),) + ((gate,) if gate is not None else ()),
            )
            # past the tile's end (when threads do not divide it) the store is skipped as well as the load
            stores.append(UOp(Ops.STORE, dtypes.void, (dst, value) + inside))
        return stores


COMMIT = "__tg_cp_async_commit()"
WAIT = "__tg_cp_async_wait<{}>()"
PROXY_FENCE = "__tg_fence_proxy_async()"


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
# and on a renderer that knows its compute units, 128x128 blocks need this many per unit. With a thread's rows and
# columns read as 16-byte vectors of neighbouring threads (STAGE_SPLIT), the GPT step's products into 16384x384
# make 384 wide blocks (2.9 per SM of an H200) at 42-45 TFLOPS against 38-40 for 768 narrow ones (torch 38-47;
# K = 384 and 1536, x @ W.T and g @ W), and 2048^3 256 (1.9 per SM) at 46.7 against 39.4 (torch 49.7). Before,
# the narrow blocks had won at 2.9 per SM (31.2 against 25.8 TFLOPS).
STAGE_MIN_WAVES = 1.5


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
    would be too few (STAGE_MIN_WORKGROUPS or STAGE_MIN_WAVES per compute unit, STAGE_MIN_NARROW)."""
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
    tiles = ((128, max(STAGE_MIN_WORKGROUPS, int(STAGE_MIN_WAVES * k.opts.compute_units))), (64, STAGE_MIN_NARROW))
    tile_n = next((t for t, least in tiles if size_n % t == 0 and size_m // 128 * (size_n // t) * batch >= least), 0)
    if size_m % 128 or not tile_n:
        return False
    opts = [Opt(OptOps.LOCAL, m, 16), Opt(OptOps.LOCAL, n, 16)]
    if STAGE_SPLIT.value:  # a thread's 8 rows (and columns) as two groups of 4 (_outer_upcasts_first)
        opts += [Opt(OptOps.UPCAST, m, 4), Opt(OptOps.UPCAST, n, 4), Opt(OptOps.UPCAST, m, 2)]
        opts += [Opt(OptOps.UPCAST, n, 2)] if tile_n == 128 else []
    else:
        opts += [Opt(OptOps.UPCAST, m, 8), Opt(OptOps.UPCAST, n, tile_n // 16)]
    opts += [Opt(OptOps.UNROLL, 0, 16)]
    # pipelined where the shared memory takes the slots (Stager.finish: loads ahead, stores after the reads)
    if STAGE_DEPTH.value > 1 and k.apply_all(opts + [Opt(OptOps.STAGE, None, STAGE_DEPTH.value)]):
        return True
    return k.apply_all(opts + [Opt(OptOps.STAGE)])


STAGE_DEPTH = ContextVar("STAGE_DEPTH", 3)  # slots of the hand-coded fp32 tiles (1: copied at each step)
# 0: a thread's 8 rows (and columns) stored together, as before _outer_upcasts_first (A/B runs)
STAGE_SPLIT = ContextVar("STAGE_SPLIT", 1)
