"""Lowering a kernel with the TC opt (see opts.py): lanes, fragments, WMMA chains, wide fragment loads.

Each operand is lowered once per fragment element with the tile axes set to that element's (row, col) for this
lane; the reduction becomes WMMA(a_frag, b_frag, acc) on a vector accumulator; each output element is a GEP of
the accumulator stored at its own (row, col).

Two layout choices make a lane's loads neighbours, so they merge into 2-, 4- or 8-wide loads (wideload.py):
  - K is permuted inside the tile (the TensorCore tables): a lane's 4 k values are adjacent;
  - N is permuted inside a warp's block of tiles (an UPCAST of the outer N axis by u): tile j's column G is
    stored at G*u + j instead of j*8 + G, so the u tiles of a lane read (and write) adjacent columns.
Both are bijections applied the same way to every load and store, so the result is the same matmul.

>>> from tg_codegen.tc.lower import lower_tc
>>> lower_tc.__name__
'lower_tc'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tg_codegen.axes import AxisType
from tg_codegen.gpudims import special_indexes
from tg_codegen.lowerer import Lowerer, drop_true_gates
from tg_codegen.opt import KernelOptError
from tg_codegen.tc.cores import Layout, native_layout
from tg_codegen.tc.opts import TC_AXIS_TYPES, applied_tensor_core, mma_operands, moving
from tg_codegen.tc.stage import copied_layout
from tg_codegen.wideload import widen_loads
from tg_uop import DType, Ops, UOp, dtypes, graph_rewrite, run_pass
from tg_uop.symbolic import symbolic

if TYPE_CHECKING:
    from tg_codegen.kernel import Kernel


class TCLowerer(Lowerer):
    """The Lowerer for a kernel with tensor cores."""

    def __init__(self, k: Kernel) -> None:
        self.lane = UOp.const(dtypes.int32, 0)
        # pipelined tiles on a renderer with async copies: fragments in the PTX layout, read with ldmatrix (stage.py)
        self.native = copied_layout(k)
        tc = applied_tensor_core(k)
        self.tc = native_layout(tc) if self.native and not tc.wgmma else tc
        super().__init__(k)
        tm, tn, tk = (k.axes_of(t)[0] for t in TC_AXIS_TYPES)
        self.tc_axes = (tm, tn, tk)
        for a in self.tc_axes:
            self.loop[a] = UOp.const(dtypes.int32, 0)
        ops = mma_operands(k.reduceops[0])
        assert ops is not None, "apply_tc checked the kernel's shape"
        self.a, self.b = ops[::-1] if moving(ops[0], self.tc_axes[1]) else ops
        lane = self.lane
        self.terms = {"g": lane // 4, "t": lane % 4, "2t": (lane % 4) * 2, "4t": (lane % 4) * 4}
        self.terms["wg"] = (lane // 32) * 16 + (lane % 32) // 4  # a warpgroup's thread: 16 rows per warp
        n_up = [x for x in k.axes_of(AxisType.UPCAST) if moving(self.b, x) and not moving(self.a, x)]
        self.n_up = n_up[-1] if n_up and not self.native else None
        self.wg_trans = (0, 0)  # a warpgroup MMA's operands stored M-major (A) / N-major (B): the instruction's flags
        if self.tc.wgmma:
            planned = [
                self.stager.plan_wgmma(op, self.tc_axes, axis) if self.stager is not None else None
                for op, axis in ((self.a, tm), (self.b, tn))
            ]
            if planned[0] is None or planned[1] is None:
                raise KernelOptError(
                    f"{self.tc.name} reads its operands from shared memory: it needs both tiles pipelined "
                    "(Opt(OptOps.STAGE, None, 2 or more)) in 16-byte copies, each a canonical wgmma layout"
                )
            self.wg_trans = (int(not planned[0].k_major), int(not planned[1].k_major))
        elif self.stager is not None:
            self.stager.plan_ldmatrix(self.a, "a", self.tc_axes)
            self.stager.plan_ldmatrix(self.b, "b", self.tc_axes)
        self.elem = 0
        self.reduce_memo: dict[tuple[UOp, tuple[tuple[int, int], ...]], UOp] = {}

    def _index_dtype(self) -> DType:
        """Tensor-core kernels keep int32 index maths (their lane and fragment terms are int32)."""
        return dtypes.int32

    def _launch_ids(self) -> None:
        """Output axes are group ids; the lane is threadIdx.x and LOCAL axes (warps) the other local ids."""
        for types, prefix, extra in (((AxisType.GLOBAL,), "gidx", []), ((AxisType.LOCAL,), "lidx", [self.tc.threads])):
            axes = self.k.axes_of(*types)
            # the lane stays threadIdx.x (a warp's 32 threads); the grid packs to fit the device
            grid = self.k.opts.limits.grid if self.k.opts.limits is not None and not extra else None
            ids = special_indexes([int(self.k.full_shape[a]) for a in axes] + extra, prefix, grid)
            for a, idx in zip(axes, ids):
                self.loop[a] = idx
            if extra:
                self.lane = ids[-1]

    def _at(self, layout: Layout, j: int) -> UOp:
        term, off = layout[j]
        return self.terms[term] + off

    def _tc_idxs(self, fixed: dict[int, int], tile: tuple[UOp, UOp, UOp], inside_reduce: bool) -> tuple[UOp, ...]:
        idxs = list(self._idxs(fixed, inside_reduce))
        for a, v in zip(self.tc_axes, tile):
            idxs[a] = v
        if self.n_up is not None:  # column G of tile j lives at G*u + j of the warp's block
            u, tn = int(self.k.full_shape[self.n_up]), self.tc.dims[1]
            col = idxs[self.tc_axes[1]] * u + idxs[self.n_up]
            idxs[self.n_up], idxs[self.tc_axes[1]] = col // tn, col % tn
        return tuple(idxs)

    def lower(self) -> UOp:
        """Lower (a named pass), simplify, drop gates that became true, widen loads."""
        sink = run_pass("lower: tensor cores, indexing, loads and stores", self._lower_tc_stores, self.k.ast)
        sink = graph_rewrite(sink, symbolic, name="simplify lowered kernel")
        return widen_loads(drop_true_gates(sink))

    def _lower_tc_stores(self, ast: UOp) -> UOp:
        zero = UOp.const(dtypes.int32, 0)
        rows, cols = self.tc.c_rows, self.tc.c_cols
        stores = []
        for s in ast.src:
            for c in self._combos((AxisType.UPCAST,)):
                for j in range(len(rows)):
                    self.elem = j
                    idxs = self._tc_idxs(c, (self._at(rows, j), self._at(cols, j), zero), inside_reduce=False)
                    stores.append(self._lower(s, idxs, c))
        return UOp(Ops.SINK, dtypes.void, tuple(stores))

    def _lower_reduce(self, u: UOp, fixed: dict[int, int]) -> UOp:
        key = (u, tuple(sorted(fixed.items())))
        if key not in self.reduce_memo:
            self.reduce_memo[key] = self._mma_reduce(fixed)
        return self.reduce_memo[key].gep(self.elem)

    def _mma_reduce(self, fixed: dict[int, int]) -> UOp:
        """A chain of WMMAs (one per unroll value) reduced over the reduce loops into a vector accumulator."""
        tc, zero = self.tc, UOp.const(dtypes.int32, 0)
        acc_dt = tc.dtype_out.vec(len(tc.c_rows))
        val = UOp.const(acc_dt, 0)
        a_tiles = [(self._at(tc.a_rows, j), zero, self._at(tc.a_cols, j)) for j in range(len(tc.a_rows))]
        b_tiles = [(zero, self._at(tc.b_cols, j), self._at(tc.b_rows, j)) for j in range(len(tc.b_rows))]
        for c in self._combos((AxisType.UNROLL,)):
            f = {**fixed, **c}
            if tc.wgmma and self.stager is not None:  # descriptors of the tiles' corners for this step of K
                corner = self._tc_idxs(f, (zero, zero, zero), inside_reduce=True)
                descs = (self.stager.descriptor(self.a, corner), self.stager.descriptor(self.b, corner))
                val = UOp(Ops.WMMA, acc_dt, (*descs, val), f"{tc.name}<{self.wg_trans[0]},{self.wg_trans[1]}>")
                continue
            frags = (self._fragment(self.a, f, a_tiles), self._fragment(self.b, f, b_tiles))
            val = UOp(Ops.WMMA, acc_dt, (*frags, val), tc.name)
        if tc.wgmma:  # the warpgroup MMAs run asynchronously: wait for them before the accumulator is used
            val = UOp(Ops.CUSTOM, acc_dt, (val,), WGMMA_WAIT)
        rngs = tuple(self.loop[x] for x in self.k.axes_of(AxisType.REDUCE) if self.loop[x].op is Ops.RANGE)
        return UOp(Ops.REDUCE, acc_dt, (val, *rngs), Ops.ADD) if rngs else val

    def _fragment(self, load: UOp, fixed: dict[int, int], tiles: list[tuple[UOp, UOp, UOp]]) -> UOp:
        dtype = load.dtype.vec(len(tiles))
        if self.stager is not None and (lds := self.stager.ldsm.get(load)) is not None:
            at = self._ldmatrix_row(lds.role, lds.trans, 16 // load.dtype.itemsize)
            frag = self.stager.fragment(load, self._tc_idxs(fixed, at, inside_reduce=True), dtype)
            assert frag is not None
            return frag
        elems = tuple(self._lower(load, self._tc_idxs(fixed, t, inside_reduce=True), fixed) for t in tiles)
        return UOp(Ops.VECTORIZE, load.dtype.vec(len(elems)), elems)

    def _ldmatrix_row(self, role: str, trans: bool, per: int) -> tuple[UOp, UOp, UOp]:
        """The (m, n, k) tile position whose address this lane gives ldmatrix: lanes 8i..8i+7 give the 8 rows of
        matrix i (x4 for A: matrices (m, k) = (0, 0), (8, 0), (0, 8), (8, 8); x2 for B: (n, k) = (0, 0), (0, 8)).
        `per` is the elements of a row (8 of 16 bits, 4 of TF32's 32)."""
        lane, zero = self.lane, UOp.const(dtypes.int32, 0)
        if role == "a":
            if trans:  # the tile is contiguous along M: row i of a matrix is its k = i
                return ((lane // 8) % 2) * 8, zero, lane % 8 + (lane // 16) * 8
            return lane % 16, zero, (lane // 16) * per
        if trans:  # contiguous along N: rows are k
            return zero, zero, lane % 16
        return zero, lane % 8, ((lane // 8) % 2) * per


# commits this step's warpgroup MMAs and waits for them (binding the accumulator's registers: nothing reads them
# before the asynchronous MMAs have written them)
WGMMA_WAIT = "__tg_wgmma_wait({0})"


def lower_tc(k: Kernel) -> UOp:
    """The lowered SINK of a kernel with the TC opt applied."""
    return TCLowerer(k).lower()
