"""Attention of one new token per sequence over a KV cache in one fused kernel (scores, softmax, values): C on the
CPU, CUDA or OpenCL C on GPUs (see _GPU below).

`decode_attention(q, keys, values, positions, scale)`: q (B, heads, head_dim) holds one query per sequence; keys
(R, kv_heads, context, head_dim) and values (R, kv_heads, head_dim, context) are a KVCache's buffers (kv_cache.py)
(values transposed; R >= B rows, the first B read, so a step of fewer sequences reads a bigger cache in place);
`positions` (B,) int32 says where each sequence's query stands: row b attends to slots 0..positions[b] of its own
cache row, whatever the others' positions (a batched decode of sequences at different positions). Heads share
their kv head in groups (grouped-query attention).

Why a kernel of its own: tg's graph gives a decode step's attention a symbolic length (`start + 1` slots), which
the hand-coded optimizations leave alone: scalar loops with one accumulator, on one thread (SmolLM2 at position 100:
~95 us per layer for 9 heads of 64, a fifth of a decode step). Here each query head of each sequence is a chunk of
tg's CPU thread pool (one per kv head left 2 cores with 3 chunks: one idle a third of the time), the dot products
and the exponentials run 8 lanes wide (GCC/clang vector extensions, any target), and the scores never leave the
stack. The length comes from `positions`, a buffer, so one compiled kernel (and one TinyJit capture)
serves every position.

>>> import numpy as np
>>> from tg_tensor import Tensor
>>> k = Tensor(np.zeros((1, 1, 4, 8), np.float32)); v = Tensor(np.arange(32, dtype=np.float32).reshape(1, 1, 8, 4))
>>> out = decode_attention(Tensor.ones(1, 2, 8), k, v, Tensor(np.array([1], np.int32)), 1.0)
>>> out.numpy()[0, 0, :3].tolist()  # equal scores over slots 0..1: the mean of their values
[0.5, 4.5, 8.5]
"""

from __future__ import annotations

import functools

from tg_nn.quant_gpu import GPU_LD8, GPU_PRELUDE
from tg_runtime.device import Device
from tg_tensor import KernelSource, Tensor, source_kernel
from tg_uop import DType, dtypes

__all__ = ["decode_attention"]

_SRC = r"""
#include <math.h>
#include <string.h>
typedef float tga_v8 __attribute__((vector_size(32), aligned(4)));  /* 8 floats, loads at any float address */
void (*tg_parallel)(void (*chunk)(void*, int), void* args, int n, int threads);
#ifdef __AVX__
#include <immintrin.h>
static inline float tga_hsum(tga_v8 v) {  /* the 8 lanes added in a tree of shuffles */
  __m256 x;
  memcpy(&x, &v, 32);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
#else
static inline float tga_hsum(tga_v8 v) {
  return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}
#endif
static inline float tga_dot(const float* a, const float* b, int n) {  /* n a multiple of 8 */
  tga_v8 acc = {0};
  for (int i = 0; i < n; i += 8) acc += *(const tga_v8*)(a + i) * *(const tga_v8*)(b + i);
  return tga_hsum(acc);
}
static inline void tga_dot4(const float* a, const float* b, long stride, int n, float* out) {
  /* out[i] = a . b[i * stride ..], i = 0..3: four independent chains (n a multiple of 8) */
  tga_v8 c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0};
  for (int i = 0; i < n; i += 8) {
    tga_v8 x = *(const tga_v8*)(a + i);
    c0 += x * *(const tga_v8*)(b + i);
    c1 += x * *(const tga_v8*)(b + stride + i);
    c2 += x * *(const tga_v8*)(b + 2 * stride + i);
    c3 += x * *(const tga_v8*)(b + 3 * stride + i);
  }
  out[0] = tga_hsum(c0); out[1] = tga_hsum(c1); out[2] = tga_hsum(c2); out[3] = tga_hsum(c3);
}
/* e^x of 8 lanes (x <= 0 here: scores minus their maximum): 2^n * e^r, n = round(x / ln 2), |r| <= ln(2) / 2, e^r
   by a degree-6 Taylor polynomial (relative error < 2e-7, about expf's); below -87 the result is 0 */
typedef int tga_i8 __attribute__((vector_size(32), aligned(4)));
static inline tga_v8 tga_select(tga_i8 m, tga_v8 a, tga_v8 b) {  /* a where m, else b (m: a comparison's lanes) */
  return (tga_v8)(((tga_i8)a & m) | ((tga_i8)b & ~m));
}
static inline tga_v8 tga_exp8(tga_v8 x) {
  const tga_v8 lo = {-87.0f, -87.0f, -87.0f, -87.0f, -87.0f, -87.0f, -87.0f, -87.0f};
  tga_i8 under = x < lo;
  x = tga_select(under, lo, x);
  tga_v8 n = x * 1.44269504f;
  n = n + 12582912.0f - 12582912.0f;  /* round to nearest (1.5 * 2^23) */
  tga_v8 r = x - n * 0.693145752f - n * 1.42860677e-6f;  /* ln 2 in two parts */
  tga_v8 p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
  tga_i8 e = (__builtin_convertvector(n, tga_i8) + 127) << 23;
  return tga_select(under, (tga_v8){0}, p * (tga_v8)e);
}
struct tga_args { float* out; const float* q; const float* k; const float* v; const int* pos; };
static void tga_chunk(void* p, int c) {  /* sequence c / (KV * GROUP), kv head c / GROUP % KV, query head c % GROUP */
  const struct tga_args* a = (const struct tga_args*)p;
  int b = c / (KV * GROUP), h = c / GROUP % KV, g = c % GROUP, n = a->pos[b] + 1;
  if (n > CTX) n = CTX;
  if (n < 1) n = 1;
  const float* keys = a->k + ((long)b * KV + h) * CTX * HD;
  const float* vals = a->v + ((long)b * KV + h) * HD * CTX;
  float s[CTX + 8];
  const float* q = a->q + ((long)b * KV * GROUP + h * GROUP + g) * HD;
  float* o = a->out + ((long)b * KV * GROUP + h * GROUP + g) * HD;
  float peak = -INFINITY, total = 0.0f;
  int j = 0;
  for (; j + 4 <= n; j += 4) tga_dot4(q, keys + (long)j * HD, HD, HD, s + j);
  for (; j < n; j++) s[j] = tga_dot(q, keys + (long)j * HD, HD);
  for (j = 0; j < n; j++) {
    s[j] *= SCALE;
    peak = s[j] > peak ? s[j] : peak;
  }
  for (j = n; j < ((n + 7) & ~7); j++) s[j] = -INFINITY;  /* (the last 8 lanes' tail: e^-inf = 0) */
  tga_v8 sum8 = {0};
  for (j = 0; j < n; j += 8) {
    tga_v8 e = tga_exp8(*(tga_v8*)(s + j) - peak);
    memcpy(s + j, &e, 32);
    sum8 += e;
  }
  total = tga_hsum(sum8);
  float inv = 1.0f / total, acc[4];
  int n8 = n & ~7;
  for (int d = 0; d < HD; d += 4) {  /* (HD a multiple of 8) */
    const float* vd = vals + (long)d * CTX;
    if (n8) tga_dot4(s, vd, CTX, n8, acc);
    else acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
    for (int i = 0; i < 4; i++) {
      for (j = n8; j < n; j++) acc[i] += s[j] * vd[(long)i * CTX + j];
      o[d + i] = acc[i] * inv;
    }
  }
}
void NAME(float* restrict out, const float* restrict q, const float* restrict k, const float* restrict v,
          const int* restrict pos) {
  struct tga_args a = {out, q, k, v, pos};
  if (tg_parallel && B * KV * GROUP > 1) tg_parallel(tga_chunk, &a, B * KV * GROUP, THREADS);
  else for (int c = 0; c < B * KV * GROUP; c++) tga_chunk(&a, c);
}
"""


# GPU kernel (CUDA, OpenCL): a workgroup of NT items per (sequence, query head). The scores of slots 0..n-1 go to
# local memory (CTX floats: the kernel is used up to GPU_CTX_MAX slots), their max and sum are reduced in it, and
# NT / HD items share each output element, walking the slots side by side.
_GPU = r"""
#define NT 256
#define P (NT / HD)
KERNEL NAME(GLOBAL float* out, GLOBAL const float* q, GLOBAL const KT* k, GLOBAL const KT* v, GLOBAL const int* pos) {
  LOCAL_ARR(float, s, CTX);
  LOCAL_ARR(float, qs, HD);
  LOCAL_ARR(float, red, NT);
  int tid = LANE(), bh = GROUP(0), b = bh / (KV * GROUPS), kvh = (bh % (KV * GROUPS)) / GROUPS;
  int n = pos[b] + 1;
  n = n > CTX ? CTX : (n < 1 ? 1 : n);
  const GLOBAL KT* keys = k + ((long)b * KV + kvh) * CTX * HD;
  const GLOBAL KT* vals = v + ((long)b * KV + kvh) * HD * CTX;
  for (int i = tid; i < HD; i += NT) qs[i] = q[(long)bh * HD + i] * SCALE;
  SYNC();
  float peak = -3.0e38f, total = 0.0f, acc = 0.0f;
  float f[8];
  for (int j = tid; j < n; j += NT) {
    float dot = 0.0f;
    for (int i = 0; i < HD; i += 8) {
      ld8(keys + (long)j * HD + i, f);
      for (int e = 0; e < 8; e++) dot += qs[i + e] * f[e];
    }
    s[j] = dot;
    peak = dot > peak ? dot : peak;
  }
  red[tid] = peak;
  SYNC();
  for (int st = NT / 2; st > 0; st >>= 1) {
    if (tid < st && red[tid + st] > red[tid]) red[tid] = red[tid + st];
    SYNC();
  }
  peak = red[0];
  SYNC();
  for (int j = tid; j < n; j += NT) total += (s[j] = EXP(s[j] - peak));
  red[tid] = total;
  SYNC();
  for (int st = NT / 2; st > 0; st >>= 1) {
    if (tid < st) red[tid] += red[tid + st];
    SYNC();
  }
  float inv = 1.0f / red[0];
  SYNC();
  int d = tid / P, part = tid % P;
  const GLOBAL KT* vd = vals + (long)d * CTX;
  int n8 = n & ~7;
  for (int j = 8 * part; j < n8; j += 8 * P) {  /* 8 slots a read, the P items of a row side by side */
    ld8(vd + j, f);
    for (int e = 0; e < 8; e++) acc += s[j + e] * f[e];
  }
  for (int j = n8 + part; j < n; j += P) acc += s[j] * LDV(vd, j);
  red[tid] = acc;
  SYNC();
  if (part == 0) {
    for (int i = 1; i < P; i++) acc += red[tid + i];
    out[(long)bh * HD + d] = acc * inv;
  }
}
"""
# per (language, cache type): KT, one element's load LDV(p, i), EXP, and ld8(p, f): 8 elements from p (16- or 32-byte
# aligned: the head size and the context are multiples of 8) into floats f[0..7] (tg_nn.quant_gpu's GPU_LD8)
_LDV = {
    ("CUDA", "half"): "#define LDV(p, i) __half2float((p)[i])\n#define EXP __expf\n",
    ("CUDA", "float"): "#define LDV(p, i) ((p)[i])\n#define EXP __expf\n",
    ("CL", "half"): "#define LDV(p, i) vload_half((i), (p))\n#define EXP exp\n",
    ("CL", "float"): "#define LDV(p, i) ((p)[i])\n#define EXP exp\n",
}
_GPU_LOADS = {key: f"#define KT {key[1]}\n" + ldv + GPU_LD8[key] for key, ldv in _LDV.items()}
GPU_CTX_MAX = 8192  # (the scores in local memory: 32 KB)


def has_kernel(device: str, head_dim: int, context: int, cache_dtype: DType) -> bool:
    """Does `decode_attention` run one fused kernel on `device` for this head size, context and cache dtype (else
    tg's graph, every slot read and masked)?"""
    family = device.split(":")[0]
    if family == "CPU":
        return head_dim % 8 == 0 and cache_dtype == dtypes.float32
    fits = head_dim % 8 == 0 and 256 % head_dim == 0 and context % 8 == 0 and context <= GPU_CTX_MAX
    return family in ("CUDA", "CL") and fits and cache_dtype in (dtypes.float16, dtypes.float32)


def decode_attention(q: Tensor, keys: Tensor, values: Tensor, positions: Tensor, scale: float) -> Tensor:
    """softmax(q . keys[b, :, :positions[b]+1] * scale) @ values, per sequence b: (B, heads, head_dim) float32.

    One fused kernel where `has_kernel` says so (the CPU: see the module doc; CUDA and OpenCL: one workgroup per
    query head); elsewhere tg's graph with a mask of each row's slots.
    """
    if q.ndim != 3 or keys.ndim != 4 or values.ndim != 4 or positions.ndim != 1:
        raise ValueError(
            f"decode_attention: q {q.shape} must be (B, heads, hd), keys {keys.shape} (B, kv, context, hd), "
            f"values {values.shape} (B, kv, hd, context), positions {positions.shape} (B,)"
        )
    b, heads, hd = (int(s) for s in q.shape)
    _, kv, ctx, _ = (int(s) for s in keys.shape)  # (the head size is checked against q's below)
    rows = int(keys.shape[0])
    if rows < b or tuple(keys.shape) != (rows, kv, ctx, hd) or tuple(values.shape) != (rows, kv, hd, ctx) or heads % kv:
        raise ValueError(
            f"decode_attention: keys {keys.shape} and values {values.shape} do not fit q {q.shape} "
            f"(expected (>= {b}, kv, context, {hd}) and (>= {b}, kv, {hd}, context) with kv dividing {heads})"
        )
    if int(positions.shape[0]) != b or positions.dtype != dtypes.int32:
        raise ValueError(f"decode_attention: positions must be int32 ({b},), got {positions.dtype} {positions.shape}")
    if keys.dtype != values.dtype or not has_kernel(q.device, hd, ctx, keys.dtype):
        return _graph_attention(q, keys, values, positions, scale)
    make = functools.partial(_source, b, kv, heads // kv, ctx, hd, float(scale))
    inputs = [q.cast(dtypes.float32), keys, values, positions]
    key = ("decode_attn", b, rows, kv, heads, ctx, hd, scale)
    return source_kernel((b, heads, hd), dtypes.float32, inputs, key, make)


def _source(
    b: int, kv: int, group: int, ctx: int, hd: int, scale: float, device: str, dts: tuple[DType, ...]
) -> KernelSource | None:
    family = device.split(":")[0]
    if family in ("CUDA", "CL"):
        name = f"decode_attn_{b}_{kv}_{group}_{ctx}_{hd}_{dts[2].name}"
        defines = {"KV": kv, "GROUPS": group, "CTX": ctx, "HD": hd, "SCALE": f"{scale!r}f", "NAME": name}
        head = GPU_PRELUDE[family] + _GPU_LOADS[(family, dts[2].name)]
        src = head + "".join(f"#define {k} {v}\n" for k, v in defines.items()) + _GPU
        return KernelSource(src, name, (b * kv * group, 1, 1), (256, 1, 1))
    if family != "CPU":
        return None
    name = f"decode_attn_{b}_{kv}_{group}_{ctx}_{hd}"
    defines = {"B": b, "KV": kv, "GROUP": group, "CTX": ctx, "HD": hd, "THREADS": Device[device].renderer.threads}
    head = (
        "".join(f"#define {k} {v}\n" for k, v in defines.items()) + f"#define SCALE {scale!r}f\n#define NAME {name}\n"
    )
    return KernelSource(head + _SRC, name)


def _graph_attention(q: Tensor, keys: Tensor, values: Tensor, positions: Tensor, scale: float) -> Tensor:
    """The same with tg's graph (every slot of the context read, those past each row's position masked)."""
    b, heads, hd = (int(s) for s in q.shape)
    kv, ctx = int(keys.shape[1]), int(keys.shape[2])
    keys, values = keys[:b], values[:b]
    qg = q.reshape(b, kv, heads // kv, hd).cast(dtypes.float32)
    scores = (qg @ keys.cast(dtypes.float32).transpose(-2, -1)) * scale  # (b, kv, group, ctx)
    seen = Tensor.arange(ctx, device=q.device).reshape(1, 1, 1, ctx) <= positions.reshape(b, 1, 1, 1)
    weights = seen.where(scores, float("-inf")).softmax(-1)
    return (weights @ values.cast(dtypes.float32).transpose(-2, -1)).reshape(b, heads, hd)
