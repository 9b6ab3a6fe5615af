"""The tensor-core instructions a renderer offers: tile sizes, dtypes and each lane's fragment layout (data only).

A tensor core multiplies an (M x K) tile of A by a (K x N) tile of B into an (M x N) tile of C, all threads of a
warp together: each thread holds a few elements of each tile (its "fragment") in registers, and where each of
its elements lies in the tile is a function of its lane (its thread number in the warp) given by the hardware.

>>> from tg_codegen.tc.cores import TENSOR_CORES_SM80
>>> [tc.name for tc in TENSOR_CORES_SM80]
['m16n8k16_half_float', 'm16n8k16___bf16_float', 'm16n8k8_float_float']

On Hopper (sm_90) the warpgroup MMA (wgmma) joins them: 128 threads, operands read from pipelined shared-memory
tiles by descriptor (stage.py); it needs `Opt(OptOps.STAGE, None, depth >= 2)` with asynchronous copies.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tg_uop import DType, dtypes
from tg_uop.helpers import ContextVar

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
