"""The fused dequantize-and-multiply kernels (tg_nn.quant) against numpy: gguf's own dequantizer, then a float64
matmul. By default the products are float32 all through (a tight tolerance, every device); with int8=True the CPU's
kernels round each 32-value block of x to 8 bits first, so their results are checked against the exact bound of
that rounding: |error| <= sum over k of |W[n, k]| * d_block(k) / 2, with d = max|x in the block| / 127."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from tg import Tensor, TinyJit
from tg_nn.quant import QUANTIZED_TYPES, QuantizedWeight, quantized_matmul
from tg_nn.quant_cpu import cpu_source
from tg_nn.quant_cpu_float import cpu_float_source
from tg_tensor import KernelSource, source_kernel
from tg_uop import dtypes

SHAPES = [(1, 40, 512), (5, 33, 256), (9, 8, 1536)]  # (rows of x, rows of W, columns): vector, 4-row tiles + rest


def blocks(qtype: str, n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(raw bytes, float values) of a random (n, k) matrix of `qtype`: gguf quantizes the 32-value types; the K-quants
    (which gguf cannot quantize) are random bytes with small positive float16 scales."""
    rng = np.random.default_rng(seed)
    t = gguf.GGMLQuantizationType[qtype]
    if qtype in ("Q8_0", "Q4_0", "Q4_1"):
        raw = gguf.quants.quantize(rng.standard_normal((n, k)).astype(np.float32), t)
    else:
        bs, bb = gguf.GGML_QUANT_SIZES[t]
        raw = rng.integers(0, 256, (n, k // bs, bb), dtype=np.uint8)
        for off in (208,) if qtype == "Q6_K" else (0, 2):
            raw[:, :, off : off + 2] = (rng.random((n, k // bs, 1)) * 0.01 + 1e-3).astype(np.float16).view(np.uint8)
        raw = raw.reshape(n, -1)
    return np.ascontiguousarray(raw).reshape(-1), gguf.quants.dequantize(raw, t).reshape(n, k).astype(np.float64)


def rounding_bound(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The largest error 8-bit blocks of x can cause in x @ w.T (plus float32 summation slack)."""
    m, k = x.shape
    d = np.abs(x.reshape(m, -1, 32)).max(-1) / 127  # (m, blocks)
    half = np.repeat(d / 2, 32, axis=1)  # (m, k)
    return (half @ np.abs(w).T) * 1.001 + 1e-6 * (np.abs(x) @ np.abs(w).T) + 1e-5


def check(got: np.ndarray, x: np.ndarray, w: np.ndarray, int8: bool) -> None:
    """`int8`: the CPU's 8-bit rounding of x was used (bounded error); else float32 products (tight)."""
    want = x.astype(np.float64) @ w.T
    if int8:
        bound = rounding_bound(x, w)
        assert (np.abs(got - want) <= bound).all(), np.abs(got - want).max()
        assert np.abs(got - want).max() < 0.05 * np.abs(want).max()  # and the bound is not vacuous
    else:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("int8", [False, True])
@pytest.mark.parametrize("qtype", QUANTIZED_TYPES)
def test_fused_product_matches_dequantize_then_matmul(device: str, qtype: str, int8: bool) -> None:
    for i, (m, n, k) in enumerate(SHAPES):
        raw, w = blocks(qtype, n, k, seed=i)
        x = np.random.default_rng(10 + i).standard_normal((m, k)).astype(np.float32)
        qw = QuantizedWeight(Tensor(raw, device=device), qtype, (n, k))
        got = quantized_matmul(Tensor(x, device=device), qw, int8=int8).numpy()
        check(got, x, w, int8 and device == "CPU")  # (int8 is the CPU's: CL and PYTHON multiply in float32)


def _silu_mul(gu: np.ndarray) -> np.ndarray:
    g, u = np.split(gu.astype(np.float64), 2, axis=-1)
    return g / (1 + np.exp(-g)) * u


@pytest.mark.parametrize("int8", [False, True])
@pytest.mark.parametrize("qtype", ["Q4_1", "Q8_0", "Q6_K"])
def test_glu_product_matches_numpy(device: str, qtype: str, int8: bool) -> None:
    """glu=True: silu(gate) * up @ W.T from x = (gate, up) side by side (on the CPU in float32, the activation inside
    the product's kernel: vector exponentials, and x taken in chunks of rows when it is long: 45 rows of 2 x 1536)."""
    for i, (m, n, k) in enumerate([(1, 40, 512), (5, 33, 256), (45, 8, 1536)]):
        raw, w = blocks(qtype, n, k, seed=30 + i)
        gu = (np.random.default_rng(40 + i).standard_normal((m, 2 * k)) * 3).astype(np.float32)
        gu[0, :4] = [-100.0, 100.0, 0.0, -30.0]  # (exponentials out of range either side, and zero)
        qw = QuantizedWeight(Tensor(raw, device=device), qtype, (n, k))
        got = quantized_matmul(Tensor(gu, device=device), qw, int8=int8, glu=True).numpy()
        check(got, _silu_mul(gu), w, int8 and device == "CPU")


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_K", "Q6_K"])
def test_gated_product_with_residual_matches_numpy(device: str, qtype: str) -> None:
    """gated=True: W's rows are a gate then an up projection and the result is silu(x @ gate.T) * (x @ up.T);
    `residual` is added (on OpenCL and CUDA both inside the product's kernel, whose warps pair gate and up rows).
    Odd output counts leave a workgroup's last rows empty; 9 rows of x take two groups of x rows."""
    for i, (m, n, k) in enumerate([(1, 42, 512), (9, 10, 256)]):
        raw, w = blocks(qtype, n, k, seed=50 + i)
        x = np.random.default_rng(60 + i).standard_normal((m, k)).astype(np.float32)
        r = np.random.default_rng(70 + i).standard_normal((m, n // 2)).astype(np.float32)
        qw = QuantizedWeight(Tensor(raw, device=device), qtype, (n, k))
        xt, rt = Tensor(x, device=device), Tensor(r, device=device)
        got = quantized_matmul(xt, qw, gated=True, residual=rt).numpy()
        want = _silu_mul(x.astype(np.float64) @ w.T) + r
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
        got = quantized_matmul(xt, qw, residual=Tensor(np.ones((m, n), np.float32), device=device)).numpy()
        check(got - 1, x, w, False)
    with pytest.raises(ValueError, match="gated needs an even number of rows of W"):
        quantized_matmul(
            Tensor.ones(1, 32), QuantizedWeight(Tensor(np.zeros(34, np.uint8)), "Q8_0", (1, 32)), gated=True
        )


def test_glu_width_is_checked() -> None:
    qw = QuantizedWeight(Tensor(np.zeros(34, np.uint8)), "Q8_0", (1, 32))
    with pytest.raises(ValueError, match="64 columns \\(glu: gate and up"):
        quantized_matmul(Tensor.ones(2, 32), qw, glu=True)


def _run_cpu_source(
    src: str, x: np.ndarray, raw: np.ndarray, qtype: str, n: int, int8: bool, variant: str
) -> np.ndarray:
    """The (m, n) product that the C source `src` (quant_cpu's qmm kernel, or quant_cpu_float's without int8)
    computes on the CPU from x and W's blocks, run as a lazy source kernel."""
    m, k = x.shape
    name = f"qmm_{qtype}_{m}_{n}_{k}" if int8 else f"qmm_f_{qtype}_{m}_{n}_{k}"

    def make(device: str, dts: tuple[object, ...]) -> KernelSource:
        return KernelSource(src, name)

    inputs = [Tensor(x, device="CPU"), Tensor(raw, device="CPU")]
    return source_kernel((m, n), dtypes.float32, inputs, (variant, qtype, int8), make).numpy()


@pytest.mark.parametrize("int8", [False, True])
@pytest.mark.parametrize("qtype", QUANTIZED_TYPES)
def test_generic_c_body_matches(qtype: str, int8: bool) -> None:
    """The CPU kernels' plain-C bodies (any target), selected even where the compiler targets AVX2."""
    m, n, k = 6, 17, 512
    raw, w = blocks(qtype, n, k, seed=3)
    x = np.random.default_rng(4).standard_normal((m, k)).astype(np.float32)
    src = cpu_source(qtype, m, n, k, generic=True) if int8 else cpu_float_source(qtype, m, n, k, generic=True)
    check(_run_cpu_source(src, x, raw, qtype, n, int8, "generic"), x, w, int8)


@pytest.mark.parametrize("qtype", QUANTIZED_TYPES)
def test_avx2_float_body_matches(qtype: str) -> None:
    """The float kernels' AVX2 bodies, selected even where the compiler targets AVX-512 (whose bodies the other tests
    run there): 4-row tiles and single rows."""
    m, n, k = 6, 17, 512
    raw, w = blocks(qtype, n, k, seed=5)
    x = np.random.default_rng(6).standard_normal((m, k)).astype(np.float32)
    src = cpu_float_source(qtype, m, n, k, avx512=False)
    check(_run_cpu_source(src, x, raw, qtype, n, False, "avx2"), x, w, False)


def test_jitted_product_replays_with_new_inputs(device: str) -> None:
    """A source kernel is recorded by TinyJit like tg's own kernels: replays read the new x."""
    raw, w = blocks("Q4_1", 16, 64, seed=5)
    qw = QuantizedWeight(Tensor(raw, device=device).realize(), "Q4_1", (16, 64))
    step = TinyJit(lambda x: (quantized_matmul(x, qw) * 2).realize())
    for i in range(4):
        x = np.random.default_rng(20 + i).standard_normal((2, 64)).astype(np.float32)
        check(step(Tensor(x, device=device)).numpy() / 2, x, w, False)
    assert len(step.jit_cache) >= 1


def test_bad_weights_are_named() -> None:
    raw = Tensor(np.zeros(10, np.uint8))
    with pytest.raises(ValueError, match="Q4_1 \\(2, 32\\) needs 40 uint8 bytes"):
        QuantizedWeight(raw, "Q4_1", (2, 32))
    with pytest.raises(ValueError, match="'Q2_K' is not one of"):
        QuantizedWeight(raw, "Q2_K", (1, 256))
    with pytest.raises(ValueError, match="not whole Q8_0 blocks"):
        QuantizedWeight(raw, "Q8_0", (1, 20))
    qw = QuantizedWeight(Tensor(np.zeros(34, np.uint8)), "Q8_0", (1, 32))
    with pytest.raises(ValueError, match="does not match W of shape \\(1, 32\\)"):
        quantized_matmul(Tensor.ones(2, 16), qw)


@pytest.mark.parametrize("int8", [False, True])
@pytest.mark.parametrize("qtype", ["Q4_1", "Q6_K"])
def test_threaded_split_matches(qtype: str, int8: bool) -> None:
    """A product big enough to be split over the thread pool (rows of W in chunks that do not divide them evenly,
    several rows of x: 4-row tiles and the rest) gives the dequantize-then-matmul product."""
    m, n, k, threads = 6, 101, 1536, 3
    raw, w = blocks(qtype, n, k, seed=7)
    x = np.random.default_rng(8).standard_normal((m, k)).astype(np.float32)
    src = cpu_source(qtype, m, n, k, threads) if int8 else cpu_float_source(qtype, m, n, k, threads)
    assert "#define CHUNKS 12\n" in src  # (threads x 4 chunks: the split is taken)
    check(_run_cpu_source(src, x, raw, qtype, n, int8, "threaded"), x, w, int8)


def test_small_products_stay_on_one_thread() -> None:
    assert "#define CHUNKS 1\n" in cpu_float_source("Q4_1", 1, 8, 64, threads=8)
    assert "#define CHUNKS 1\n" in cpu_source("Q4_1", 1, 8, 64, threads=8)


@pytest.mark.parametrize("int8", [False, True])
@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0", "Q4_1", "Q4_K"])
def test_a_row_gets_the_same_bits_alone_or_in_a_batch(qtype: str, int8: bool) -> None:
    """Each row of x is multiplied by the same operations whatever rows are beside it (a batched decode step gives
    a sequence the logits it gets alone, in a step of any number of rows), with float32 or 8-bit activations: the rows
    of products of 3 and 6 rows (one tile of that many rows), 11 (a tile of 8, then one of 3) and 21 (runs of 16
    rows: tiles of 8, then 5) equal, bit for bit, the products of each row by itself (27 weight rows: tiles of 2 or 4
    and the rest); the SwiGLU form too."""
    n, k = 27, 256
    raw, _ = blocks(qtype, n, k, seed=11)
    x = np.random.default_rng(12).standard_normal((21, k)).astype(np.float32)
    qw = QuantizedWeight(Tensor(raw, device="CPU").realize(), qtype, (n, k))
    alone = np.concatenate([quantized_matmul(Tensor(x[i : i + 1], device="CPU"), qw, int8).numpy() for i in range(21)])
    gu = np.random.default_rng(13).standard_normal((21, 2 * k)).astype(np.float32)  # (the SwiGLU form: gate, up)
    glu_alone = np.concatenate(
        [quantized_matmul(Tensor(gu[i : i + 1], device="CPU"), qw, int8, glu=True).numpy() for i in range(21)]
    )
    for m in (3, 6, 11, 21):
        together = quantized_matmul(Tensor(x[:m], device="CPU"), qw, int8).numpy()
        np.testing.assert_array_equal(together, alone[:m], err_msg=f"{m} rows")
        glu = quantized_matmul(Tensor(gu[:m], device="CPU"), qw, int8, glu=True).numpy()
        np.testing.assert_array_equal(glu, glu_alone[:m], err_msg=f"{m} rows, glu")
