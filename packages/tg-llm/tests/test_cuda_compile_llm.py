"""Compile-only: the CUDA source of the GGUF unpacking kernels and of a whole decode step (float16 weights,
and Q8_0 / Q4_K blocks kept quantized) compiles with NVRTC. Skips where NVRTC is not installed."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from tg_codegen import get_program
from tg_codegen.renderer.cuda import CUDARenderer
from tg_llm import load_model
from tg_llm.random_model import write_random_gguf
from tg_nn.gguf import dequantize
from tg_tensor import Tensor
from tg_tensor.engine.realizer import current
from tg_uop import dtypes

try:
    from tg_runtime.ops_cuda import CUDAError, NVRTCCompiler

    COMPILER: NVRTCCompiler | None = NVRTCCompiler("sm_90")
    REASON = ""
except (ImportError, CUDAError) as e:  # CUDAError: no NVRTC library on this machine
    COMPILER, REASON = None, str(e)

needs_nvrtc = pytest.mark.skipif(COMPILER is None, reason=f"NVRTC unavailable: {REASON}")


def compile_all(t: Tensor) -> int:
    """Schedule `t` (never run), render each kernel as CUDA and compile it; the number of kernels."""
    assert COMPILER is not None
    items = t.schedule()
    for item in items:
        current().unqueue(item)
    # (a source kernel's item holds the program of the device it was scheduled for: its CUDA source is compiled by
    # test_quantized_matmul_sources_compile)
    srcs = [get_program(i.ast, CUDARenderer("sm_90")).src for i in items if i.ast.op.name == "SINK"]
    for src in srcs:
        assert COMPILER.compile(src)[:4] == b"\x7fELF"
    return len(srcs)


@needs_nvrtc
@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q5_K", "Q6_K"])
def test_unpacking_fused_into_a_matmul_compiles(qtype: str) -> None:
    block, size = {
        "Q8_0": (32, 34),
        "Q4_0": (32, 18),
        "Q4_1": (32, 20),
        "Q4_K": (256, 144),
        "Q5_K": (256, 176),
        "Q6_K": (256, 210),
    }[qtype]
    raw = Tensor(np.random.default_rng(0).integers(0, 256, 4 * size, dtype=np.uint8)).realize()
    w = dequantize(raw, qtype, (4, block))
    x = Tensor(np.ones((1, int(w.shape[1])), np.float32)).realize()
    assert compile_all(x @ w.T) >= 1  # the per-block scales may get kernels of their own, run once
    (x @ w.T).realize()
    assert compile_all(x @ w.T) == 1  # then the unpacking of the blocks is fused into the matmul


@needs_nvrtc
@pytest.mark.parametrize("qtype,keep", [("F16", False), ("Q8_0", True), ("Q4_K", True)])
def test_decode_step_compiles(tmp_path: pathlib.Path, qtype: str, keep: bool) -> None:
    path = tmp_path / "m.gguf"
    write_random_gguf(path, qtype=qtype, dim=256, hidden_dim=256, n_heads=4, n_kv_heads=2, n_layers=1)
    model, _ = load_model(path, "CPU", dtype=dtypes.float16, keep_quantized=keep)
    x = model.embed([3]).realize()
    logits = model.logits(x, 4)
    assert compile_all(logits) > 5


@needs_nvrtc
def test_chunked_argmax_compiles_with_many_workgroups() -> None:
    """argmax_rows over a 128k vocabulary: its first stage runs one workgroup per 256-chunk (512), not one in all."""
    from tg_llm.model import argmax_rows

    x = Tensor(np.random.default_rng(0).standard_normal((1, 128256)).astype(np.float32)).realize()
    items = argmax_rows(x).schedule()
    for item in items:
        current().unqueue(item)
    specs = [get_program(i.ast, CUDARenderer("sm_90")) for i in items if i.ast.op.name == "SINK"]
    assert max(int(np.prod(s.global_size or (1,))) for s in specs) >= 512
    assert COMPILER is not None and all(COMPILER.compile(s.src)[:4] == b"\x7fELF" for s in specs)


@needs_nvrtc
@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q5_K", "Q6_K"])
def test_quantized_matmul_sources_compile(qtype: str) -> None:
    """The fused dequantize-and-multiply kernels' CUDA source (tg_nn.quant_gpu), matrix-vector and matrix-matrix."""
    from tg_nn.quant_gpu import gpu_source

    assert COMPILER is not None
    for m in (1, 16):
        src = gpu_source(qtype, m, 64, 512, "CUDA")
        assert COMPILER.compile(src)[:4] == b"\x7fELF"


@needs_nvrtc
def test_a_prompts_products_run_on_tensor_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """weights.linear(prompt=True) on a device whose tensor cores multiply float16 (sm_90's, given to the CPU's
    renderer for the graph's construction): x rounded to half, the products summed in float32, rendered as mma
    instructions for sm_90. On the CPU itself (no tensor cores) the prompt's product is the float32 one."""
    from tg_llm.weights import linear
    from tg_runtime import Device

    rng = np.random.default_rng(0)
    w = Tensor(rng.standard_normal((256, 128)).astype(np.float16)).realize()
    xs = rng.standard_normal((64, 128)).astype(np.float32)
    x = Tensor(xs).realize()
    np.testing.assert_array_equal(linear(x, w, prompt=True).numpy(), linear(x, w).numpy())
    with monkeypatch.context() as m:
        m.setattr(Device["CPU"].renderer, "tensor_cores", CUDARenderer("sm_90").tensor_cores)
        y, scheduled = linear(x, w, prompt=True), linear(x + 1, w, prompt=True) + 0
    assert y.dtype == dtypes.float32
    # run on the CPU as C: x rounded to half, each product rounded to half (tensor cores keep it exact), summed
    want = (xs.astype(np.float16)[:, None, :] * w.numpy()[None, :, :]).astype(np.float64).sum(-1)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-4)
    items = scheduled.schedule()  # (never run: rendered for sm_90)
    for item in items:
        current().unqueue(item)
    srcs = [get_program(i.ast, CUDARenderer("sm_90")).src for i in items if i.ast.op.name == "SINK"]
    assert any("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in src for src in srcs)
    assert COMPILER is not None and all(COMPILER.compile(src)[:4] == b"\x7fELF" for src in srcs)


@needs_nvrtc
@pytest.mark.parametrize("cache", ["half", "float"])
def test_decode_attention_kernel_compiles(cache: str) -> None:
    """tg_nn.models.decode_attention's CUDA kernel (one workgroup per query head), 1B-shaped: 8 kv heads of 4."""
    from tg_nn.models.decode_attention import _source

    dt = getattr(dtypes, cache)
    made = _source(1, 8, 4, 1024, 64, 0.125, "CUDA", (dtypes.float32, dtypes.float32, dt, dt, dtypes.int32))
    assert made is not None and made.global_size == (32, 1, 1) and COMPILER is not None
    assert COMPILER.compile(made.src)[:4] == b"\x7fELF"


@needs_nvrtc
def test_a_long_prompts_products_with_kept_blocks_unpack_them_to_half(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks kept quantized (Q8_0) and a prompt of more than UNPACK_ROWS rows on a device with float16 tensor cores:
    the weight unpacked to a half matrix by a kernel of its own, then mma instructions; the values are those of
    the dequantized weight rounded to half. Shorter prompts keep the fused kernel that reads the blocks."""
    from tg_llm.weights import UNPACK_ROWS, linear
    from tg_nn.quant import QuantizedWeight
    from tg_runtime import Device

    rng = np.random.default_rng(1)
    blocks = rng.integers(0, 256, (64, 4 * 34), dtype=np.uint8)
    blocks[:, 1::34] = 0x1C  # (each block's float16 scale: small and finite)
    w = QuantizedWeight(Tensor(blocks.reshape(-1)).realize(), "Q8_0", (64, 128))
    xs = rng.standard_normal((UNPACK_ROWS + 16, 128)).astype(np.float32)
    x = Tensor(xs).realize()
    with monkeypatch.context() as m:
        m.setattr(Device["CPU"].renderer, "tensor_cores", CUDARenderer("sm_90").tensor_cores)
        y, short = linear(x, w, prompt=True), linear(x[:UNPACK_ROWS], w, prompt=True)
        scheduled = linear(x + 1, w, prompt=True) + 0
    def custom(t: Tensor) -> str:
        return str([u.arg for u in t.uop.toposort if u.op.name == "CUSTOM"])

    assert "qmm" in custom(short) and "qmm" not in custom(y)  # (the fused kernel for the short prompt only)
    wh = w.dequantize().numpy().astype(np.float16)
    want = (xs.astype(np.float16)[:, None, :] * wh[None, :, :]).astype(np.float64).sum(-1)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-4)
    items = scheduled.schedule()
    for item in items:
        current().unqueue(item)
    srcs = [get_program(i.ast, CUDARenderer("sm_90")).src for i in items if i.ast.op.name == "SINK"]
    assert any("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in src for src in srcs)
    assert COMPILER is not None and all(COMPILER.compile(src)[:4] == b"\x7fELF" for src in srcs)


def test_a_gpu_prompts_mlp_with_kept_blocks_takes_the_tensor_cores(tmp_path: pathlib.Path) -> None:
    """Off the CPU, a long prompt's MLP with blocks kept quantized multiplies both projections through half copies
    (weights.linear): the CPU-only fused SwiGLU of the down projection is not taken. On OpenCL (PoCL in CI), its
    renderer given sm_90's tensor cores while the graph is built; only the graph is inspected."""
    from tg_runtime import Device

    try:
        renderer = Device["CL"].renderer
    except Exception as e:  # (no OpenCL platform: the bare machine)
        pytest.skip(f"CL unavailable: {e}")
    path = tmp_path / "m.gguf"
    write_random_gguf(path, qtype="Q8_0", dim=256, hidden_dim=256, n_heads=4, n_kv_heads=2, n_layers=1)
    model, _ = load_model(path, "CL", keep_quantized=True)
    h = Tensor(np.random.default_rng(0).standard_normal((32, 256)).astype(np.float32), device="CL").realize()
    old = renderer.tensor_cores
    renderer.tensor_cores = CUDARenderer("sm_90").tensor_cores
    try:
        out = model.blocks[0].mlp(h, prompt=True)
    finally:
        renderer.tensor_cores = old
    kernels = str([u.arg for u in out.uop.toposort if u.op.name == "CUSTOM"])
    assert "qmm" not in kernels and any(u.op.name == "CAST" and u.dtype == dtypes.float16 for u in out.uop.toposort)
