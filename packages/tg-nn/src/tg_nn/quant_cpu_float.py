"""C source of the CPU's fused dequantize-and-multiply kernels with float32 activations (tg_nn.quant's default).

The same product as tg_nn.quant_cpu (`out (M, N) = x (M, K) @ W.T`, W in GGUF blocks read as they are), but x is
used as it is, in float32: each block's values are widened to floats in registers and multiplied with x, so the
result is the float product of the dequantized weights, up to the order of additions (what a float32 reference
computes; quant_cpu's 8-bit rounding of x, llama.cpp's numerics, is faster and moves results by ~0.5%).

AVX2 bodies for Q8_0/Q4_0/Q4_1 (8 floats at a time); the K-quants, and every type on other targets, go through
the per-value unpacking of tg_nn.quant_gpu's block_dot, compiled as C.

>>> "void qmm_f_Q4_1_1_64_64(" in cpu_float_source("Q4_1", 1, 64, 64)
True
"""

from __future__ import annotations

from tg_nn.quant_cpu import _PRELUDE, CPU_TYPES, parallel_defines
from tg_nn.quant_gpu import _BLOCK, _COMMON

__all__ = ["cpu_float_source"]

_C = r"""
#define DEV static inline
#define GLOBAL
#define BITS_F(u) tgq_bits_f(u)
typedef unsigned char u8; typedef signed char i8; typedef unsigned int u32;
static inline float tgq_bits_f(u32 u) { float f; memcpy(&f, &u, 4); return f; }
#ifdef TGQ_AVX2
static inline __m256 tgq_fdot(__m128i lo, __m128i hi, int is_signed, const float* x) {
  /* 32 bytes (lo: values 0..15, hi: 16..31) widened to floats and multiplied with x[0..31] */
  __m256i a = is_signed ? _mm256_cvtepi8_epi32(lo) : _mm256_cvtepu8_epi32(lo);
  __m256i b = is_signed ? _mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)) : _mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8));
  __m256i c = is_signed ? _mm256_cvtepi8_epi32(hi) : _mm256_cvtepu8_epi32(hi);
  __m256i d = is_signed ? _mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)) : _mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8));
  __m256 s = _mm256_mul_ps(_mm256_cvtepi32_ps(a), _mm256_loadu_ps(x));
  s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(b), _mm256_loadu_ps(x + 8), s);
  s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c), _mm256_loadu_ps(x + 16), s);
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_loadu_ps(x + 24), s);
}
#endif
"""

# AVX2 row dots of the 32-value types: `xs` holds the sum of each 32 values of x (the offsets' factor)
_ROWF = {
    "Q8_0": r"""
  for (int b = 0; b < NB; b++, w += 34) {
    __m128i lo = _mm_loadu_si128((const __m128i*)(w + 2)), hi = _mm_loadu_si128((const __m128i*)(w + 18));
    acc = _mm256_fmadd_ps(tgq_fdot(lo, hi, 1, x + b * 32), _mm256_set1_ps(tgq_h2f(w)), acc);
  }
""",
    "Q4_0": r"""
  for (int b = 0; b < NB; b++, w += 18) {
    __m128i q = _mm_loadu_si128((const __m128i*)(w + 2)), m = _mm_set1_epi8(15);
    float dw = tgq_h2f(w);
    acc = _mm256_fmadd_ps(tgq_fdot(_mm_and_si128(q, m), _mm_and_si128(_mm_srli_epi16(q, 4), m), 0, x + b * 32),
                          _mm256_set1_ps(dw), acc);
    off -= 8.0f * dw * xs[b];
  }
""",
    "Q4_1": r"""
  for (int b = 0; b < NB; b++, w += 20) {
    __m128i q = _mm_loadu_si128((const __m128i*)(w + 4)), m = _mm_set1_epi8(15);
    acc = _mm256_fmadd_ps(tgq_fdot(_mm_and_si128(q, m), _mm_and_si128(_mm_srli_epi16(q, 4), m), 0, x + b * 32),
                          _mm256_set1_ps(tgq_h2f(w)), acc);
    off += tgq_h2f(w + 2) * xs[b];
  }
""",
}

_KERNEL = r"""
#define NB (K / BS)
static inline float tgq_rowf(const uint8_t* restrict w, const float* restrict x, const float* restrict xs) {{
  (void)xs;
#if defined(TGQ_AVX2) && {fast}
  __m256 acc = _mm256_setzero_ps();
  float off = 0.0f;
{avx}
  return tgq_hsum(acc) + off;
#else
  float acc = 0.0f;
  for (int b = 0; b < NB; b++) acc += block_dot(w + (long)b * BB, x + (long)b * BS);
  return acc;
#endif
}}
struct tgq_args {{ float* out; const float* x; const uint8_t* w; const float* xs; int m0, mc; }};
static void tgq_chunk(void* p, int c) {{  /* weight rows c * N / CHUNKS .. (c + 1) * N / CHUNKS - 1 */
  const struct tgq_args* a = (const struct tgq_args*)p;
  int n1 = (int)((long)(c + 1) * N / CHUNKS);
  for (int n = (int)((long)c * N / CHUNKS); n < n1; n++)
    for (int m = 0; m < a->mc; m++)
      a->out[(long)(a->m0 + m) * N + n] = tgq_rowf(a->w + (long)n * ROWB, a->x + (long)m * K, a->xs + m * (K / 32));
}}
void {name}(float* restrict out, const float* restrict x, const uint8_t* restrict w) {{
  float xs[MC * (K / 32)];  /* the sum of each 32 values of x, for MC rows at a time */
  for (int m0 = 0; m0 < M; m0 += MC) {{
    int mc = M - m0 < MC ? M - m0 : MC;
    const float* xm = x + (long)m0 * K;
    for (int i = 0; i < mc * (K / 32); i++) {{
      float s = 0.0f;
      for (int j = 0; j < 32; j++) s += xm[i * 32 + j];
      xs[i] = s;
    }}
    struct tgq_args a = {{out, xm, w, xs, m0, mc}};
    tgq_parallel(tgq_chunk, &a, CHUNKS, THREADS);
  }}
}}
"""


def cpu_float_source(qtype: str, m: int, n: int, k: int, threads: int = 1, generic: bool = False) -> str:
    """C source of `qmm_f_{qtype}_{m}_{n}_{k}(out, x, w)`: out (m, n) = x (m, k) @ W.T in float32 activations,
    W (n, k) as `qtype` blocks, on up to `threads` threads; `generic`: the plain C body even where AVX2 is there."""
    if qtype not in CPU_TYPES:
        raise ValueError(f"quantized matmul: no CPU kernel for {qtype}; tg has {', '.join(CPU_TYPES)}")
    bs, bb = CPU_TYPES[qtype]
    if k % bs:
        raise ValueError(f"quantized matmul: rows of {k} are not whole {qtype} blocks of {bs}")
    mc = max(1, min(m, (1 << 16) // (k // 32)))  # at most 256 KiB of block sums on the stack at a time
    defines = (
        f"#define M {m}\n#define N {n}\n#define K {k}\n#define BS {bs}\n#define BB {bb}\n#define ROWB {k // bs * bb}\n"
        f"#define MC {mc}\n" + parallel_defines(m, n, k // bs * bb, threads)
    )
    body = _KERNEL.format(fast=int(qtype in _ROWF), avx=_ROWF.get(qtype, ""), name=f"qmm_f_{qtype}_{m}_{n}_{k}")
    prelude = _PRELUDE + ("#undef TGQ_AVX2\n" if generic else "")
    return prelude + _C + _COMMON + _BLOCK[qtype] + defines + body
