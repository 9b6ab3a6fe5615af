"""C source of the CPU's fused dequantize-and-multiply kernels over GGUF blocks (tg_nn.quant runs them).

`out (M, N) = x (M, K) @ W.T`, W (N, K) held as the file's blocks, row after row. The kernel quantizes the rows
of x to 8-bit blocks of 32 (a float scale each, and the scale times the sum of its integers), then takes each
dot product in integers, block by block, and scales it in float: the weights are read once, in their own bytes,
and never widened to float32 in memory. Rows of W are split over the threads of tg's CPU thread pool
(tg_codegen.renderer.threadpool), as tg's own kernels split their THREAD loops: the source defines the pointer
`tg_parallel`, which the CPU device points at the pool when it loads the library (unset: one thread).

Two bodies per type: AVX2 (`maddubs`/`madd`, or AVX512-VNNI's `dpbusd` where the compiler targets it), and a
generic one in plain C whose inner loops are `omp simd` (any target, gcc or clang). The arithmetic is the same:
integer sums of 32 products, so both give the same results up to the order of float additions.

>>> "void qmm_Q4_0_1_64_64(" in cpu_source("Q4_0", 1, 64, 64)
True
"""

from __future__ import annotations

__all__ = ["CPU_TYPES", "cpu_source"]

# type -> (elements per block, bytes per block)
CPU_TYPES: dict[str, tuple[int, int]] = {
    "Q8_0": (32, 34),
    "Q4_0": (32, 18),
    "Q4_1": (32, 20),
    "Q4_K": (256, 144),
    "Q5_K": (256, 176),
    "Q6_K": (256, 210),
}

# a product reading fewer weight bytes (times rows of x) than this runs on one thread: a call of tg's pool costs
# ~1-2 us (OpenMP's parallel region cost more, so this was 4 MiB, which left every decode matvec of SmolLM2 on one
# core); 64 KiB of Q4_1 take ~5 us on one core
PARALLEL_BYTES = 1 << 16
CHUNKS_PER_THREAD = 4  # chunks of rows per thread: the pool hands them out as threads come free (a busy machine)


def parallel_defines(m: int, n: int, row_bytes: int, threads: int) -> str:
    """`#define`s of the split over threads: CHUNKS pieces of the N weight rows (1: no threads), THREADS."""
    chunks = 1
    if threads > 1 and m * n * row_bytes >= PARALLEL_BYTES:
        chunks = max(1, min(n, threads * CHUNKS_PER_THREAD))
    return f"#define CHUNKS {chunks}\n#define THREADS {max(1, threads)}\n"


_PRELUDE = r"""
#include <stdint.h>
#include <string.h>
/* tg's CPU thread pool (set by the CPU device when it loads the library): runs chunk(args, 0..n-1) on threads */
void (*tg_parallel)(void (*chunk)(void*, int), void* args, int n, int threads);
static void tgq_parallel(void (*chunk)(void*, int), void* args, int n, int threads) {
  if (tg_parallel && n > 1) tg_parallel(chunk, args, n, threads);
  else for (int c = 0; c < n; c++) chunk(args, c);
}
#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
#include <immintrin.h>
#define TGQ_AVX2 1
#endif
static inline float tgq_h2f(const uint8_t* p) {
  uint16_t h;
  memcpy(&h, p, 2);  /* (little-endian hosts: every target tg's CPU device runs on) */
#ifdef TGQ_AVX2
  return _cvtsh_ss(h);
#else
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 0x3ffu, bits;
  float f;
  if (e == 0) { f = (float)m * (1.0f / 16777216.0f); return sign ? -f : f; }
  bits = e == 31 ? (sign | 0x7f800000u | (m << 13)) : (sign | ((e + 112u) << 23) | (m << 13));
  memcpy(&f, &bits, 4);
  return f;
#endif
}
/* x rows -> 8-bit blocks of 32: q = round(x / d), d = max|x| / 127; s = d * sum(q) */
static void tgq_quantize(const float* restrict x, int8_t* restrict q, float* restrict d, float* restrict s, int n) {
  for (int b = 0; b < n / 32; b++) {
    const float* xb = x + b * 32;
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) { float a = xb[i] < 0 ? -xb[i] : xb[i]; amax = a > amax ? a : amax; }
    float db = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int i = 0; i < 32; i++) {
      float v = xb[i] * inv;
      int r = (int)(v + (v >= 0 ? 0.5f : -0.5f));
      q[b * 32 + i] = (int8_t)r;
      sum += r;
    }
    d[b] = db;
    s[b] = db * (float)sum;
  }
}
#ifdef TGQ_AVX2
static inline __m256i tgq_dot(__m256i u, __m256i s) { /* unsigned bytes . signed bytes, 8 int32 sums of 4 */
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}
static inline __m256i tgq_nibbles(const uint8_t* p) { /* 16 bytes -> 32: the low nibbles, then the high ones */
  __m128i b = _mm_loadu_si128((const __m128i*)p), m = _mm_set1_epi8(15);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m));
}
static inline float tgq_hsum(__m256 v) {
  __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_add_ps(a, _mm_movehl_ps(a, a));
  a = _mm_add_ss(a, _mm_movehdup_ps(a));
  return _mm_cvtss_f32(a);
}
#endif
/* the 6-bit scale and min of sub-block j of a Q4_K/Q5_K block's 12 scale bytes */
static inline void tgq_scale_min(const uint8_t* s, int j, int* sc, int* mn) {
  if (j < 4) { *sc = s[j] & 63; *mn = s[j + 4] & 63; }
  else { *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4); *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4); }
}
"""

# Each row dot: `static inline float tgq_row(const uint8_t* w, const int8_t* q, const float* d, const float* s)`
# over NB blocks of one weight row and the matching 8-bit blocks of one row of x.
_ROW = {
    "Q8_0": r"""
static inline float tgq_row(const uint8_t* restrict w, const int8_t* restrict q, const float* restrict d,
                            const float* restrict s) {
  (void)s;
  float acc = 0.0f;
  for (int b = 0; b < NB; b++, w += 34) {
    const int8_t* wq = (const int8_t*)(w + 2);
    int sum = 0;
#pragma omp simd reduction(+:sum)
    for (int i = 0; i < 32; i++) sum += wq[i] * q[b * 32 + i];
    acc += tgq_h2f(w) * d[b] * (float)sum;
  }
  return acc;
}
""",
    "Q4_0": r"""
static inline float tgq_row(const uint8_t* restrict w, const int8_t* restrict q, const float* restrict d,
                            const float* restrict s) {
  float low = 0.0f;  /* the -8 offset: -8 * d_w * (d_x * sum(q_x)) */
  float acc = 0.0f;
  for (int b = 0; b < NB; b++, w += 18) {
    float dw = tgq_h2f(w);
    int sum = 0;
#pragma omp simd reduction(+:sum)
    for (int i = 0; i < 16; i++) sum += (w[2 + i] & 15) * q[b * 32 + i] + (w[2 + i] >> 4) * q[b * 32 + 16 + i];
    acc += dw * d[b] * (float)sum;
    low += dw * s[b];
  }
  return acc - 8.0f * low;
}
""",
    "Q4_1": r"""
static inline float tgq_row(const uint8_t* restrict w, const int8_t* restrict q, const float* restrict d,
                            const float* restrict s) {
  float mins = 0.0f;  /* m_w * d_x * sum(q_x) */
  float acc = 0.0f;
  for (int b = 0; b < NB; b++, w += 20) {
    int sum = 0;
#pragma omp simd reduction(+:sum)
    for (int i = 0; i < 16; i++) sum += (w[4 + i] & 15) * q[b * 32 + i] + (w[4 + i] >> 4) * q[b * 32 + 16 + i];
    acc += tgq_h2f(w) * d[b] * (float)sum;
    mins += tgq_h2f(w + 2) * s[b];
  }
  return acc + mins;
}
""",
    "Q4_K": r"""
static inline float tgq_row(const uint8_t* restrict w, const int8_t* restrict q, const float* restrict d,
                            const float* restrict s) {
  float acc = 0.0f, mins = 0.0f;
  for (int b = 0; b < NB; b++, w += 144) {
    float dw = tgq_h2f(w), dmin = tgq_h2f(w + 2);
    const uint8_t* qs = w + 16;
    for (int j = 0; j < 8; j++) {
      int sc, mn, x = b * 8 + j, sum = 0;
      tgq_scale_min(w + 4, j, &sc, &mn);
      const uint8_t* c = qs + (j / 2) * 32;
      const int8_t* xq = q + x * 32;
#ifdef TGQ_AVX2
      __m256i u = _mm256_loadu_si256((const __m256i*)c);
      u = _mm256_and_si256(j & 1 ? _mm256_srli_epi16(u, 4) : u, _mm256_set1_epi8(15));
      __m256i p = tgq_dot(u, _mm256_loadu_si256((const __m256i*)xq));
      __m128i h = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
      h = _mm_hadd_epi32(h, h);
      sum = _mm_cvtsi128_si32(_mm_hadd_epi32(h, h));
#else
      int shift = (j & 1) * 4;
#pragma omp simd reduction(+:sum)
      for (int i = 0; i < 32; i++) sum += ((c[i] >> shift) & 15) * xq[i];
#endif
      acc += dw * (float)sc * d[x] * (float)sum;
      mins += dmin * (float)mn * s[x];
    }
  }
  return acc - mins;
}
""",
    "Q5_K": r"""
static inline float tgq_row(const uint8_t* restrict w, const int8_t* restrict q, const float* restrict d,
                            const float* restrict s) {
  float acc = 0.0f, mins = 0.0f;
  for (int b = 0; b < NB; b++, w += 176) {
    float dw = tgq_h2f(w), dmin = tgq_h2f(w + 2);
    const uint8_t *qh = w + 16, *qs = w + 48;
    for (int j = 0; j < 8; j++) {
      int sc, mn, x = b * 8 + j, sum = 0;
      tgq_scale_min(w + 4, j, &sc, &mn);
      const uint8_t* c = qs + (j / 2) * 32;
      const int8_t* xq = q + x * 32;
#ifdef TGQ_AVX2
      __m256i u = _mm256_loadu_si256((const __m256i*)c), hb = _mm256_loadu_si256((const __m256i*)qh);
      u = _mm256_and_si256(j & 1 ? _mm256_srli_epi16(u, 4) : u, _mm256_set1_epi8(15));
      hb = _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(j)), _mm256_set1_epi8(1));
      u = _mm256_or_si256(u, _mm256_slli_epi16(hb, 4));
      __m256i p = tgq_dot(u, _mm256_loadu_si256((const __m256i*)xq));
      __m128i h = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
      h = _mm_hadd_epi32(h, h);
      sum = _mm_cvtsi128_si32(_mm_hadd_epi32(h, h));
#else
      int shift = (j & 1) * 4;
#pragma omp simd reduction(+:sum)
      for (int i = 0; i < 32; i++) sum += (((c[i] >> shift) & 15) | (((qh[i] >> j) & 1) << 4)) * xq[i];
#endif
      acc += dw * (float)sc * d[x] * (float)sum;
      mins += dmin * (float)mn * s[x];
    }
  }
  return acc - mins;
}
""",
    "Q6_K": r"""
static inline float tgq_row(const uint8_t* restrict w, const int8_t* restrict q, const float* restrict d,
                            const float* restrict s) {
  (void)s;
  float acc = 0.0f;
  for (int b = 0; b < NB; b++, w += 210) {
    float dw = tgq_h2f(w + 208);
    const int8_t* sc = (const int8_t*)(w + 192);
    for (int h = 0; h < 2; h++) {
      for (int k = 0; k < 4; k++) {  /* 32 values: low nibbles of ql, two bits of qh each */
        int x = b * 8 + h * 4 + k, lo = 0, hi = 0;
        const uint8_t *ql = w + h * 64 + (k & 1) * 32, *qh = w + 128 + h * 32;
        const int8_t* xq = q + x * 32;
#ifdef TGQ_AVX2
        __m256i l = _mm256_loadu_si256((const __m256i*)ql), hb = _mm256_loadu_si256((const __m256i*)qh);
        l = _mm256_and_si256(k >> 1 ? _mm256_srli_epi16(l, 4) : l, _mm256_set1_epi8(15));
        hb = _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(2 * k)), _mm256_set1_epi8(3));
        __m256i xv = _mm256_loadu_si256((const __m256i*)xq);
        __m256i p = _mm256_sub_epi32(tgq_dot(_mm256_or_si256(l, _mm256_slli_epi16(hb, 4)), xv),
                                     tgq_dot(_mm256_set1_epi8(32), xv));
        __m128i a = _mm256_castsi256_si128(p), c = _mm256_extracti128_si256(p, 1);
        a = _mm_hadd_epi32(a, a); c = _mm_hadd_epi32(c, c);
        lo = _mm_cvtsi128_si32(_mm_hadd_epi32(a, a));
        hi = _mm_cvtsi128_si32(_mm_hadd_epi32(c, c));
#else
        int ls = 4 * (k >> 1), hs = 2 * k;
#pragma omp simd reduction(+:lo)
        for (int i = 0; i < 16; i++) lo += ((((ql[i] >> ls) & 15) | (((qh[i] >> hs) & 3) << 4)) - 32) * xq[i];
#pragma omp simd reduction(+:hi)
        for (int i = 16; i < 32; i++) hi += ((((ql[i] >> ls) & 15) | (((qh[i] >> hs) & 3) << 4)) - 32) * xq[i];
#endif
        int si = h * 8 + k * 2;
        acc += dw * d[x] * ((float)sc[si] * (float)lo + (float)sc[si + 1] * (float)hi);
      }
    }
  }
  return acc;
}
""",
}

# The 32-value types on AVX2, from two templates each: `unpack` reads the block at {W} into u{j} (unsigned bytes)
# and its scale(s); `dot` adds its product with the x row at offset {X} (block {B}, scales at {XS}) to {A}, and the
# offset term to {O}. tgq_row runs two blocks at a time into two accumulators (the adds of one chain wait for each
# other); tgq_rows4 multiplies each unpacked block with four rows of x (a prompt's or a batched step's product), each
# row by tgq_row's operations in tgq_row's order (even blocks into one accumulator, odd ones into another), so a row
# gets the same bits alone or beside others (a batched decode step gives a sequence its one-sequence tokens).
_BLOCKS32 = {
    "Q8_0": (
        "__m256i wq{j} = _mm256_loadu_si256((const __m256i*)({W} + 2)), u{j} = _mm256_sign_epi8(wq{j}, wq{j});"
        " float dw{j} = tgq_h2f({W});",
        "{{ __m256i xq = _mm256_loadu_si256((const __m256i*)(q + {X}{B} * 32));"
        " {A} = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tgq_dot(u{j}, _mm256_sign_epi8(xq, wq{j}))),"
        " _mm256_set1_ps(dw{j} * d[{XS}{B}]), {A}); }}",
    ),
    "Q4_0": (
        "__m256i u{j} = tgq_nibbles({W} + 2); float dw{j} = tgq_h2f({W});",
        "{{ __m256i xq = _mm256_loadu_si256((const __m256i*)(q + {X}{B} * 32));"
        " {A} = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tgq_dot(u{j}, xq)),"
        " _mm256_set1_ps(dw{j} * d[{XS}{B}]), {A}); {O} -= 8.0f * dw{j} * s[{XS}{B}]; }}",
    ),
    "Q4_1": (
        "__m256i u{j} = tgq_nibbles({W} + 4); float dw{j} = tgq_h2f({W}), mw{j} = tgq_h2f({W} + 2);",
        "{{ __m256i xq = _mm256_loadu_si256((const __m256i*)(q + {X}{B} * 32));"
        " {A} = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tgq_dot(u{j}, xq)),"
        " _mm256_set1_ps(dw{j} * d[{XS}{B}]), {A}); {O} += mw{j} * s[{XS}{B}]; }}",
    ),
}

_ROW32 = r"""
#ifdef TGQ_AVX2
#define TGQ_ROW 1
static inline float tgq_row(const uint8_t* restrict w, const int8_t* restrict q, const float* restrict d,
                            const float* restrict s) {{
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
  float off0 = 0.0f, off1 = 0.0f;
  int b = 0;
  for (; b + 2 <= NB; b += 2, w += 2 * BB) {{
    {u0} {u1}
    {d0} {d1}
  }}
  if (b < NB) {{
    {u0}
    {d0}
  }}
  return tgq_hsum(_mm256_add_ps(acc0, acc1)) + off0 + off1;
}}
static inline void tgq_rows4(const uint8_t* restrict w, const int8_t* restrict q, const float* restrict d,
                             const float* restrict s, float* restrict out) {{
  /* each row's even blocks into e*, its odd ones into o*: tgq_row's additions in tgq_row's order */
  __m256 e0 = _mm256_setzero_ps(), e1 = e0, e2 = e0, e3 = e0, o0 = e0, o1 = e0, o2 = e0, o3 = e0;
  float f0 = 0.0f, f1 = 0.0f, f2 = 0.0f, f3 = 0.0f, g0 = 0.0f, g1 = 0.0f, g2 = 0.0f, g3 = 0.0f;
  int b = 0;
  for (; b + 2 <= NB; b += 2, w += 2 * BB) {{
    {u0} {u1}
    {r0} {r1} {r2} {r3}
    {s0} {s1} {s2} {s3}
  }}
  if (b < NB) {{
    {u0}
    {r0} {r1} {r2} {r3}
  }}
  out[0] = tgq_hsum(_mm256_add_ps(e0, o0)) + f0 + g0; out[N] = tgq_hsum(_mm256_add_ps(e1, o1)) + f1 + g1;
  out[2 * N] = tgq_hsum(_mm256_add_ps(e2, o2)) + f2 + g2;
  out[3 * N] = tgq_hsum(_mm256_add_ps(e3, o3)) + f3 + g3;
}}
#define TGQ_ROWS4 1
#else
{generic}
#endif
"""


def _row32(qtype: str) -> str:
    """tgq_row and tgq_rows4 of a 32-value type: AVX2 from _BLOCKS32, else the generic tgq_row of _ROW."""
    unpack, dot = _BLOCKS32[qtype]
    return _ROW32.format(
        u0=unpack.format(j=0, W="w"),
        u1=unpack.format(j=1, W="(w + BB)"),
        d0=dot.format(j=0, A="acc0", O="off0", X="", XS="", B="b"),
        d1=dot.format(j=1, A="acc1", O="off1", X="", XS="", B="(b + 1)"),
        **{
            f"{kind}{r}": dot.format(
                j=j, A=f"{acc}{r}", O=f"{off}{r}", X=f"{r} * K + ", XS=f"{r} * (K / 32) + ", B=block
            )
            for kind, j, acc, off, block in (("r", 0, "e", "f", "b"), ("s", 1, "o", "g", "(b + 1)"))
            for r in range(4)
        },
        generic=_ROW[qtype],
    )


_KERNEL = r"""
#define NB (K / BS)
{row}
struct tgq_args {{ float* out; const uint8_t* w; const int8_t* q; const float* d; const float* s; int m0, mc; }};
static void tgq_chunk(void* p, int c) {{  /* weight rows c * N / CHUNKS .. (c + 1) * N / CHUNKS - 1 */
  const struct tgq_args* a = (const struct tgq_args*)p;
  int mc = a->mc, n1 = (int)((long)(c + 1) * N / CHUNKS);
  for (int n = (int)((long)c * N / CHUNKS); n < n1; n++) {{
    const uint8_t* wr = a->w + (long)n * ROWB;
    float* o = a->out + (long)a->m0 * N + n;
    int m = 0;
#ifdef TGQ_ROWS4
    for (; m + 4 <= mc; m += 4) tgq_rows4(wr, a->q + m * K, a->d + m * (K / 32), a->s + m * (K / 32), o + (long)m * N);
#endif
    for (; m < mc; m++) o[(long)m * N] = tgq_row(wr, a->q + m * K, a->d + m * (K / 32), a->s + m * (K / 32));
  }}
}}
void {name}(float* restrict out, const float* restrict x, const uint8_t* restrict w) {{
  /* x in chunks of MC rows, quantized on the stack; each chunk times every weight row, rows over the threads */
  int8_t q[MC * K];
  float d[MC * K / 32], s[MC * K / 32];
  for (int m0 = 0; m0 < M; m0 += MC) {{
    int mc = M - m0 < MC ? M - m0 : MC;
    for (int m = 0; m < mc; m++) tgq_quantize(x + (long)(m0 + m) * K, q + m * K, d + m * (K / 32), s + m * (K / 32), K);
    struct tgq_args a = {{out, w, q, d, s, m0, mc}};
    tgq_parallel(tgq_chunk, &a, CHUNKS, THREADS);
  }}
}}
"""


def cpu_source(qtype: str, m: int, n: int, k: int, threads: int = 1, generic: bool = False) -> str:
    """C source of `qmm_{qtype}_{m}_{n}_{k}(out, x, w)`: out (m, n) = x (m, k) @ W.T, W (n, k) as `qtype` blocks,
    on up to `threads` threads; `generic`: the plain C body even where the target has AVX2 (tests run both)."""
    if qtype not in CPU_TYPES:
        raise ValueError(f"quantized matmul: no CPU kernel for {qtype}; tg has {', '.join(CPU_TYPES)}")
    bs, bb = CPU_TYPES[qtype]
    if k % bs:
        raise ValueError(f"quantized matmul: rows of {k} are not whole {qtype} blocks of {bs}")
    mc = max(1, min(m, (1 << 18) // k))  # at most 256 KiB of quantized x on the stack at a time
    defines = (
        f"#define M {m}\n#define N {n}\n#define K {k}\n#define BS {bs}\n#define ROWB {k // bs * bb}\n#define MC {mc}\n"
        f"#define BB {bb}\n" + parallel_defines(m, n, k // bs * bb, threads)
    )
    row = _row32(qtype) if qtype in _BLOCKS32 else _ROW[qtype]
    body = _KERNEL.format(row=row, name=f"qmm_{qtype}_{m}_{n}_{k}")
    return _PRELUDE + ("#undef TGQ_AVX2\n" if generic else "") + defines + body
