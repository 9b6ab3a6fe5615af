"""Tensor cores: the TC OptOp, which runs the multiply-accumulate of a matmul-like kernel as warp-wide MMA ops.

A tensor core multiplies an (M x K) tile of A by a (K x N) tile of B into an (M x N) tile of C, all threads of a
warp together: each thread holds a few elements of each tile (its "fragment") in registers, and where each of
its elements lies in the tile is a function of its lane (its thread number in the warp) given by the hardware.

How `Opt(OptOps.TC, axis, arg)` is applied (`apply_tc`):
  - the kernel must be `REDUCE_AXIS(ADD, MUL(a, b))` (a CAST to the accumulation dtype around the MUL or around
    each operand is allowed) where a and b are LOADs of the tensor core's input dtype and the reduce is in its
    accumulation dtype; `axis` is the n-th reduce axis (K), `arg` the n-th of the renderer's tensor cores for
    that dtype. The output axis M is one along which a moves and b does not, N the other way round.
  - M, N and K are split by the tile sizes; the tile parts become the axis types "tcm", "tcn", "tck" (kept
    last, in that order). The rest of the kernel (global ids, LOCAL warps, UPCAST register tiles, UNROLL)
    works on the outer parts as usual.

How it is lowered (`TCLowerer`): one more launch id, the lane (threadIdx.x, 32 lanes); each operand is lowered
once per fragment element with the tile axes set to the element's (row, col) for this lane, and packed into a
vector; the reduction becomes a chain of WMMA(a_frag, b_frag, acc) UOps on a vector accumulator; each output
element is a GEP of the accumulator stored at its own (row, col).

>>> from tg_codegen.tensorcore import TENSOR_CORES_SM80
>>> [tc.name for tc in TENSOR_CORES_SM80]
['m16n8k16_half_float', 'm16n8k16_bfloat16_float']
"""

from __future__ import annotations

from dataclasses import dataclass

from tg_codegen.gpudims import special_indexes
from tg_codegen.kernel import Kernel
from tg_codegen.lowerer import Lowerer, drop_true_gates
from tg_codegen.opt import KernelOptError, Opt, OptOps
from tg_shape import ShapeTracker
from tg_uop import DType, Ops, UOp, dtypes, graph_rewrite
from tg_uop.helpers import getenv
from tg_uop.symbolic import symbolic

# (lane term, offset) pairs for each fragment element: the element's row (or col) is lane_term(lane) + offset
Layout = tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class TensorCore:
    """One tensor-core instruction: tile sizes, dtypes and where each lane's fragment elements lie.

    Lane terms: "g" is lane // 4 (the lane's group), "2t" is 2 * (lane % 4) (twice its place in the group).
    a_rows/a_cols give the (m, k) of each A element, b_rows/b_cols the (k, n) of each B element and
    c_rows/c_cols the (m, n) of each accumulator element, in the order the instruction takes them.
    """

    dims: tuple[int, int, int]  # M, N, K
    dtype_in: DType
    dtype_out: DType
    a_rows: Layout
    a_cols: Layout
    b_rows: Layout
    b_cols: Layout
    c_rows: Layout
    c_cols: Layout
    threads: int = 32

    @property
    def name(self) -> str:
        m, n, k = self.dims
        return f"m{m}n{n}k{k}_{self.dtype_in.name}_{self.dtype_out.name}"


def _terms(term: str, offsets: tuple[int, ...]) -> Layout:
    return tuple((term, o) for o in offsets)


def _m16n8k16(dtype_in: DType) -> TensorCore:
    """PTX mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: fragments as in the PTX ISA's figures."""
    return TensorCore(
        dims=(16, 8, 16),
        dtype_in=dtype_in,
        dtype_out=dtypes.float32,
        a_rows=_terms("g", (0, 0, 8, 8, 0, 0, 8, 8)),
        a_cols=_terms("2t", (0, 1, 0, 1, 8, 9, 8, 9)),
        b_rows=_terms("2t", (0, 1, 8, 9)),
        b_cols=_terms("g", (0, 0, 0, 0)),
        c_rows=_terms("g", (0, 0, 8, 8)),
        c_cols=_terms("2t", (0, 1, 0, 1)),
    )


TENSOR_CORES_SM80 = (_m16n8k16(dtypes.float16), _m16n8k16(dtypes.bfloat16))
TC_AXIS_TYPES = ("tcm", "tcn", "tck")


# ---------------------------------------------------------------------------------------------
# matching and applying the opt


@dataclass(frozen=True)
class _Match:
    tc: TensorCore
    k_axis: int
    m_axis: int
    n_axis: int


def _strip_cast(u: UOp) -> UOp:
    return u.src[0] if u.op is Ops.CAST else u


def mma_operands(reduce: UOp) -> tuple[UOp, UOp] | None:
    """The two LOADs multiplied under `reduce` (REDUCE_AXIS(ADD, [CAST](MUL([CAST]a, [CAST]b)))), else None."""
    if reduce.arg[0] is not Ops.ADD:
        return None
    mul = _strip_cast(reduce.src[0])
    if mul.op is not Ops.MUL:
        return None
    a, b = (_strip_cast(s) for s in mul.src)
    if a.op is not Ops.LOAD or b.op is not Ops.LOAD or a.dtype != b.dtype:
        return None
    return a, b


def _moving(load: UOp, axis: int) -> bool:
    """Does this load's address move along `axis` (None strides, as under a mask, count as moving)?"""
    st: ShapeTracker = load.src[1].arg
    return st.real_strides()[axis] != 0


def _match(k: Kernel, opt: Opt) -> _Match:
    if k.applied_opts:
        raise KernelOptError(f"{opt}: TC must be the first opt, got {k.applied_opts} before it")
    reduces = k.reduceops
    if len(reduces) != 1 or (ops := mma_operands(reduces[0])) is None:
        raise KernelOptError(f"{opt}: TC needs one ADD reduction of a product of two loads (a matmul)")
    a, b = ops
    cands = [tc for tc in k.opts.tensor_cores if isinstance(tc, TensorCore) and tc.dtype_in == a.dtype]
    if not cands:
        have = sorted({tc.dtype_in.name for tc in k.opts.tensor_cores if isinstance(tc, TensorCore)})
        raise KernelOptError(f"{opt}: no tensor core takes {a.dtype.name} inputs here (inputs: {have})")
    if opt.arg >= len(cands):
        raise KernelOptError(f"{opt}: arg {opt.arg} picks a tensor core, but only {len(cands)} take {a.dtype.name}")
    tc = cands[opt.arg]
    if reduces[0].dtype != tc.dtype_out:
        raise KernelOptError(f"{opt}: the reduction accumulates in {reduces[0].dtype.name}, TC in {tc.dtype_out.name}")
    k_axis = k._pick(opt, "reduce")
    globals_ = k.axes_of("global")
    m_axes = [x for x in globals_ if _moving(a, x) and not _moving(b, x)]
    n_axes = [x for x in globals_ if _moving(b, x) and not _moving(a, x)]
    if not m_axes or not n_axes or not (_moving(a, k_axis) and _moving(b, k_axis)):
        raise KernelOptError(f"{opt}: the loads do not form a matmul (no M, N axes or K not shared)")
    return _Match(tc, k_axis, m_axes[-1], n_axes[-1])


def apply_tc(k: Kernel, opt: Opt) -> None:
    """Split M, N and K by the tensor core's tile; raises KernelOptError where TC does not apply."""
    if not k.opts.tensor_cores:
        raise KernelOptError(f"{opt}: the {k.opts.device or 'generic'} renderer has no tensor cores")
    if not k.opts.has_local:
        raise KernelOptError(f"{opt}: tensor cores need a renderer with local (warp) ids")
    m = _match(k, opt)
    tm, tn, tk = m.tc.dims
    for axis, size, name in ((m.m_axis, tm, "M"), (m.n_axis, tn, "N"), (m.k_axis, tk, "K")):
        full = k.full_shape[axis]
        if not isinstance(full, int) or full % size != 0:
            raise KernelOptError(f"{opt}: {name} axis of size {full} is not a multiple of the tensor core's {size}")
    # each split moves its tile part to the end, so the other axes keep their numbers
    for axis, size, kind in zip((m.m_axis, m.n_axis, m.k_axis), m.tc.dims, TC_AXIS_TYPES):
        k._split(axis, size, kind, inner=True)


def applied_tensor_core(k: Kernel) -> TensorCore:
    """The tensor core a kernel's TC opt picked (the kernel must have one applied)."""
    opt = next(o for o in k.applied_opts if o.op.name == "TC")
    reduce = k.reduceops[0]
    ops = mma_operands(reduce)
    if ops is None:
        raise KernelOptError(f"{opt}: the kernel no longer matches a matmul")
    cands = [tc for tc in k.opts.tensor_cores if isinstance(tc, TensorCore) and tc.dtype_in == ops[0].dtype]
    return cands[opt.arg]


# ---------------------------------------------------------------------------------------------
# lowering


class TCLowerer(Lowerer):
    """The Lowerer for a kernel with tensor cores: lanes, fragments, WMMA accumulation."""

    def __init__(self, k: Kernel) -> None:
        self.lane = UOp.const(dtypes.int32, 0)
        super().__init__(k)
        self.tc = applied_tensor_core(k)
        self.tc_axes = tuple(k.axes_of(t)[0] for t in TC_AXIS_TYPES)
        for a in self.tc_axes:
            self.loop[a] = UOp.const(dtypes.int32, 0)
        lane = self.lane
        self.terms = {"g": lane // 4, "2t": (lane % 4) * 2}
        self.elem = 0
        self.reduce_memo: dict[tuple[UOp, tuple[tuple[int, int], ...]], UOp] = {}

    def _launch_ids(self) -> None:
        """Output axes are group ids; the lane is threadIdx.x and LOCAL axes (warps) the other local ids."""
        for types, prefix, extra in ((("global",), "gidx", []), (("local",), "lidx", [32])):
            axes = self.k.axes_of(*types)
            ids = special_indexes([int(self.k.full_shape[a]) for a in axes] + extra, prefix)
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
        return tuple(idxs)

    def lower(self) -> UOp:
        zero = UOp.const(dtypes.int32, 0)
        rows, cols = self.tc.c_rows, self.tc.c_cols
        stores = []
        for s in self.k.ast.src:
            for c in self._combos(("upcast",)):
                for j in range(len(rows)):
                    self.elem = j
                    idxs = self._tc_idxs(c, (self._at(rows, j), self._at(cols, j), zero), inside_reduce=False)
                    stores.append(self._lower(s, idxs, c))
        return drop_true_gates(graph_rewrite(UOp(Ops.SINK, dtypes.void, tuple(stores)), symbolic))

    def _lower_reduce(self, u: UOp, fixed: dict[int, int]) -> UOp:
        key = (u, tuple(sorted(fixed.items())))
        if key not in self.reduce_memo:
            self.reduce_memo[key] = self._mma_reduce(u, fixed)
        return self.reduce_memo[key].gep(self.elem)

    def _mma_reduce(self, u: UOp, fixed: dict[int, int]) -> UOp:
        """A chain of WMMAs (one per unroll value) reduced over the reduce loops into a vector accumulator."""
        ops = mma_operands(u)
        assert ops is not None, "apply_tc checked the kernel's shape"
        a, b = ops
        if _moving(a, self.tc_axes[1]):  # the first operand moves along N: it is B
            a, b = b, a
        tc, zero = self.tc, UOp.const(dtypes.int32, 0)
        acc_dt = tc.dtype_out.vec(len(tc.c_rows))
        val = UOp.const(acc_dt, 0)
        for c in self._combos(("unroll",)):
            f = {**fixed, **c}
            a_tiles = [(self._at(tc.a_rows, j), zero, self._at(tc.a_cols, j)) for j in range(len(tc.a_rows))]
            b_tiles = [(zero, self._at(tc.b_cols, j), self._at(tc.b_rows, j)) for j in range(len(tc.b_rows))]
            frag_a = self._fragment(a, f, a_tiles)
            frag_b = self._fragment(b, f, b_tiles)
            val = UOp(Ops.WMMA, acc_dt, (frag_a, frag_b, val), tc.name)
        rngs = tuple(self.loop[x] for x in self.k.axes_of("reduce") if self.loop[x].op is Ops.RANGE)
        return UOp(Ops.REDUCE, acc_dt, (val, *rngs), Ops.ADD) if rngs else val

    def _fragment(self, load: UOp, fixed: dict[int, int], tiles: list[tuple[UOp, UOp, UOp]]) -> UOp:
        elems = [self._lower(load, self._tc_idxs(fixed, t, inside_reduce=True), fixed) for t in tiles]
        paired: list[UOp] = []
        for x, y in zip(elems[::2], elems[1::2]):
            wide = _pair_load(x, y)
            paired += [wide.gep(0), wide.gep(1)] if wide is not None else [x, y]
        return UOp(Ops.VECTORIZE, load.dtype.vec(len(paired)), tuple(paired))


def _simplified(x: UOp) -> UOp:
    return graph_rewrite(x, symbolic)


def _pair_load(x: UOp, y: UOp) -> UOp | None:
    """One 2-wide LOAD for two loads of neighbouring elements (same buffer and gate, the first at an even index)."""
    if x.op is not Ops.LOAD or y.op is not Ops.LOAD or x.src[1:] != y.src[1:]:
        return None
    (bx, ix), (by, iy) = x.src[0].src[:2], y.src[0].src[:2]
    if bx is not by:
        return None
    step, parity = _simplified(iy - ix), _simplified(ix % 2)
    if not (step.op is Ops.CONST and step.arg == 1 and parity.op is Ops.CONST and parity.arg == 0):
        return None
    return UOp(Ops.LOAD, x.dtype.vec(2), x.src)


def lower_tc(k: Kernel) -> UOp:
    """The lowered SINK of a kernel with the TC opt applied."""
    return TCLowerer(k).lower()


# ---------------------------------------------------------------------------------------------
# the hand-coded choice


def _first(k: Kernel, choices: list[Opt]) -> bool:
    for opt in choices:
        try:
            k.apply_opt(opt)
            return True
        except KernelOptError:
            continue
    return False


def tc_optimizations(k: Kernel) -> bool:
    """Apply TC and a warp/register tiling around it to `k` if it is a matmul tensor cores take (env TC=0: never).

    Workgroups of 2x2 warps (LOCAL on the outer M and N axes), each warp a block of up to 4x8 tiles (UPCAST), the
    K loop unrolled by 2 (the sweep in bench/bench_tc_opts.py found this fastest at 4096 on an H100: 110 TFLOPS
    against 94 without the unroll and 61-97 for other tilings). Returns whether TC was applied.
    """
    if not getenv("TC", 1) or not k.opts.tensor_cores or k.applied_opts:
        return False
    for axis in range(len(k.axes_of("reduce"))):
        opt = Opt(OptOps.TC, axis, 0)
        try:
            match = _match(k, opt)
            k.apply_opt(opt)
        except KernelOptError:
            continue
        globals_ = k.axes_of("global")
        m_tile, n_tile = globals_.index(match.m_axis), globals_.index(match.n_axis)
        for tile in (m_tile, n_tile):
            _first(k, [Opt(OptOps.LOCAL, tile, 2)])
        for tile, amts in ((m_tile, (4, 2)), (n_tile, (8, 4, 2))):
            _first(k, [Opt(OptOps.UPCAST, tile, amt) for amt in amts])
        _first(k, [Opt(OptOps.UNROLL, 0, 2)])
        return True
    return False
