"""OpenCL C and CUDA C source of the fused dequantize-and-multiply kernels over GGUF blocks (tg_nn.quant runs them).

`out (M, N) = x (M, K) @ W.T` with W (N, K) in the file's blocks. One workgroup of 32 work items per output
element: each takes every 32nd block of the weight row, unpacks its values from the bytes and multiplies them
with x in float32; the 32 partial sums are added in local memory. One body serves both languages (macros for the
qualifiers, ids and barrier); the float16 scales are decoded from their bits, so no half type is needed.

>>> "KERNEL qmm_Q8_0_1_4_32(" in gpu_source("Q8_0", 1, 4, 32, "CL")
True
"""

from __future__ import annotations

from tg_nn.quant_cpu import CPU_TYPES

__all__ = ["gpu_source"]

_LANG = {
    "CL": r"""
#define KERNEL __kernel void
#define GLOBAL __global
#define LOCAL_ARR(t, n, s) __local t n[s]
#define GROUP(i) ((int)get_group_id(i))
#define LANE() ((int)get_local_id(0))
#define SYNC() barrier(CLK_LOCAL_MEM_FENCE)
#define BITS_F(u) as_float(u)
#define DEV static inline
typedef unsigned char u8; typedef signed char i8; typedef unsigned int u32;
""",
    "CUDA": r"""
#define KERNEL extern "C" __global__ void
#define GLOBAL
#define LOCAL_ARR(t, n, s) __shared__ t n[s]
#define GROUP(i) ((int)((i) == 0 ? blockIdx.x : blockIdx.y))
#define LANE() ((int)threadIdx.x)
#define SYNC() __syncthreads()
#define BITS_F(u) __uint_as_float(u)
#define DEV static __device__ inline
typedef unsigned char u8; typedef signed char i8; typedef unsigned int u32;
""",
}

_COMMON = r"""
DEV float h2f(const GLOBAL u8* p) {
  u32 h = (u32)p[0] | ((u32)p[1] << 8), sign = (h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 0x3ffu;
  if (e == 0) { float f = (float)m * (1.0f / 16777216.0f); return sign ? -f : f; }
  return BITS_F(e == 31 ? (sign | 0x7f800000u | (m << 13)) : (sign | ((e + 112u) << 23) | (m << 13)));
}
DEV void scale_min(const GLOBAL u8* s, int j, int* sc, int* mn) {
  if (j < 4) { *sc = s[j] & 63; *mn = s[j + 4] & 63; }
  else { *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4); *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4); }
}
"""

# the dot product of one block (BS values at `w`) with BS floats of x at `x`
_BLOCK = {
    "Q8_0": r"""
DEV float block_dot(const GLOBAL u8* w, const GLOBAL float* x) {
  float acc = 0.0f;
  for (int i = 0; i < 32; i++) acc += (float)((const GLOBAL i8*)w)[2 + i] * x[i];
  return h2f(w) * acc;
}
""",
    "Q4_0": r"""
DEV float block_dot(const GLOBAL u8* w, const GLOBAL float* x) {
  float acc = 0.0f;
  for (int i = 0; i < 16; i++) acc += (float)((w[2 + i] & 15) - 8) * x[i] + (float)((w[2 + i] >> 4) - 8) * x[16 + i];
  return h2f(w) * acc;
}
""",
    "Q4_1": r"""
DEV float block_dot(const GLOBAL u8* w, const GLOBAL float* x) {
  float acc = 0.0f, sum = 0.0f;
  for (int i = 0; i < 16; i++) {
    acc += (float)(w[4 + i] & 15) * x[i] + (float)(w[4 + i] >> 4) * x[16 + i];
    sum += x[i] + x[16 + i];
  }
  return h2f(w) * acc + h2f(w + 2) * sum;
}
""",
    "Q4_K": r"""
DEV float block_dot(const GLOBAL u8* w, const GLOBAL float* x) {
  float d = h2f(w), dmin = h2f(w + 2), acc = 0.0f;
  for (int j = 0; j < 8; j++) {
    int sc, mn, shift = (j & 1) * 4;
    scale_min(w + 4, j, &sc, &mn);
    float dot = 0.0f, sum = 0.0f;
    for (int i = 0; i < 32; i++) {
      float v = x[j * 32 + i];
      dot += (float)((w[16 + (j / 2) * 32 + i] >> shift) & 15) * v;
      sum += v;
    }
    acc += d * (float)sc * dot - dmin * (float)mn * sum;
  }
  return acc;
}
""",
    "Q5_K": r"""
DEV float block_dot(const GLOBAL u8* w, const GLOBAL float* x) {
  float d = h2f(w), dmin = h2f(w + 2), acc = 0.0f;
  for (int j = 0; j < 8; j++) {
    int sc, mn, shift = (j & 1) * 4;
    scale_min(w + 4, j, &sc, &mn);
    float dot = 0.0f, sum = 0.0f;
    for (int i = 0; i < 32; i++) {
      float v = x[j * 32 + i];
      int q = ((w[48 + (j / 2) * 32 + i] >> shift) & 15) | (((w[16 + i] >> j) & 1) << 4);
      dot += (float)q * v;
      sum += v;
    }
    acc += d * (float)sc * dot - dmin * (float)mn * sum;
  }
  return acc;
}
""",
    "Q6_K": r"""
DEV float block_dot(const GLOBAL u8* w, const GLOBAL float* x) {
  float acc = 0.0f;
  const GLOBAL i8* sc = (const GLOBAL i8*)(w + 192);
  for (int h = 0; h < 2; h++)
    for (int k = 0; k < 4; k++)
      for (int i = 0; i < 32; i++) {
        int lo = (w[h * 64 + (k & 1) * 32 + i] >> (4 * (k >> 1))) & 15, hi = (w[128 + h * 32 + i] >> (2 * k)) & 3;
        int q = lo | (hi << 4);
        int e = h * 128 + k * 32 + i;
        acc += (float)sc[e / 16] * (float)(q - 32) * x[e];
      }
  return h2f(w + 208) * acc;
}
""",
}

_KERNEL = r"""
KERNEL {name}(GLOBAL float* out, const GLOBAL float* x, const GLOBAL u8* w) {{
  /* group (n, m): out[m, n]; 32 lanes over the row's blocks */
  LOCAL_ARR(float, part, 32);
  int n = GROUP(0), m = GROUP(1), lane = LANE();
  float acc = 0.0f;
  const GLOBAL u8* row = w + (long)n * {rowb};
  for (int b = lane; b < {nb}; b += 32) acc += block_dot(row + (long)b * {bb}, x + (long)m * {k} + b * {bs});
  part[lane] = acc;
  SYNC();
  for (int step = 16; step > 0; step >>= 1) {{
    if (lane < step) part[lane] += part[lane + step];
    SYNC();
  }}
  if (lane == 0) out[(long)m * {n} + n] = part[0];
}}
"""


def gpu_source(qtype: str, m: int, n: int, k: int, lang: str) -> str:
    """`lang` ("CL" or "CUDA") source of `qmm_{qtype}_{m}_{n}_{k}`, launched over (n, m) groups of 32 items."""
    if qtype not in _BLOCK:
        raise ValueError(f"quantized matmul: no {lang} kernel for {qtype}; tg has {', '.join(_BLOCK)}")
    bs, bb = CPU_TYPES[qtype]  # (elements, bytes) per block: the GGUF format's, the same on every device
    body = _KERNEL.format(name=f"qmm_{qtype}_{m}_{n}_{k}", nb=k // bs, rowb=k // bs * bb, bb=bb, bs=bs, k=k, n=n)
    return _LANG[lang] + _COMMON + _BLOCK[qtype] + body
