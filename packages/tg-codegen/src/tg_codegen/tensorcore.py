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

How it is lowered (`tc_lower.TCLowerer`): one more launch id, the lane (threadIdx.x, 32 lanes); each operand is lowered
once per fragment element with the tile axes set to the element's (row, col) for this lane, and packed into a
vector; the reduction becomes a chain of WMMA(a_frag, b_frag, acc) UOps on a vector accumulator; each output
element is a GEP of the accumulator stored at its own (row, col).

>>> from tg_codegen.tensorcore import TENSOR_CORES_SM80
>>> [tc.name for tc in TENSOR_CORES_SM80]
['m16n8k16_half_float', 'm16n8k16___bf16_float', 'm16n8k8_float_float']

On Hopper (sm_90) the warpgroup MMA (wgmma) joins them: 128 threads, operands read from pipelined shared-memory
tiles by descriptor (stage.py); it needs `Opt(OptOps.STAGE, None, depth >= 2)` with asynchronous copies.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from tg_codegen.axes import AxisType
from tg_codegen.kernel import Kernel
from tg_codegen.opt import KernelOptError, Opt, OptOps
from tg_shape import ShapeTracker
from tg_uop import DType, Ops, UOp, dtypes
from tg_uop.helpers import ContextVar, getenv

# (lane term, offset) pairs for each fragment element: the element's row (or col) is lane_term(lane) + offset
Layout = tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class TensorCore:
    """One tensor-core instruction: tile sizes, dtypes and where each lane's fragment elements lie.

    Lane terms: "g" is lane // 4 (the lane's group), "2t" is 2 * (lane % 4) (twice its place in the group), "4t"
    four times it. a_rows/a_cols give the (m, k) of each A element, b_rows/b_cols the (k, n) of each B element and
    c_rows/c_cols the (m, n) of each accumulator element, in the order the instruction takes them.

    K is a summed index, so it may be permuted inside the tile as long as A and B agree: the hardware's k of A's
    element j is 2t + j%2 + 8*(j//4), of B's 2t + j%2 + 8*(j//2); tg stores k = 4t + j%2 + 2*(j//4) (A) and
    4t + j%2 + 2*(j//2) (B) instead, the same bijection of 0..15, so each lane reads 4 neighbouring k at once.
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
    # Hopper's warpgroup MMA (wgmma.mma_async, sm_90a): 4 warps together, A and B read from shared memory through
    # descriptors (no fragments in registers: a_* and b_* are empty), only C's layout is given
    wgmma: bool = False

    @property
    def name(self) -> str:
        m, n, k = self.dims
        return f"m{m}n{n}k{k}_{self.dtype_in.name}_{self.dtype_out.name}"


def _terms(term: str, offsets: tuple[int, ...]) -> Layout:
    return tuple((term, o) for o in offsets)


def _m16n8k16(dtype_in: DType) -> TensorCore:
    """PTX mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: fragments as in the PTX ISA's figures (K permuted)."""
    return TensorCore(
        dims=(16, 8, 16),
        dtype_in=dtype_in,
        dtype_out=dtypes.float32,
        a_rows=_terms("g", (0, 0, 8, 8, 0, 0, 8, 8)),
        a_cols=_terms("4t", (0, 1, 0, 1, 2, 3, 2, 3)),
        b_rows=_terms("4t", (0, 1, 2, 3)),
        b_cols=_terms("g", (0, 0, 0, 0)),
        c_rows=_terms("g", (0, 0, 8, 8)),
        c_cols=_terms("2t", (0, 1, 0, 1)),
    )


def _m16n8k8_tf32() -> TensorCore:
    """PTX mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32: fp32 operands read as TF32 (10-bit mantissa).

    The hardware's k of A's element j is t + 4*(j//2) and of B's t + 4*j (t = lane % 4); tg stores k = 2t + j//2
    (A) and 2t + j (B) instead, the same bijection of 0..7, so each lane reads 2 neighbouring k at once.
    """
    return TensorCore(
        dims=(16, 8, 8),
        dtype_in=dtypes.float32,
        dtype_out=dtypes.float32,
        a_rows=_terms("g", (0, 8, 0, 8)),
        a_cols=_terms("2t", (0, 0, 1, 1)),
        b_rows=_terms("2t", (0, 1)),
        b_cols=_terms("g", (0, 0)),
        c_rows=_terms("g", (0, 0, 8, 8)),
        c_cols=_terms("2t", (0, 1, 0, 1)),
    )


def _wgmma_m64n128(dtype_in: DType) -> TensorCore:
    """PTX wgmma.mma_async.sync.aligned.m64n128k16.f32.{f16,bf16}, or m64n128k8.f32.tf32 for fp32 inputs under
    ALLOW_TF32: a warpgroup of 128 threads multiplies a 64xK tile of A by a Kx128 tile of B, both in shared memory
    (stage.py lays them out and describes them). Thread w*32 + l (warp w, lane l) holds C's rows 16w + l//4 (+8)
    at columns 8j + 2(l%4) (+1) for j = 0..15: term "wg" is 16 * (lane // 32) + (lane % 32) // 4."""
    rows, cols = [], []
    for j in range(16):
        rows += [("wg", 0), ("wg", 0), ("wg", 8), ("wg", 8)]
        cols += [("2t", 8 * j), ("2t", 8 * j + 1), ("2t", 8 * j), ("2t", 8 * j + 1)]
    return TensorCore(
        dims=(64, 128, 8 if dtype_in == dtypes.float32 else 16),
        dtype_in=dtype_in,
        dtype_out=dtypes.float32,
        a_rows=(),
        a_cols=(),
        b_rows=(),
        b_cols=(),
        c_rows=tuple(rows),
        c_cols=tuple(cols),
        threads=128,
        wgmma=True,
    )


def native_layout(tc: TensorCore) -> TensorCore:
    """`tc` with K in the PTX ISA's own order (no permutation): the layout `ldmatrix` delivers fragments in, used where
    fragments are read from pipelined shared-memory tiles (stage.py). Term "t" is lane % 4.

    >>> native_layout(TENSOR_CORES_SM80[0]).a_cols[4:]
    (('2t', 8), ('2t', 9), ('2t', 8), ('2t', 9))
    """
    if tc.dims[2] == 16:
        return replace(tc, a_cols=_terms("2t", (0, 1, 0, 1, 8, 9, 8, 9)), b_rows=_terms("2t", (0, 1, 8, 9)))
    return replace(tc, a_cols=_terms("t", (0, 0, 4, 4)), b_rows=_terms("t", (0, 4)))


TENSOR_CORES_SM80 = (_m16n8k16(dtypes.float16), _m16n8k16(dtypes.bfloat16), _m16n8k8_tf32())
# Hopper (sm_90) adds the warpgroup MMAs: `Opt(OptOps.TC, axis, 1)` picks them (arg 0: mma.sync)
TENSOR_CORES_SM90 = TENSOR_CORES_SM80 + tuple(
    _wgmma_m64n128(dt) for dt in (dtypes.float16, dtypes.bfloat16, dtypes.float32)
)
# fp32 matmuls run on the TF32 tensor core only when the user allows it (Context(ALLOW_TF32=1) or ALLOW_TF32=1 in
# the environment): TF32 keeps 10 of fp32's 23 mantissa bits. Off by default, as in tinygrad and torch's matmuls.
ALLOW_TF32 = ContextVar("ALLOW_TF32", 0)


def usable_tensor_cores(k: Kernel) -> list[TensorCore]:
    """The renderer's tensor cores that may be used now (the TF32 one only under ALLOW_TF32)."""
    tcs = [tc for tc in k.opts.tensor_cores if isinstance(tc, TensorCore)]
    return [tc for tc in tcs if tc.dtype_in != dtypes.float32 or ALLOW_TF32.value]


def wants_k_major(renderer: object, dtype: DType) -> bool:
    """Whether `renderer`'s tensor cores multiply `dtype` fastest with both operands contiguous along K: Hopper's TF32
    warpgroup MMA (under ALLOW_TF32) takes no transposed operands, and one stored M- or N-major is copied element by
    element (142 against 249 TFLOPS at 4096 on an H100), so a big matmul is better off copying it K-major first.

    >>> from tg_codegen.renderer.cuda import CUDARenderer
    >>> from tg_uop.helpers import Context
    >>> with Context(ALLOW_TF32=1):
    ...     print([wants_k_major(CUDARenderer(arch), dtypes.float32) for arch in ("sm_90", "sm_80")])
    [True, False]
    >>> wants_k_major(CUDARenderer("sm_90"), dtypes.float32)  # (TF32 not allowed: fp32 stays off the tensor cores)
    False
    """
    if dtype != dtypes.float32 or not ALLOW_TF32.value or not getenv("TC", 1):
        return False
    tcs = getattr(renderer, "tensor_cores", ())
    return any(isinstance(tc, TensorCore) and tc.wgmma and tc.dtype_in == dtype for tc in tcs)


TC_AXIS_TYPES = (AxisType.TCM, AxisType.TCN, AxisType.TCK)


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


def moving(load: UOp, axis: int) -> bool:
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
    cands = [tc for tc in usable_tensor_cores(k) if tc.dtype_in == a.dtype]
    if not cands:
        have = sorted({tc.dtype_in.name for tc in usable_tensor_cores(k)})
        tf32 = " (fp32 takes the TF32 tensor core only under ALLOW_TF32=1)" if a.dtype == dtypes.float32 else ""
        raise KernelOptError(f"{opt}: no tensor core takes {a.dtype.name} inputs here (inputs: {have}){tf32}")
    if opt.arg >= len(cands):
        raise KernelOptError(f"{opt}: arg {opt.arg} picks a tensor core, but only {len(cands)} take {a.dtype.name}")
    tc = cands[opt.arg]
    if reduces[0].dtype != tc.dtype_out:
        raise KernelOptError(f"{opt}: the reduction accumulates in {reduces[0].dtype.name}, TC in {tc.dtype_out.name}")
    k_axis = k._pick(opt, AxisType.REDUCE)
    globals_ = k.axes_of(AxisType.GLOBAL)
    m_axes = [x for x in globals_ if moving(a, x) and not moving(b, x)]
    n_axes = [x for x in globals_ if moving(b, x) and not moving(a, x)]
    if not m_axes or not n_axes or not (moving(a, k_axis) and moving(b, k_axis)):
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
    k.wgmma = m.tc.wgmma


def applied_tensor_core(k: Kernel) -> TensorCore:
    """The tensor core a kernel's TC opt picked (the kernel must have one applied)."""
    opt = next(o for o in k.applied_opts if o.op is OptOps.TC)
    reduce = k.reduceops[0]
    ops = mma_operands(reduce)
    if ops is None:
        raise KernelOptError(f"{opt}: the kernel no longer matches a matmul")
    cands = [tc for tc in usable_tensor_cores(k) if tc.dtype_in == ops[0].dtype]
    return cands[opt.arg]


# ---------------------------------------------------------------------------------------------
# the hand-coded choice


def tc_optimizations(k: Kernel) -> bool:
    """Apply TC and a warp/register tiling around it to `k` if it is a matmul tensor cores take (env TC=0: never).

    Workgroups of 2x2 warps (LOCAL on the outer M and N axes), each warp a block of up to 4x8 tiles (UPCAST), the
    K loop unrolled by 2 (the sweep in bench/bench_tc_opts.py found this fastest at 4096 on an H100: 110 TFLOPS
    against 94 without the unroll and 61-97 for other tilings); where the renderer copies asynchronously (CUDA sm_80+),
    the operand tiles pipelined through shared memory in 2 slots (`Opt(OptOps.STAGE, None, 2)`, stage.py), fragments
    read with ldmatrix. Returns whether TC was applied.
    """
    if not getenv("TC", 1) or not k.opts.tensor_cores or k.applied_opts:
        return False
    if _warpgroup_optimizations(k):
        return True
    for axis in range(len(k.axes_of(AxisType.REDUCE))):
        opt = Opt(OptOps.TC, axis, 0)
        try:
            match = _match(k, opt)
            k.apply_opt(opt)
        except KernelOptError:
            continue
        globals_ = k.axes_of(AxisType.GLOBAL)
        m_tile, n_tile = globals_.index(match.m_axis), globals_.index(match.n_axis)
        for tile in (m_tile, n_tile):
            k.apply_first([Opt(OptOps.LOCAL, tile, 2)])
        for tile, amts in ((m_tile, (4, 2)), (n_tile, (8, 4, 2))):
            k.apply_first([Opt(OptOps.UPCAST, tile, amt) for amt in amts])
        k.apply_first([Opt(OptOps.UNROLL, 0, 2)])
        if k.opts.has_async_copy:  # pipelined operand tiles (stage.py): fp16 4096 on an H100 169 -> 327 TFLOPS
            k.apply_first([Opt(OptOps.STAGE, None, 2)])
        return True
    return False


def _warpgroup_optimizations(k: Kernel) -> bool:
    """On Hopper, a matmul whose tiles fit takes the warpgroup MMA: 128x128 blocks of 2 warpgroups (LOCAL 2 on M),
    each a 64x128 wgmma tile, K by 64 (UNROLL 4; by 32 where K is not a multiple of 64) pipelined through shared
    memory in 2 slots (64 KiB: dynamic shared memory). fp16 4096 on an H200: 474 TFLOPS against 414 with K by 32
    and 346 for the mma.sync tile (bench/bench_tc_opts.py); 3 or 4 slots were slower. TF32 only where both operands
    are contiguous along K (A @ B.T, a Linear layer): a row-major B must be transposed into its K-major tile element
    by element, 142 TFLOPS at 4096 on an H100 against 175 for mma.sync. The choice is lowered once to check that
    both operand tiles take a wgmma layout; False (k unchanged) where anything does not fit."""
    from tg_codegen.tc_lower import lower_tc  # (tc_lower imports this module)

    if not k.opts.has_async_copy or (ops := mma_operands(k.reduceops[0]) if len(k.reduceops) == 1 else None) is None:
        return False
    cands = [tc for tc in usable_tensor_cores(k) if tc.dtype_in == ops[0].dtype]
    if not any(tc.wgmma for tc in cands):
        return False
    arg = next(i for i, tc in enumerate(cands) if tc.wgmma)
    for axis, unroll in itertools.product(range(len(k.axes_of(AxisType.REDUCE))), (4, 2)):
        k_axis = k.axes_of(AxisType.REDUCE)[axis]
        if ops[0].dtype == dtypes.float32 and any(op.src[1].arg.real_strides()[k_axis] != 1 for op in ops):
            continue  # TF32 operands not contiguous along K are copied element by element: slower than mma.sync
        trial = k.copy()
        try:
            match = _match(trial, Opt(OptOps.TC, axis, arg))
            trial.apply_opt(Opt(OptOps.TC, axis, arg))
            m_tile = trial.axes_of(AxisType.GLOBAL).index(match.m_axis)
            opts = [Opt(OptOps.LOCAL, m_tile, 2), Opt(OptOps.UNROLL, 0, unroll), Opt(OptOps.STAGE, None, 2)]
            trial.apply_opts(opts)
            lower_tc(trial)
        except KernelOptError:
            continue
        k.apply_opts([Opt(OptOps.TC, axis, arg), *opts])
        return True
    return False
