"""A few rows of x times a float matrix on a GPU, in one kernel with its RMS norm and residual: `matvec`.

`matvec(x, w, norm=g, eps=e, residual=r)` is `r + rms_norm(x, g, e) @ w.T` for x (M, K) float32 with a few rows
(a decode step: one token, or one per sequence of a batch) and w (N, K) in float16, bfloat16 or float32: the
products of a transformer's decode step (q/k/v after the attention norm, the output projection plus the residual
stream, gate/up after the MLP norm, the down projection plus the residual, the head after the final norm).

Why a kernel of its own (CUDA and OpenCL C, one source for both through tg_nn.quant_gpu's GPU_PRELUDE): a decode
step is bandwidth-bound, and reading w is all of its cost. tg's generated matrix-vector kernels read a 1B model's
half weights at about half the H200's bandwidth, and the norm (a reduction) and the residual add are kernels of
their own around them. Here a warp owns a few rows of w (`plan`); each lane reads 16 bytes of each row at a time
(8 values, `ld8`), the loop over the row is unrolled so that many such reads are in flight, and the lanes' partial
sums meet in warp shuffles (CUDA) or local memory (OpenCL). With few rows of w (N <= SPLIT_N) the warps of a
workgroup split the rows' length instead, so that a small matrix still fills the GPU. The norm needs the sum of
squares of x's row, which the warps that read all of x for their dot products add up on the way: rms_norm(x, g) . w =
rsqrt(mean(x^2) + eps) * (x * g) . w, so the norm costs no kernel and no pass of its own. With `glu` (a SwiGLU MLP's
joined gate and up projections) a warp takes gate rows with the matching up rows and writes silu(gate) * up: the
activation costs no kernel either.

Elsewhere (the CPU, the PYTHON device, more rows than MAX_ROWS, a width that is not whole 16-byte reads), the same
in tg's graph: `has_matvec` says which.

>>> import numpy as np
>>> from tg_tensor import Tensor
>>> x, w = Tensor(np.array([[3.0, 4.0]], np.float32)), Tensor(np.array([[1.0, 0.0], [0.0, 1.0]], np.float32))
>>> matvec(x, w, residual=Tensor(np.array([[10.0, 20.0]], np.float32))).tolist()
[[13.0, 24.0]]
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from tg_nn.quant_gpu import GPU_LD8, GPU_PRELUDE
from tg_nn.util import swiglu
from tg_tensor import KernelSource, Tensor, source_kernel
from tg_uop import DType, dtypes

__all__ = ["MAX_ROWS", "has_matvec", "matvec", "rms_norm"]

MAX_ROWS = 8  # rows of x the kernel takes (its accumulators are registers: MAX_ROWS * Plan.rows of them per item)
WARPS = 4  # warps (of 32 items) per workgroup
SPLIT_N = 4096  # at most this many rows of w: the WARPS warps of a workgroup share their rows, each a quarter of K


@dataclass(frozen=True)
class Plan:
    """How the kernel walks w: `rows` rows per warp (each 8 values of x read serve them all), `split` warps sharing
    those rows (each reads 1/split of the row's length), the loop over a row unrolled `unroll` times (16-byte reads
    of each row in flight at once)."""

    rows: int
    split: int
    unroll: int


def plan(m: int, n: int, k: int) -> Plan:
    """The plan for an (m, k) x times an (n, k) w: a small w (n <= SPLIT_N) is split over the warps of a workgroup,
    so that it still fills the GPU. (Measured over a 1B model's decode step on an H200: 1, 2 or 4 rows a warp and
    unrolling 4 to 16 times are within 2% of each other; splitting a small w over fewer warps, or giving its warps 4
    rows, costs 5-8%.)"""
    return Plan(2, WARPS if n <= SPLIT_N else 1, 8)


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """x / rms(x) * weight over the last axis. The 1/rms factors are realized by the sum's kernel, so that for one
    row (a decode step) the scaling is cheap enough to fuse into the matrix-vector product that reads it."""
    return x * (x.square().mean(-1, keepdim=True) + eps).rsqrt().contiguous() * weight


def has_matvec(device: str, dtype: DType, rows: int, k: int) -> bool:
    """Does `matvec` run its fused kernel for x of `rows` rows and width `k` times a `dtype` matrix on `device`?"""
    family = str(device).split(":")[0]
    if "," in str(device):  # (a device set: tg's graph shards the product)
        return False
    weights = (dtypes.float16, dtypes.bfloat16, dtypes.float32)
    return family in ("CUDA", "CL") and dtype in weights and 1 <= rows <= MAX_ROWS and k % 8 == 0 and k > 0


def matvec(
    x: Tensor,
    w: Tensor,
    norm: Tensor | None = None,
    eps: float = 1e-5,
    residual: Tensor | None = None,
    glu: bool = False,
) -> Tensor:
    """`residual + rms_norm(x, norm, eps) @ w.T` (each part optional), float32 (M, N), for x (M, K) and w (N, K);
    one fused kernel where `has_matvec` says so, tg's graph elsewhere (see the module doc).

    `glu`: w holds a gate and an up projection (rows 0..N/2-1 and N/2..N-1, a SwiGLU MLP's), and the result is
    silu(gate) * up, (M, N/2) (the kernel's warps take each gate row with its up row)."""
    if x.ndim != 2 or w.ndim != 2 or int(x.shape[1]) != int(w.shape[1]):
        raise ValueError(f"matvec: x {x.shape} must be (M, K) and w {w.shape} (N, K) with the same K")
    m, k, n = int(x.shape[0]), int(x.shape[1]), int(w.shape[0])
    if glu and n % 2:
        raise ValueError(f"matvec: glu needs an even number of rows of w (gate then up), got {n}")
    n_out = n // 2 if glu else n
    if norm is not None and tuple(norm.shape) != (k,):
        raise ValueError(f"matvec: norm weight {norm.shape} must be ({k},), one per column of x")
    if residual is not None and tuple(residual.shape) != (m, n_out):
        raise ValueError(f"matvec: residual {residual.shape} must be ({m}, {n_out}), the result's shape")
    if not has_matvec(x.device, w.dtype, m, k):
        y = (rms_norm(x, norm, eps) if norm is not None else x) @ w.T
        y = swiglu(y) if glu else y
        return y if residual is None else residual + y
    inputs = [x.cast(dtypes.float32), w]
    inputs += [norm.cast(dtypes.float32)] if norm is not None else []
    inputs += [residual.cast(dtypes.float32)] if residual is not None else []
    opts = (norm is not None, float(eps) if norm is not None else 0.0, residual is not None, glu)
    how = plan(m, n, k)
    make = functools.partial(_source, m, n, k, *opts, how)
    return source_kernel((m, n_out), dtypes.float32, inputs, ("matvec", m, n, k, *opts, how), make)


def launch(n_out: int, how: Plan, glu: bool = False) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(workgroups, items per workgroup) of the kernel for n_out outputs per row of x."""
    per_group = (how.rows // 2 if glu else how.rows) * WARPS // how.split
    return ((n_out + per_group - 1) // per_group, 1, 1), (32 * WARPS, 1, 1)


# per (language, weight type): WT, the type w is read as, and ld8(p, f): the 8 values at p (16-byte aligned) as floats
_LOADS = {
    (lang, wt): f"#define WT {ctype}\n" + GPU_LD8[(lang, wt)]
    for lang in ("CUDA", "CL")
    for wt, ctype in (("half", "half"), ("__bf16", "unsigned short"), ("float", "float"))
}

# the sum of v over the S items of a row group (items base .. base + S - 1 of the workgroup), left in all of them
# (CUDA: warp shuffles, then local memory across the group's warps; OpenCL: local memory); `red` holds NT floats
_SUM = {
    "CUDA": r"""
#define EXP expf
DEV float group_sum(float v, float* red, int lid, int base, int s) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (s == 32) return v;
  if ((lid & 31) == 0) red[lid >> 5] = v;
  __syncthreads();
  float t = 0.0f;
  for (int i = base >> 5; i < (base + s) >> 5; i++) t += red[i];
  __syncthreads();
  return t;
}
""",
    "CL": r"""
#define EXP exp
DEV float group_sum(float v, __local float* red, int lid, int base, int s) {
  red[lid] = v;
  SYNC();
  for (int step = s / 2; step > 0; step >>= 1) {
    if (lid - base < step) red[lid] += red[lid + step];
    SYNC();
  }
  v = red[base];
  SYNC();
  return v;
}
""",
}

# NV sums per item: M * ROWS dot products, then M sums of squares (NORM); the loop walks 8-value chunks c of the row.
# A warp's OUT outputs of each row of x: rows o0 .. o0 + OUT - 1 of w, or with GLU those of its first half (gates)
# and the same rows of its second half (ups), side by side in the warp's ROWS rows
_KERNEL = r"""
#define NV (M * ROWS + (NORM ? M : 0))
#define OUT (GLU ? ROWS / 2 : ROWS)
#define NOUT (GLU ? N / 2 : N)
KERNEL NAME(GLOBAL float* out, const GLOBAL float* x, const GLOBAL WT* w ARGS) {
  LOCAL_ARR(float, red, NT);
  int lid = LANE(), s = 32 * SPLIT, base = lid - lid % s, part = (lid - base) / 32 * 32 + (lid & 31);
  int o0 = (GROUP(0) * (NT / s) + lid / s) * OUT;
  float v[NV];
  for (int i = 0; i < NV; i++) v[i] = 0.0f;
  const GLOBAL WT* wr[ROWS];
  for (int r = 0; r < ROWS; r++) {
    int o = o0 + r % OUT;
    wr[r] = w + (long)((o < NOUT ? o : NOUT - 1) + r / OUT * NOUT) * K;
  }
{unroll}  for (int c = part; c < K / 8; c += s) {
    float f[8], xv[M][8];
    for (int mm = 0; mm < M; mm++) {
      float4 a = LD4(x + (long)mm * K + 8 * c), b = LD4(x + (long)mm * K + 8 * c + 4);
      xv[mm][0] = a.x; xv[mm][1] = a.y; xv[mm][2] = a.z; xv[mm][3] = a.w;
      xv[mm][4] = b.x; xv[mm][5] = b.y; xv[mm][6] = b.z; xv[mm][7] = b.w;
#if NORM
      for (int e = 0; e < 8; e++) v[M * ROWS + mm] += xv[mm][e] * xv[mm][e];
      float4 ga = LD4(g + 8 * c), gb = LD4(g + 8 * c + 4);
      xv[mm][0] *= ga.x; xv[mm][1] *= ga.y; xv[mm][2] *= ga.z; xv[mm][3] *= ga.w;
      xv[mm][4] *= gb.x; xv[mm][5] *= gb.y; xv[mm][6] *= gb.z; xv[mm][7] *= gb.w;
#endif
    }
    for (int r = 0; r < ROWS; r++) {
      ld8(wr[r] + 8 * c, f);
      for (int mm = 0; mm < M; mm++)
        for (int e = 0; e < 8; e++) v[mm * ROWS + r] += xv[mm][e] * f[e];
    }
  }
  for (int i = 0; i < NV; i++) v[i] = group_sum(v[i], red, lid, base, s);
  if (lid != base) return;
  for (int mm = 0; mm < M; mm++)
    for (int r = 0; r < OUT; r++) {
      if (o0 + r >= NOUT) continue;
      float scale = 1.0f;
#if NORM
      scale = 1.0f / sqrt(v[M * ROWS + mm] / (float)K + EPS);
#endif
      float y = v[mm * ROWS + r] * scale;
#if GLU
      y = y / (1.0f + EXP(-y)) * (v[mm * ROWS + r + OUT] * scale);
#endif
#if RES
      y += res[(long)mm * NOUT + o0 + r];
#endif
      out[(long)mm * NOUT + o0 + r] = y;
    }
}
"""


def _source(
    m: int,
    n: int,
    k: int,
    norm: bool,
    eps: float,
    res: bool,
    glu: bool,
    how: Plan,
    device: str,
    dts: tuple[DType, ...],
) -> KernelSource | None:
    if glu and how.rows % 2:
        raise ValueError(f"matvec: a glu kernel takes gate and up rows in pairs; {how} has an odd number per warp")
    family = device.split(":")[0]
    wt = dts[2].name  # (output, x, w, ...)
    if family not in ("CUDA", "CL") or (family, wt) not in _LOADS:
        return None
    parts = ("_norm" if norm else "", "_res" if res else "", "_glu" if glu else "")
    name = f"matvec_{wt.strip('_')}_{m}_{n}_{k}" + "".join(parts)
    args = (", const GLOBAL float* g" if norm else "") + (", const GLOBAL float* res" if res else "")
    defines = {
        "M": m, "N": n, "K": k, "ROWS": how.rows, "SPLIT": how.split, "NT": 32 * WARPS,
        "NORM": int(norm), "RES": int(res), "GLU": int(glu), "EPS": f"{eps!r}f", "NAME": name, "ARGS": args,
    }  # fmt: skip
    head = GPU_PRELUDE[family] + _LOADS[(family, wt)] + _SUM[family]
    unroll = f"  #pragma unroll {how.unroll}\n" if family == "CUDA" else ""  # (OpenCL C has no such pragma)
    src = head + "".join(f"#define {key} {val}\n" for key, val in defines.items()) + _KERNEL.replace("{unroll}", unroll)
    return KernelSource(src, name, *launch(n // 2 if glu else n, how, glu))
