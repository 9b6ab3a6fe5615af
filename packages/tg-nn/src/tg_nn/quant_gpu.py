"""OpenCL C and CUDA C source of the fused dequantize-and-multiply kernels over GGUF blocks (tg_nn.quant runs them).

`out (M, N) = x (M, K) @ W.T` with W (N, K) in the file's blocks. A workgroup holds ROWS rows of W, 32 lanes each (a
warp on CUDA), and up to MT rows of x. The lanes of a row split each block in PARTS parts and walk the row 32 /
PARTS blocks at a time, so neighbouring lanes read neighbouring bytes (coalesced); each unpacks its part (Q8_0 and
Q4_K read theirs as 16- or 32-bit words and x as float4s) and multiplies it with the MT rows of x in float32 (the
weight bytes are read from memory once for all of them). The 32 partial sums are added with warp shuffles (CUDA) or
in local memory (OpenCL). One body serves both languages (macros for the qualifiers, ids and barrier); the float16
scales are decoded from their bits, so no half type is needed.

>>> "KERNEL qmm_Q8_0_1_4_32(" in gpu_source("Q8_0", 1, 4, 32, "CL")
True
"""

from __future__ import annotations

from tg_nn.quant_cpu import CPU_TYPES

__all__ = ["GPU_LD8", "GPU_PRELUDE", "gpu_launch", "gpu_source"]

GPU_PRELUDE = {  # per language: the macros that let one kernel source be OpenCL C and CUDA C
    "CL": r"""
#define KERNEL __kernel void
#define GLOBAL __global
#define LOCAL_ARR(t, n, s) __local t n[s]
#define GROUP(i) ((int)get_group_id(i))
#define LANE() ((int)get_local_id(0))
#define SYNC() barrier(CLK_LOCAL_MEM_FENCE)
#define BITS_F(u) as_float(u)
#define DEV static inline
#define LD4(p) vload4(0, p)
typedef unsigned char u8; typedef signed char i8; typedef unsigned int u32; typedef unsigned short u16;
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
#define LD4(p) (*(const float4*)(p))
typedef unsigned char u8; typedef signed char i8; typedef unsigned int u32; typedef unsigned short u16;
""",
}

# per (language, element type name): ld8(p, f), the 8 elements at p (16-byte aligned) as floats f[0..7], for the
# GPU kernels that read float16, bfloat16 or float32 arrays (tg_nn.matvec, tg_nn.models.decode_attention)
GPU_LD8 = {
    ("CUDA", "half"): r"""#include <cuda_fp16.h>
DEV void ld8(const half* p, float* f) {
  uint4 u = *(const uint4*)p;
  const half2* h = (const half2*)&u;
  for (int i = 0; i < 4; i++) { float2 t = __half22float2(h[i]); f[2 * i] = t.x; f[2 * i + 1] = t.y; }
}
""",
    ("CL", "half"): "DEV void ld8(const GLOBAL half* p, float* f) { vstore8(vload_half8(0, p), 0, f); }\n",
    ("CUDA", "__bf16"): r"""DEV void ld8(const unsigned short* p, float* f) {
  uint4 u = *(const uint4*)p;
  u32 w[4] = {u.x, u.y, u.z, u.w};
  for (int i = 0; i < 4; i++) { f[2 * i] = BITS_F(w[i] << 16); f[2 * i + 1] = BITS_F(w[i] & 0xffff0000u); }
}
""",
    ("CL", "__bf16"): r"""DEV void ld8(const GLOBAL unsigned short* p, float* f) {
  uint4 u = vload4(0, (const GLOBAL uint*)p);
  u32 w[4] = {u.x, u.y, u.z, u.w};
  for (int i = 0; i < 4; i++) { f[2 * i] = BITS_F(w[i] << 16); f[2 * i + 1] = BITS_F(w[i] & 0xffff0000u); }
}
""",
    ("CUDA", "float"): r"""DEV void ld8(const float* p, float* f) {
  float4 a = *(const float4*)p, b = *(const float4*)(p + 4);
  f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w; f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}
""",
    ("CL", "float"): "DEV void ld8(const GLOBAL float* p, float* f) { vstore8(vload8(0, p), 0, f); }\n",
}

# (GPU kernels only) the value of a word's low byte, unsigned (u8f) and signed (s8), and the dot product of a word's
# 4 bytes with 4 floats. The bytes become floats without an int-to-float conversion, which GPUs run at a quarter of
# their float rate (it bounded the kernels' speed): the byte is put in the low bits of 2^23's mantissa (exact) and
# 2^23 subtracted
_GPU_COMMON = r"""
DEV float u8f(u32 b) { return BITS_F(0x4b000000u | (b & 255u)) - 8388608.0f; }
DEV float s8(u32 b) { return BITS_F(0x4b000000u | ((b ^ 128u) & 255u)) - 8388736.0f; }
DEV float byte_dot(u32 q, float4 a) {
  return u8f(q) * a.x + u8f(q >> 8) * a.y + u8f(q >> 16) * a.z + u8f(q >> 24) * a.w;
}
"""

# (GPU kernels only) hf(p): the float16 at p (2-byte aligned: every block and every scale in one is), converted by
# the hardware; QEXP the exponential (the SwiGLU epilogue)
_HF = {
    "CUDA": "#include <cuda_fp16.h>\n#define QEXP expf\n"
    "DEV float hf(const u8* p) { return __half2float(*(const __half*)p); }\n",
    "CL": "#define QEXP exp\nDEV float hf(const GLOBAL u8* p) { return vload_half(0, (const GLOBAL half*)p); }\n",
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

# the dot product of one block (BS values at `w`) with BS floats of x at `x` (the CPU's float kernels use these)
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

# PARTS[t]: how many lanes share one block of type t; part_dot(w, x, p) is part p's share of the dot product of the
# block at `w` with the block's floats of x at `x` (PARTS lanes read one block's bytes side by side)
PARTS = {"Q8_0": 4, "Q4_0": 4, "Q4_1": 4, "Q4_K": 32, "Q5_K": 16, "Q6_K": 16}

_PART = {
    # Q8_0: part p is 8 values; the bytes read as four 16-bit words (a 34-byte block is 2-aligned), x as float4s
    "Q8_0": r"""
DEV float part_dot(const GLOBAL u8* w, const GLOBAL float* x, int p) {
  const GLOBAL u16* q = (const GLOBAL u16*)(w + 2 + 8 * p);
  u32 q0 = q[0], q1 = q[1], q2 = q[2], q3 = q[3];
  float4 a = LD4(x + 8 * p), b = LD4(x + 8 * p + 4);
  float acc = s8(q0) * a.x + s8(q0 >> 8) * a.y + s8(q1) * a.z + s8(q1 >> 8) * a.w;
  acc += s8(q2) * b.x + s8(q2 >> 8) * b.y + s8(q3) * b.z + s8(q3 >> 8) * b.w;
  return hf(w) * acc;
}
""",
    "Q4_0": r"""
DEV float part_dot(const GLOBAL u8* w, const GLOBAL float* x, int p) {
  float acc = 0.0f;
  for (int i = 4 * p; i < 4 * p + 4; i++)
    acc += (u8f(w[2 + i] & 15) - 8.0f) * x[i] + (u8f(w[2 + i] >> 4) - 8.0f) * x[16 + i];
  return hf(w) * acc;
}
""",
    "Q4_1": r"""
DEV float part_dot(const GLOBAL u8* w, const GLOBAL float* x, int p) {
  float acc = 0.0f, sum = 0.0f;
  for (int i = 4 * p; i < 4 * p + 4; i++) {
    acc += u8f(w[4 + i] & 15) * x[i] + u8f(w[4 + i] >> 4) * x[16 + i];
    sum += x[i] + x[16 + i];
  }
  return hf(w) * acc + hf(w + 2) * sum;
}
""",
    # Q4_K: part p is 8 values of the 32-value sub-block j = p >> 2: their nibbles from two 32-bit words (a 144-byte
    # block is 16-aligned), x as float4s
    "Q4_K": r"""
DEV float part_dot(const GLOBAL u8* w, const GLOBAL float* x, int p) {
  int j = p >> 2, c = p & 3, sc, mn, shift = (j & 1) * 4;
  scale_min(w + 4, j, &sc, &mn);
  const GLOBAL u32* q = (const GLOBAL u32*)(w + 16 + (j / 2) * 32 + 8 * c);
  x += j * 32 + 8 * c;
  float4 a = LD4(x), b = LD4(x + 4);
  float dot = byte_dot((q[0] >> shift) & 0x0f0f0f0fu, a) + byte_dot((q[1] >> shift) & 0x0f0f0f0fu, b);
  float sum = a.x + a.y + a.z + a.w + b.x + b.y + b.z + b.w;
  return hf(w) * (float)sc * dot - hf(w + 2) * (float)mn * sum;
}
""",
    # Q5_K: part p is the half p & 1 (16 values) of the 32-value sub-block j = p >> 1
    "Q5_K": r"""
DEV float part_dot(const GLOBAL u8* w, const GLOBAL float* x, int p) {
  int j = p >> 1, sc, mn, shift = (j & 1) * 4, i0 = 16 * (p & 1);
  scale_min(w + 4, j, &sc, &mn);
  x += j * 32;
  float dot = 0.0f, sum = 0.0f;
  for (int i = i0; i < i0 + 16; i++) {
    int q = ((w[48 + (j / 2) * 32 + i] >> shift) & 15) | (((w[16 + i] >> j) & 1) << 4);
    dot += u8f(q) * x[i];
    sum += x[i];
  }
  return hf(w) * (float)sc * dot - hf(w + 2) * (float)mn * sum;
}
""",
    # Q6_K: part p covers 16 values of the 32-value group (h, k) = (p >> 3, (p >> 1) & 3); one scale each
    "Q6_K": r"""
DEV float part_dot(const GLOBAL u8* w, const GLOBAL float* x, int p) {
  int h = p >> 3, k = (p >> 1) & 3, i0 = 16 * (p & 1), e0 = h * 128 + k * 32;
  float acc = 0.0f;
  for (int i = i0; i < i0 + 16; i++) {
    int lo = (w[h * 64 + (k & 1) * 32 + i] >> (4 * (k >> 1))) & 15, hi = (w[128 + h * 32 + i] >> (2 * k)) & 3;
    acc += (u8f(lo | (hi << 4)) - 32.0f) * x[e0 + i];
  }
  return hf(w + 208) * (float)((const GLOBAL i8*)(w + 192))[(e0 + i0) / 16] * acc;
}
""",
}

# the sum over the 32 lanes of a row, left in lane 0: warp shuffles in CUDA, local memory in OpenCL
_REDUCE = {
    "CUDA": "for (int o = 16; o > 0; o >>= 1) acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], o);",
    "CL": """part[lid] = acc[t];
    SYNC();
    for (int step = 16; step > 0; step >>= 1) {
      if (lane < step) part[lid] += part[lid + step];
      SYNC();
    }
    acc[t] = part[lid];
    SYNC();""",
}

ROWS = 4  # rows of W per workgroup (32 lanes each)
MT = 8  # rows of x per workgroup at most: each unpacked weight byte serves them all (prefill)

# a workgroup's warps take ROWS rows of W, or with GLU (the joined gate and up projections of a SwiGLU MLP: rows
# 0..N/2-1 and N/2..N-1) ROWS/2 gate rows and the matching up rows, whose sums meet in local memory; the output
# row o of NOUT is then silu(gate) * up. RES adds a residual of the output's shape.
_KERNEL = r"""
#define NOUT ({n} / (GLU ? 2 : 1))
#define PER (GLU ? {rows} / 2 : {rows})
KERNEL {name}(GLOBAL float* out, const GLOBAL float* x, const GLOBAL u8* w RES_ARG) {{
  /* group (g, h): output rows o = g * PER + warp % PER of W against rows m0 .. m0 + {mt} of x; {parts} lanes per
     block */
  {local}
  int lid = LANE(), lane = lid & 31, warp = lid >> 5, m0 = GROUP(1) * {mt};
  int o = GROUP(0) * PER + warp % PER, n = o + (warp >= PER ? NOUT : 0);
  float acc[{mt}];
  for (int t = 0; t < {mt}; t++) acc[t] = 0.0f;
  if (o < NOUT) {{
    const GLOBAL u8* row = w + (long)n * {rowb};
    for (int b = lane / {parts}; b < {nb}; b += 32 / {parts})
      for (int t = 0; t < {mt} && m0 + t < {m}; t++)
        acc[t] += part_dot(row + (long)b * {bb}, x + (long)(m0 + t) * {k} + b * {bs}, lane % {parts});
  }}
  for (int t = 0; t < {mt}; t++) {{
    {reduce}
  }}
#if GLU
  LOCAL_ARR(float, up, {rows} / 2 * {mt});
  if (lane == 0 && warp >= PER)
    for (int t = 0; t < {mt}; t++) up[(warp - PER) * {mt} + t] = acc[t];
  SYNC();
  if (warp >= PER) return;
#endif
  for (int t = 0; t < {mt}; t++) {{
    if (lane != 0 || o >= NOUT || m0 + t >= {m}) continue;
    float y = acc[t];
#if GLU
    y = y / (1.0f + QEXP(-y)) * up[warp * {mt} + t];
#endif
#if RES
    y += res[(long)(m0 + t) * NOUT + o];
#endif
    out[(long)(m0 + t) * NOUT + o] = y;
  }}
}}
"""


def gpu_launch(m: int, n: int, glu: bool = False) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(groups, items per group) of `qmm_*` over an (m, n) output (n: rows of W; with `glu` n/2 outputs)."""
    per = ROWS // 2 if glu else ROWS
    n_out = n // 2 if glu else n
    return ((n_out + per - 1) // per, (m + min(m, MT) - 1) // min(m, MT), 1), (32 * ROWS, 1, 1)


def gpu_source(qtype: str, m: int, n: int, k: int, lang: str, res: bool = False, glu: bool = False) -> str:
    """`lang` ("CL" or "CUDA") source of `qmm_{qtype}_{m}_{n}_{k}`, launched as `gpu_launch(m, n, glu)` says
    (`res`: a residual added, a third input; `glu`: silu(gate) * up of W's two halves of rows, see _KERNEL)."""
    if qtype not in _PART:
        raise ValueError(f"quantized matmul: no {lang} kernel for {qtype}; tg has {', '.join(_PART)}")
    bs, bb = CPU_TYPES[qtype]  # (elements, bytes) per block: the GGUF format's, the same on every device
    fields = dict(rows=ROWS, mt=min(m, MT), parts=PARTS[qtype], nb=k // bs, rowb=k // bs * bb, bb=bb, bs=bs, k=k)
    local = f"LOCAL_ARR(float, part, {ROWS * 32});" if lang == "CL" else ""
    name = f"qmm_{qtype}_{m}_{n}_{k}" + ("_res" if res else "") + ("_glu" if glu else "")
    body = _KERNEL.format(name=name, m=m, n=n, reduce=_REDUCE[lang], local=local, **fields)
    flags = f"#define GLU {int(glu)}\n#define RES {int(res)}\n"
    flags += "#define RES_ARG , const GLOBAL float* res\n" if res else "#define RES_ARG\n"
    return GPU_PRELUDE[lang] + _HF[lang] + _COMMON + _GPU_COMMON + _PART[qtype] + flags + body
