"""C source of the CPU's fused dequantize-and-multiply kernels with float32 activations (tg_nn.quant's default).

The same product as tg_nn.quant_cpu (`out (M, N) = x (M, K) @ W.T`, W in GGUF blocks read as they are), but x is
used as it is, in float32: each block's values are widened to floats in registers and multiplied with x, so the
result is the float product of the dequantized weights, up to the order of additions (what a float32 reference
computes; quant_cpu's 8-bit rounding of x, llama.cpp's numerics, is faster and moves results by ~0.5%).

Q8_0/Q4_0/Q4_1 have vector bodies. On AVX-512 (16 floats at a time) register tiles: each block is unpacked once (a
4-bit type by a table lookup, `vpermps`) for 8 rows of x (a prompt's) or, for a vector (a decode step's), 4 weight
rows are read side by side, with the next tile's rows prefetched; the rows left after the 8-row tiles (a batched
decode step's 2-7, a prompt's remainder) go through one tile of that many rows, not one pass per row (Q4_1 3072x576
on one Zen 4 core: 5 rows 2.2x the time of one row, against 5x). On AVX2 (8 floats) each block is widened once for
4 rows of x. The unpacking, not the memory, bounds these kernels on one core (Q4_1 on a Zen 4 core: AVX2 7.7 GB/s,
AVX-512 10 GB/s, a 128-row prompt 56 against 91 GFLOP/s). Either way every row's operations are the same as when
it is multiplied alone, so a row's result does not depend on the rows beside it. The K-quants, and every type on
other targets, go through the per-value unpacking of tg_nn.quant_gpu's block_dot, compiled as C.

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
#if defined(TGQ_AVX2) && defined(__AVX512F__)
#define TGQ_AVX512 1
#endif
#ifdef TGQ_AVX2
static inline void tgq_widen(__m128i lo, __m128i hi, int is_signed, __m256* w) {
  /* 32 bytes (lo: values 0..15, hi: 16..31) widened to 4 vectors of 8 floats */
  __m256i a = is_signed ? _mm256_cvtepi8_epi32(lo) : _mm256_cvtepu8_epi32(lo);
  __m256i b = is_signed ? _mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)) : _mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8));
  __m256i c = is_signed ? _mm256_cvtepi8_epi32(hi) : _mm256_cvtepu8_epi32(hi);
  __m256i d = is_signed ? _mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)) : _mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8));
  w[0] = _mm256_cvtepi32_ps(a); w[1] = _mm256_cvtepi32_ps(b);
  w[2] = _mm256_cvtepi32_ps(c); w[3] = _mm256_cvtepi32_ps(d);
}
static inline void tgq_scale(__m256* w, float d) {  /* the widened block times its scale */
  __m256 dv = _mm256_set1_ps(d);
  w[0] = _mm256_mul_ps(w[0], dv); w[1] = _mm256_mul_ps(w[1], dv); w[2] = _mm256_mul_ps(w[2], dv);
  w[3] = _mm256_mul_ps(w[3], dv);
}
static inline void tgq_fma(const __m256* w, const float* x, __m256* a, __m256* b) {  /* a, b += w . x[0..31] */
  *a = _mm256_fmadd_ps(w[0], _mm256_loadu_ps(x), *a);
  *b = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(x + 8), *b);
  *a = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(x + 16), *a);
  *b = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(x + 24), *b);
}
#endif
"""

# AVX2 bodies of the 32-value types: `unpack` widens block `w` into `wv` (and reads its scale `dw`, offset `mw`);
# `update` adds its product with row r of x (`xr`, at block b; `xsr`: the sums of each 32 values of that row) to
# that row's accumulators. A row's operations are the same whether it is multiplied alone or beside others.
_ROWF = {
    "Q8_0": (
        "__m256 wv[4]; tgq_widen(_mm_loadu_si128((const __m128i*)(w + 2)), _mm_loadu_si128((const __m128i*)(w + 18)),"
        " 1, wv); tgq_scale(wv, tgq_h2f(w));",
        "tgq_fma(wv, xr + b * 32, &acc[r], &acc2[r]);",
    ),
    "Q4_0": (
        "__m128i q = _mm_loadu_si128((const __m128i*)(w + 2)), m = _mm_set1_epi8(15); __m256 wv[4];"
        " tgq_widen(_mm_and_si128(q, m), _mm_and_si128(_mm_srli_epi16(q, 4), m), 0, wv); float dw = tgq_h2f(w);"
        " tgq_scale(wv, dw);",
        "tgq_fma(wv, xr + b * 32, &acc[r], &acc2[r]); off[r] -= 8.0f * dw * xsr[b];",
    ),
    "Q4_1": (
        "__m128i q = _mm_loadu_si128((const __m128i*)(w + 4)), m = _mm_set1_epi8(15); __m256 wv[4];"
        " tgq_widen(_mm_and_si128(q, m), _mm_and_si128(_mm_srli_epi16(q, 4), m), 0, wv);"
        " float mw = tgq_h2f(w + 2); tgq_scale(wv, tgq_h2f(w));",
        "tgq_fma(wv, xr + b * 32, &acc[r], &acc2[r]); off[r] += mw * xsr[b];",
    ),
}

# tgq_rowsf{R}: weight row w times R rows of x (K apart; their block sums K / 32 apart) into out[0], out[N], ...
_ROWS = r"""
static inline void tgq_rowsf{R}(const uint8_t* restrict w, const float* restrict x, const float* restrict xs,
                                float* restrict out) {{
  __m256 acc[{R}], acc2[{R}];  /* two chains of additions per row */
  float off[{R}];
#pragma GCC unroll 4
  for (int r = 0; r < {R}; r++) {{ acc[r] = acc2[r] = _mm256_setzero_ps(); off[r] = 0.0f; }}
  for (int b = 0; b < NB; b++, w += BB) {{
    {unpack}
    (void)xs;
#pragma GCC unroll 4
    for (int r = 0; r < {R}; r++) {{
      const float* xr = x + (long)r * K;
      const float* xsr = xs + r * (K / 32);
      (void)xsr;
      {update}
    }}
  }}
#pragma GCC unroll 4
  for (int r = 0; r < {R}; r++) out[(long)r * N] = tgq_hsum(_mm256_add_ps(acc[r], acc2[r])) + off[r];
}}
"""

# AVX-512 bodies (where the compiler targets AVX-512F): 16 floats a register, so a 32-value block is two registers,
# w0 (values 0..15) and w1 (16..31), unpacked from the block at `w`. Q4_0/Q4_1 look each 4-bit value up in a table of
# the block's 16 possible weights (d * q + m, or d * (q - 8)), one `vpermps` per 16 values (which reads the low 4 bits
# of each index), in place of widening, converting and scaling each value; Q8_0 widens its bytes and scales them.
_UNPACK512 = {
    "Q8_0": "__m512 dv{j} = _mm512_set1_ps(tgq_h2f(w{j})), w0_{j} = tgq_widen16(w{j} + 2, dv{j}),"
    " w1_{j} = tgq_widen16(w{j} + 18, dv{j});",
    "Q4_0": "__m512 w0_{j}, w1_{j};"
    " tgq_lookup(w{j} + 2, _mm512_mul_ps(_mm512_sub_ps(tgq_iota16(), _mm512_set1_ps(8.0f)),"
    " _mm512_set1_ps(tgq_h2f(w{j}))), &w0_{j}, &w1_{j});",
    "Q4_1": "__m512 w0_{j}, w1_{j};"
    " tgq_lookup(w{j} + 4, _mm512_fmadd_ps(tgq_iota16(), _mm512_set1_ps(tgq_h2f(w{j})),"
    " _mm512_set1_ps(tgq_h2f(w{j} + 2))), &w0_{j}, &w1_{j});",
}
TILE_X = 8  # rows of x in a prompt's register tile (times 2 weight rows; up to 4 rows of x times 4 weight rows)


def _tile512(qtype: str, wr: int, xr: int) -> str:
    """C of `tgq_tile_{wr}_{xr}(w, x, out)`: `wr` weight rows (ROWB bytes apart) times `xr` rows of x (K apart) into
    out[r * N + j], every pair in one accumulator register: its operations (two FMAs a block, then the sum of the
    register's lanes) are the same in every tile, so a row of x gets the same bits alone or beside others."""
    lines = [
        f"static inline void tgq_tile_{wr}_{xr}(const uint8_t* restrict w, const float* restrict x, "
        "float* restrict out) {"
    ]
    lines += [f"  __m512 a{j}_{r} = _mm512_setzero_ps();" for j in range(wr) for r in range(xr)]
    lines += [f"  const uint8_t* w{j} = w + {j} * ROWB;" for j in range(wr)]
    lines.append(f"  for (int b = 0; b < NB; b++{''.join(f', w{j} += BB' for j in range(wr))}) {{")
    if wr > 1:  # the next tile's rows, as far ahead as this tile reads (the streams of 4 rows prefetch poorly)
        lines.append(f"    _mm_prefetch((const char*)(w + {wr} * ROWB + (b * {wr} * BB)), _MM_HINT_T0);")
        lines.append(f"    _mm_prefetch((const char*)(w + {wr} * ROWB + (b * {wr} * BB) + 64), _MM_HINT_T0);")
    lines += ["    " + _UNPACK512[qtype].format(j=j) for j in range(wr)]
    for r in range(xr):
        lines.append(f"    {{ const float* xr = x + {r} * K + b * 32;")
        lines.append("      __m512 x0 = _mm512_loadu_ps(xr), x1 = _mm512_loadu_ps(xr + 16);")
        for j in range(wr):
            lines.append(f"      a{j}_{r} = _mm512_fmadd_ps(w1_{j}, x1, _mm512_fmadd_ps(w0_{j}, x0, a{j}_{r}));")
        lines.append("    }")
    lines.append("  }")
    lines += [f"  out[{r} * N + {j}] = _mm512_reduce_add_ps(a{j}_{r});" for j in range(wr) for r in range(xr)]
    lines.append("}")
    return "\n".join(lines) + "\n"


def _left_rows(m: int, mc: int, xrows: int) -> list[int]:
    """The counts of rows of x, below TILE_X, that the chunk loop leaves after its TILE_X-row tiles (blocks of up to
    `mc` rows of the m, each in runs of up to `xrows`)."""
    left = set()
    for m0 in range(0, m, mc):
        rows = min(mc, m - m0)
        left |= {(min(rows, mb + xrows) - mb) % TILE_X for mb in range(0, rows, xrows)}
    return sorted(left - {0})


def _tiles512(qtype: str, m: int, mc: int, xrows: int) -> str:
    """The tiles the AVX-512 chunk loop uses: TW weight rows (4 for a few rows of x, a decode step's; 2 for more) or
    1, times TILE_X rows of x or the rows left after them, all in one tile (`tgq_tail_TW`/`tgq_tail_1`: a switch on
    their count; 5 rows of x cost one unpacking of each block, not five)."""
    tw = 4 if m <= 4 else 2
    left = _left_rows(m, mc, xrows)
    body = "".join(_tile512(qtype, wr, xr) for wr in sorted({tw, 1}) for xr in sorted({TILE_X, *left}))
    for wr, name in ((tw, "TW"), (1, "1")):
        cases = " ".join(f"case {xr}: tgq_tile_{wr}_{xr}(w, x, out); break;" for xr in left)
        body += (
            f"static inline void tgq_tail_{name}(const uint8_t* restrict w, const float* restrict x, "
            f"float* restrict out, int rows) {{\n  switch (rows) {{ {cases} default: break; }}\n}}\n"
        )
    return (
        f"#define TW {tw}\n#define TX {TILE_X}\n"
        + body
        + f"#define tgq_tile_TW_TX tgq_tile_{tw}_{TILE_X}\n#define tgq_tile_1_TX tgq_tile_1_{TILE_X}\n"
    )


_KERNEL = r"""
#define NB (K / BS)
#if defined(TGQ_AVX512) && {fast512}
static inline __m512 tgq_iota16(void) {{
  return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}}
static inline __m512 tgq_widen16(const uint8_t* p, __m512 d) {{  /* 16 signed bytes at p, as floats, times d */
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)p))), d);
}}
/* the 32 values of 16 bytes of nibbles at p (low nibbles: values 0..15, high: 16..31) looked up in tab */
static inline void tgq_lookup(const uint8_t* p, __m512 tab, __m512* w0, __m512* w1) {{
  __m512i raw = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)p));
  *w0 = _mm512_permutexvar_ps(raw, tab);  /* (vpermps reads the low 4 bits of each index) */
  *w1 = _mm512_permutexvar_ps(_mm512_srli_epi32(raw, 4), tab);
}}
{rows512}
#define TGQ_TILES 1
#elif defined(TGQ_AVX2) && {fast}
{rows}
#define TGQ_ROWSF 1
#else
static inline float tgq_rowf(const uint8_t* restrict w, const float* restrict x) {{
  float acc = 0.0f;
  for (int b = 0; b < NB; b++) acc += block_dot(w + (long)b * BB, x + (long)b * BS);
  return acc;
}}
#endif
struct tgq_args {{ float* out; const float* x; const uint8_t* w; const float* xs; int m0, mc; }};
static void tgq_chunk(void* p, int c) {{  /* weight rows c * N / CHUNKS .. (c + 1) * N / CHUNKS - 1 */
  const struct tgq_args* a = (const struct tgq_args*)p;
  int n0 = (int)((long)c * N / CHUNKS), n1 = (int)((long)(c + 1) * N / CHUNKS);
  for (int mb = 0; mb < a->mc; mb += XROWS) {{  /* XROWS rows of x stay in L1 while the chunk's weights stream */
    int me = a->mc - mb < XROWS ? a->mc : mb + XROWS;
#ifdef TGQ_TILES
    int n = n0;
    for (; n + TW <= n1; n += TW) {{
      const uint8_t* wr = a->w + (long)n * ROWB;
      float* o = a->out + (long)a->m0 * N + n;
      int m = mb;
      for (; m + TX <= me; m += TX) tgq_tile_TW_TX(wr, a->x + (long)m * K, o + (long)m * N);
      if (m < me) tgq_tail_TW(wr, a->x + (long)m * K, o + (long)m * N, me - m);
    }}
    for (; n < n1; n++) {{
      const uint8_t* wr = a->w + (long)n * ROWB;
      float* o = a->out + (long)a->m0 * N + n;
      int m = mb;
      for (; m + TX <= me; m += TX) tgq_tile_1_TX(wr, a->x + (long)m * K, o + (long)m * N);
      if (m < me) tgq_tail_1(wr, a->x + (long)m * K, o + (long)m * N, me - m);
    }}
#else
    for (int n = n0; n < n1; n++) {{
      const uint8_t* wr = a->w + (long)n * ROWB;
      float* o = a->out + (long)a->m0 * N + n;
      int m = mb;
#ifdef TGQ_ROWSF
      for (; m + 4 <= me; m += 4) tgq_rowsf4(wr, a->x + (long)m * K, a->xs + m * (K / 32), o + (long)m * N);
      for (; m < me; m++) tgq_rowsf1(wr, a->x + (long)m * K, a->xs + m * (K / 32), o + (long)m * N);
#else
      for (; m < me; m++) o[(long)m * N] = tgq_rowf(wr, a->x + (long)m * K);
#endif
    }}
#endif
  }}
}}
#if GLU
typedef float tgq_v8 __attribute__((vector_size(32), aligned(4)));
typedef int tgq_i8 __attribute__((vector_size(32), aligned(4)));
static inline tgq_v8 tgq_select(tgq_i8 m, tgq_v8 a, tgq_v8 b) {{ return (tgq_v8)(((tgq_i8)a & m) | ((tgq_i8)b & ~m)); }}
static inline tgq_v8 tgq_exp8(tgq_v8 x) {{  /* e^x, 8 lanes: 2^n * e^r, |r| <= ln(2) / 2 (relative error < 2e-7) */
  const tgq_v8 lo = {{-87.0f, -87.0f, -87.0f, -87.0f, -87.0f, -87.0f, -87.0f, -87.0f}};
  const tgq_v8 hi = {{88.0f, 88.0f, 88.0f, 88.0f, 88.0f, 88.0f, 88.0f, 88.0f}};
  tgq_i8 under = x < lo, over = x > hi;
  x = tgq_select(under, lo, tgq_select(over, hi, x));
  tgq_v8 n = x * 1.44269504f;
  n = n + 12582912.0f - 12582912.0f;  /* round to nearest (1.5 * 2^23) */
  tgq_v8 r = x - n * 0.693145752f - n * 1.42860677e-6f;  /* ln 2 in two parts */
  tgq_v8 p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
  tgq_i8 e = (__builtin_convertvector(n, tgq_i8) + 127) << 23;
  tgq_v8 inf = hi * 1e38f;  /* (overflows to +inf) */
  return tgq_select(under, (tgq_v8){{0}}, tgq_select(over, inf, p * (tgq_v8)e));
}}
/* out (mc, K) = silu(g) * u of mc rows of gu (2K wide: g, then u) */
static void tgq_glu(const float* restrict gu, float* restrict out, int mc) {{
  for (int m = 0; m < mc; m++)
    for (int i = 0; i < K; i += 8) {{
      tgq_v8 g = *(const tgq_v8*)(gu + (long)m * 2 * K + i), u = *(const tgq_v8*)(gu + (long)m * 2 * K + K + i);
      *(tgq_v8*)(out + (long)m * K + i) = g / (1.0f + tgq_exp8(-g)) * u;
    }}
}}
#endif
void {name}(float* restrict out, const float* restrict x, const uint8_t* restrict w) {{
  float xs[MC * (K / 32)];  /* the sum of each 32 values of x, for MC rows at a time */
#if GLU
  float xg[MC * K];  /* x is (M, 2K): gate and up; the product reads silu(gate) * up, MC rows at a time */
#endif
  for (int m0 = 0; m0 < M; m0 += MC) {{
    int mc = M - m0 < MC ? M - m0 : MC;
#if GLU
    tgq_glu(x + (long)m0 * 2 * K, xg, mc);
    const float* xm = xg;
#else
    const float* xm = x + (long)m0 * K;
#endif
#ifndef TGQ_TILES  /* (the tiles fold a block's offset into its weights) */
    for (int i = 0; i < mc * (K / 32); i++) {{
      float s = 0.0f;
      for (int j = 0; j < 32; j++) s += xm[i * 32 + j];
      xs[i] = s;
    }}
#endif
    struct tgq_args a = {{out, xm, w, xs, m0, mc}};
    tgq_parallel(tgq_chunk, &a, CHUNKS, THREADS);
  }}
}}
"""


def cpu_float_source(
    qtype: str,
    m: int,
    n: int,
    k: int,
    threads: int = 1,
    generic: bool = False,
    avx512: bool = True,
    glu: bool = False,
) -> str:
    """C source of `qmm_f_{qtype}_{m}_{n}_{k}(out, x, w)`: out (m, n) = x (m, k) @ W.T in float32 activations,
    W (n, k) as `qtype` blocks, on up to `threads` threads; `generic`: the plain C body even where AVX2 is there;
    `avx512=False`: the AVX2 body even where AVX-512 is there (tests run every body the host can). `glu`: x is
    (m, 2k), gate then up, and the product is silu(gate) * up @ W.T (a SwiGLU MLP's down projection, its
    activation computed as the kernel reads it: `qmm_glu_...`)."""
    if qtype not in CPU_TYPES:
        raise ValueError(f"quantized matmul: no CPU kernel for {qtype}; tg has {', '.join(CPU_TYPES)}")
    bs, bb = CPU_TYPES[qtype]
    if k % bs:
        raise ValueError(f"quantized matmul: rows of {k} are not whole {qtype} blocks of {bs}")
    mc = max(1, min(m, (1 << 16) // (k // 32)))  # at most 256 KiB of block sums on the stack at a time
    if glu:  # and the activations of at most 256 KiB of x
        mc = max(1, min(mc, (1 << 16) // k))
    # rows of x multiplied with each weight row in turn: a multiple of 8 (the tiles), ~16 KiB of x (L1 holds them);
    # all rows at once re-read x from L2 for every weight row (a 64-row prompt's Q4_1 3072x576 product on 2 threads:
    # 9.7 ms, blocked 1.85)
    xrows = max(TILE_X, min(64, (16384 // (4 * k)) // TILE_X * TILE_X))
    defines = (
        f"#define M {m}\n#define N {n}\n#define K {k}\n#define BS {bs}\n#define BB {bb}\n#define ROWB {k // bs * bb}\n"
        f"#define MC {mc}\n#define XROWS {xrows}\n#define GLU {int(glu)}\n"
        + parallel_defines(m, n, k // bs * bb, threads)
    )
    unpack, update = _ROWF.get(qtype, ("", ""))
    rows = "".join(_ROWS.format(R=r, unpack=unpack, update=update) for r in (1, 4)) if qtype in _ROWF else ""
    rows512 = _tiles512(qtype, m, mc, xrows) if qtype in _UNPACK512 else ""
    body = _KERNEL.format(
        fast=int(qtype in _ROWF),
        rows=rows,
        fast512=int(qtype in _UNPACK512),
        rows512=rows512,
        name=f"qmm_{'glu' if glu else 'f'}_{qtype}_{m}_{n}_{k}",
    )
    prelude = _PRELUDE + ("#undef TGQ_AVX2\n" if generic else "")
    return prelude + _C + ("" if avx512 else "#undef TGQ_AVX512\n") + _COMMON + _BLOCK[qtype] + defines + body
