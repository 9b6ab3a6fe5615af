"""Compile-only CUDA tests: the CUDA renderer's output for real kernels compiles with NVRTC (no GPU needed)."""

from __future__ import annotations

import numpy as np
import pytest

from tg import Device, Tensor, dtypes
from tg_codegen import Kernel, KernelOptError, Opt, OptOps, get_program
from tg_codegen.heuristic import hand_coded_optimizations
from tg_codegen.renderer.cuda import CUDARenderer
from tg_nn.quant import QUANTIZED_TYPES
from tg_nn.quant_gpu import gpu_source
from tg_runtime.ops_cuda import CUDAError, NVRTCCompiler
from tg_tensor.engine.realizer import current
from tg_uop import DType, UOp
from tg_uop.helpers import Context

try:
    COMPILER: NVRTCCompiler | None = NVRTCCompiler("sm_90")
    REASON = ""
except CUDAError as e:
    COMPILER, REASON = None, str(e)

needs_nvrtc = pytest.mark.skipif(COMPILER is None, reason=f"NVRTC unavailable: {REASON}")


def kernels_of(t: Tensor) -> list[str]:
    """CUDA source of every kernel scheduled to compute `t` (scheduled on the default device, not run)."""
    items = t.schedule()
    for item in items:  # only rendered here, never run
        current().unqueue(item)
    srcs = [get_program(item.ast, CUDARenderer("sm_90")).src for item in items if item.ast.op.name == "SINK"]
    assert srcs, "expected at least one kernel"
    return srcs


def rand(*shape: int) -> Tensor:
    return Tensor(np.random.default_rng(0).standard_normal(shape).astype(np.float32))


CASES = {
    "elementwise": lambda: ((rand(64) + rand(64)) * rand(64)).relu(),
    "reduce": lambda: rand(16, 32).sum(axis=1) * 2,
    "max_then_sub": lambda: rand(8, 8) - rand(8, 8).max(axis=1, keepdim=True),
    "matmul": lambda: (rand(8, 1, 16) * rand(1, 4, 16)).sum(axis=2),
    "int_ops": lambda: (Tensor([1, 2, 3]) * 7 + 1).maximum(4),
    "division": lambda: rand(10) / (rand(10) + 3),
    "half": lambda: (Tensor(np.linspace(-1, 1, 16).astype(np.float16)) * 2 + 1).sum(),
    "bfloat16": lambda: (Tensor([1.0, 2.0, 3.0], dtype=dtypes.bfloat16) * 2).cast(dtypes.float32),
    # the GPU matvec heuristic: UNROLL 8 then GROUP 32, 16-byte loads of halves (test_gpu_heuristics.py)
    "matvec_half": lambda: rand(1, 512).cast(dtypes.float16) @ rand(256, 512).cast(dtypes.float16).T,
    "row_sum_wide": lambda: rand(4, 2048).sum(axis=1),
}


@needs_nvrtc
@pytest.mark.parametrize("case", sorted(CASES))
def test_kernels_compile_with_nvrtc(case: str) -> None:
    assert COMPILER is not None
    for src in kernels_of(CASES[case]()):
        binary = COMPILER.compile(src)
        assert binary[:4] == b"\x7fELF", "NVRTC should return a CUBIN (an ELF image)"


@needs_nvrtc
def test_compile_error_names_the_cause() -> None:
    assert COMPILER is not None
    with pytest.raises(CUDAError, match="compile"):
        COMPILER.compile('extern "C" __global__ void broken(float* x) { x[0] = undefined_name; }')


def _matmul_ast(dt: DType, n: int = 64, k: int = 128, m: int = 32) -> UOp:
    """The kernel AST of an (n, k) @ (k, m) matmul of `dt` tensors (scheduled on the default device, not run; the
    plain form: on the CPU a big one would read its right operand packed in panels, tg_tensor.linalg)."""
    rng = np.random.default_rng(0)
    a = Tensor(rng.standard_normal((n, k)).astype(np.float32)).cast(dt).contiguous()
    b = Tensor(rng.standard_normal((k, m)).astype(np.float32)).cast(dt).contiguous()
    with Context(CPU_PACK=0):
        items = a.matmul(b).schedule()
    for item in items:
        current().unqueue(item)
    return items[-1].ast


TC_OPTS = {
    "default": None,
    "tc_unroll": [Opt(OptOps.TC, 0, 0), Opt(OptOps.UNROLL, 0, 2)],
    "tc_warps_tiles": [
        Opt(OptOps.TC, 0, 0),
        Opt(OptOps.LOCAL, 0, 2),
        Opt(OptOps.LOCAL, 1, 2),
        Opt(OptOps.UPCAST, 0, 2),
        Opt(OptOps.UPCAST, 1, 2),
    ],
    # fragments read from operand tiles in shared memory (STAGE)
    "tc_staged": [Opt(OptOps.TC, 0, 0), Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.LOCAL, 1, 2), Opt(OptOps.STAGE)],
}


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16])
@pytest.mark.parametrize("opts", sorted(TC_OPTS))
def test_tensor_core_matmul_compiles(arch: str, dt: DType, opts: str) -> None:
    spec = get_program(_matmul_ast(dt), CUDARenderer(arch), opts=TC_OPTS[opts])
    assert spec.applied_opts[0] == Opt(OptOps.TC, 0, 0), f"expected TC first, got {spec.applied_opts}"
    assert "mma.sync.aligned.m16n8k16" in spec.src
    binary = NVRTCCompiler(arch).compile(spec.src)
    assert binary[:4] == b"\x7fELF"


def test_tensor_cores_refused_on_devices_without_them(device: str) -> None:
    """PYTHON and CPU (and CL) renderers declare no tensor cores: TC raises KernelOptError, heuristics skip it."""
    renderer = Device[device].renderer
    if renderer.tensor_cores:
        pytest.skip(f"{device} has tensor cores (tests/test_cuda_tc.py runs them)")
    k = Kernel(_matmul_ast(dtypes.float16, 32, 32, 16), renderer)
    with pytest.raises(KernelOptError, match="no tensor cores"):
        k.apply_opt(Opt(OptOps.TC, 0, 0))
    assert all(o.op is not OptOps.TC for o in hand_coded_optimizations(k))


@needs_nvrtc
@pytest.mark.parametrize("dt", [dtypes.uint32, dtypes.int64, dtypes.float16, dtypes.uint8])
def test_wide_loads_of_every_dtype_compile(dt: DType) -> None:
    """An upcast axis reads neighbouring elements, merged into one vector load whatever the element type."""
    x = Tensor(np.arange(64).astype(np.int32)).cast(dt).contiguous()
    items = (x + x).schedule()
    for item in items:
        current().unqueue(item)
    spec = get_program(items[-1].ast, CUDARenderer("sm_90"), opts=[Opt(OptOps.UPCAST, 0, 4)])
    if dt.itemsize in (2, 4, 8):
        assert f"*((tg_{dt.name.replace(' ', '_')}x" in spec.src, spec.src
    assert COMPILER is not None
    assert COMPILER.compile(spec.src)[:4] == b"\x7fELF"


def _last_ast(t: Tensor) -> UOp:
    items = t.schedule()
    for item in items:
        current().unqueue(item)
    return items[-1].ast


STAGE_CASES = {
    # the heuristic's staged tile for a big fp32 matmul (tc/stage.py)
    "matmul_heuristic": (lambda: _matmul_ast(dtypes.float32, 2048, 256, 2048), None),
    # its 128x64 tile: too few 128x128 tiles at 1024, and a batch of attention heads 64 wide (the batch in the grid)
    "matmul_narrow_heuristic": (lambda: _matmul_ast(dtypes.float32, 1024, 1024, 1024), None),
    "batched_heads_heuristic": (lambda: _last_ast(Tensor.empty(64, 256, 32) @ Tensor.empty(64, 32, 64)), None),
    # a small one with a masked (padded) operand and a tile the threads do not divide
    "matmul_masked": (
        lambda: _matmul_ast(dtypes.float32, 60, 24, 30),
        [Opt(OptOps.PADTO, 1, 4), Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.LOCAL, 1, 8), Opt(OptOps.UNROLL, 0, 3)],
    ),
    "matmul_half_inputs": (
        lambda: _matmul_ast(dtypes.float16, 64, 64, 64),
        [Opt(OptOps.LOCAL, 0, 8), Opt(OptOps.LOCAL, 1, 8), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 0, 8)],
    ),
}


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("case", sorted(STAGE_CASES))
def test_staged_tiles_compile(arch: str, case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Operand tiles in shared memory (STAGE): the kernel declares them, syncs twice per step and compiles."""
    make, opts = STAGE_CASES[case]
    monkeypatch.setenv("TC", "0")  # fp16 inputs would take the tensor cores first
    spec = get_program(make(), CUDARenderer(arch), opts=None if opts is None else opts + [Opt(OptOps.STAGE)])
    assert OptOps.STAGE in [o.op for o in spec.applied_opts], spec.applied_opts
    assert "__shared__ __align__(" in spec.src and spec.src.count("__syncthreads();") == 2
    assert NVRTCCompiler(arch).compile(spec.src)[:4] == b"\x7fELF"


PIPELINED_TC = TC_OPTS["tc_warps_tiles"] + [Opt(OptOps.UNROLL, 0, 2)]


def _transposed_matmul_ast(dt: DType, a_t: bool, b_t: bool, n: int = 64, k: int = 128, m: int = 64) -> UOp:
    """(n, k) @ (k, m) with A stored (k, n) and/or B stored (m, k) and read transposed."""
    rng = np.random.default_rng(0)
    a = Tensor(rng.standard_normal((k, n) if a_t else (n, k)).astype(np.float32)).cast(dt).contiguous()
    b = Tensor(rng.standard_normal((m, k) if b_t else (k, m)).astype(np.float32)).cast(dt).contiguous()
    with Context(CPU_PACK=0):
        items = (a.T if a_t else a).matmul(b.T if b_t else b).schedule()
    for item in items:
        current().unqueue(item)
    return items[-1].ast


@needs_nvrtc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16, dtypes.float32])
@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt"])
@pytest.mark.parametrize("depth", [2, 3])
def test_pipelined_tensor_core_tiles_compile(arch: str, dt: DType, layout: str, depth: int) -> None:
    """Pipelined tiles (STAGE with 2-3 slots): 16-byte cp.async copies, a prologue before the loop, one wait per
    step, ldmatrix fragments (16-bit inputs, and TF32 where K is contiguous); NVRTC compiles them."""
    ast = _transposed_matmul_ast(dt, layout[0] == "t", layout[1] == "t")
    with Context(ALLOW_TF32=1):
        spec = get_program(ast, CUDARenderer(arch), opts=PIPELINED_TC + [Opt(OptOps.STAGE, None, depth)])
    src = spec.src
    assert src.count("__tg_cp_async_commit();") == depth and f"__tg_cp_async_wait<{depth - 1}>();" in src
    assert src.count("__syncthreads();") == 2 and "__tg_cp_async16(" in src
    if dt != dtypes.float32:  # A by four 8x8 matrices, B by two; transposed where M (N) is contiguous
        assert f"__tg_ldmatrix_x4{'_trans' if layout[0] == 't' else ''}<" in src
        assert f"__tg_ldmatrix_x2{'' if layout[1] == 't' else '_trans'}<" in src
    else:  # no transposing ldmatrix for 32-bit elements
        assert ("__tg_ldmatrix_x4<" in src) == (layout[0] == "n") and ("__tg_ldmatrix_x2<" in src) == (layout[1] == "t")
    assert NVRTCCompiler(arch).compile(src)[:4] == b"\x7fELF"


WGMMA = [Opt(OptOps.TC, 0, 1), Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.UNROLL, 0, 2)]


@needs_nvrtc
@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16])
@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt"])
@pytest.mark.parametrize("depth", [2, 3])
def test_warpgroup_mma_tiles_compile(dt: DType, layout: str, depth: int) -> None:
    """Hopper's warpgroup MMA (TC arg 1 on sm_90): both tiles pipelined in 1024-byte aligned slots, read by
    descriptor (K-major tiles with the 64-byte swizzle, M/N-major ones in 64-element atoms with the 128-byte one),
    the instruction's transpose flags set for M-/N-major operands, the copies fenced for the async proxy; NVRTC
    compiles it (for sm_90a)."""
    ast = _transposed_matmul_ast(dt, layout[0] == "t", layout[1] == "t", n=128, k=128, m=128)
    spec = get_program(ast, CUDARenderer("sm_90"), opts=WGMMA + [Opt(OptOps.STAGE, None, depth)])
    src, ptx = spec.src, {dtypes.float16: "f16", dtypes.bfloat16: "bf16"}[dt]
    assert f"wgmma.mma_async.sync.aligned.m64n128k16.f32.{ptx}.{ptx}" in src
    assert src.count(f"__tg_wgmma_{ptx}<{int(layout[0] == 't')},{int(layout[1] == 'n')}>(") == 2  # K by 2 x 16
    assert src.count("__tg_wgmma_wait(") == 2 and "__tg_fence_proxy_async();" in src  # (the helper and its call)
    k_major, mn_major = "16, 512, 2)", "4096, 1024, 1)"  # (lbo, sbo, swizzle mode) of a 32-wide K row / N atoms
    assert src.count(k_major) + src.count(mn_major) == 4 and "__shared__ __align__(1024)" in src
    assert (src.count(mn_major) == 2) == (layout in ("tt", "nn")) and (src.count(mn_major) == 4) == (layout == "tn")
    assert NVRTCCompiler("sm_90").compile(src)[:4] == b"\x7fELF"


@needs_nvrtc
@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt"])
def test_warpgroup_mma_tf32_tiles_compile(layout: str) -> None:
    """TF32's warpgroup MMA (m64n128k8, TC arg 1 for fp32 under ALLOW_TF32) reads K-major tiles only: an operand
    whose M or N is contiguous is copied element by element into a K-major tile (rows of 32 floats, the 128-byte
    swizzle), a K-contiguous one in 16-byte cp.async pieces; no transpose flags; NVRTC compiles it."""
    ast = _transposed_matmul_ast(dtypes.float32, layout[0] == "t", layout[1] == "t", n=128, k=128, m=128)
    opts = [Opt(OptOps.TC, 0, 1), Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.UNROLL, 0, 4), Opt(OptOps.STAGE, None, 2)]
    with Context(ALLOW_TF32=1):
        spec = get_program(ast, CUDARenderer("sm_90"), opts=opts)
    src = spec.src
    assert "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32" in src and src.count("__tg_wgmma_tf32<0,0>(") == 4
    assert src.count("16, 1024, 1)") == 8 and spec.shared_bytes == 2 * 2 * 128 * 32 * 4  # all K-major, 64 KiB
    async_tiles = (layout[0] == "n") + (layout[1] == "t")  # the K-contiguous operands
    assert ("__tg_cp_async16(" in src) == (async_tiles > 0) and "__tg_fence_proxy_async();" in src
    assert NVRTCCompiler("sm_90").compile(src)[:4] == b"\x7fELF"


def test_tf32_heuristic_takes_wgmma_only_for_k_contiguous_operands() -> None:
    """TF32 on Hopper: A @ B.T (both operands contiguous along K: cp.async pieces) takes the warpgroup MMA (248 vs
    160 TFLOPS at 4096 on an H100); A @ B with a row-major B keeps mma.sync (its element-wise transposing copy ran
    142 vs 175)."""
    for b_t, arg in ((True, 1), (False, 0)):
        ast = _transposed_matmul_ast(dtypes.float32, False, b_t, n=256, k=256, m=256)
        with Context(ALLOW_TF32=1):
            assert get_program(ast, CUDARenderer("sm_90")).applied_opts[0] == Opt(OptOps.TC, 0, arg)


def test_warpgroup_mma_needs_pipelined_tiles_and_hopper() -> None:
    """Without pipelined tiles a warpgroup MMA has nothing to read: refused naming what it needs; sm_80 has none;
    the heuristics take it on sm_90 and mma.sync on sm_80."""
    ast = _transposed_matmul_ast(dtypes.float16, False, False, n=128, k=128, m=128)
    with pytest.raises(KernelOptError, match="STAGE"):
        get_program(ast, CUDARenderer("sm_90"), opts=WGMMA)
    with pytest.raises(KernelOptError, match="arg 1 picks a tensor core"):
        get_program(ast, CUDARenderer("sm_80"), opts=WGMMA)
    assert Opt(OptOps.TC, 0, 1) in get_program(ast, CUDARenderer("sm_90")).applied_opts
    assert Opt(OptOps.TC, 0, 0) in get_program(ast, CUDARenderer("sm_80")).applied_opts
    odd = _transposed_matmul_ast(dtypes.float16, False, False, n=64, k=128, m=128)  # 64 rows: one warpgroup's
    assert Opt(OptOps.TC, 0, 0) in get_program(odd, CUDARenderer("sm_90")).applied_opts


def test_pipelined_tiles_without_async_copies() -> None:
    """Before sm_80 (no cp.async, no ldmatrix) a pipelined STAGE copies through registers into its slots."""
    ast = _matmul_ast(dtypes.float32, 256, 128, 256)
    opts = [Opt(OptOps.LOCAL, 0, 16), Opt(OptOps.LOCAL, 1, 16), Opt(OptOps.UNROLL, 0, 8), Opt(OptOps.STAGE, None, 2)]
    src = get_program(ast, CUDARenderer("sm_75"), opts=opts).src
    assert "cp_async" not in src and "ldmatrix" not in src and src.count("__syncthreads();") == 2
    assert "float stage0[320];" in src  # 2 slots of 8 rows of K x 16 (+ 4 of padding: A's copy runs along K)


@needs_nvrtc
def test_pipelined_copy_of_a_tile_smaller_than_the_workgroup() -> None:
    """B's 16 x 8 tile is 16 pieces for 64 threads: the threads past its end issue no copy at all (a zero-filled
    piece there would land past the tile)."""
    opts = [Opt(OptOps.TC, 0, 0), Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.STAGE, None, 2)]
    src = get_program(_matmul_ast(dtypes.float16), CUDARenderer("sm_90"), opts=opts).src
    assert "__tg_cp_async16(" in src and ") __tg_cp_async16(" in src  # a guarded copy: `if (inside) ...`
    assert NVRTCCompiler("sm_90").compile(src)[:4] == b"\x7fELF"


@needs_nvrtc
def test_cubins_come_from_the_disk_cache(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A second compiler (another process's) finds the CUBIN in the disk cache and never runs NVRTC; another
    source or architecture builds anew."""
    from tg_codegen import diskcache

    monkeypatch.setenv("CACHEDB", str(tmp_path / "cache.db"))
    diskcache.reset_connections()
    src = 'extern "C" __global__ void fill(float* a) { a[threadIdx.x] = 2.0f; }'
    first = NVRTCCompiler("sm_90").compile(src)
    again = NVRTCCompiler("sm_90")
    built: list[str] = []
    real = again._build
    monkeypatch.setattr(again, "_build", lambda s: built.append(s) or real(s))
    assert again.compile(src) == first and built == []
    again.compile(src.replace("2.0f", "3.0f"))
    assert len(built) == 1
    other = NVRTCCompiler("sm_80")
    monkeypatch.setattr(other, "_build", lambda s: built.append(s) or b"")
    other.compile(src)
    assert len(built) == 2, "a CUBIN of another architecture is not reused"


@needs_nvrtc
@pytest.mark.parametrize("qtype", QUANTIZED_TYPES)
def test_quantized_matmul_kernels_compile(qtype: str) -> None:
    """The fused dequantize-and-multiply kernels of tg_nn.quant (checked for numbers on CL) compile for CUDA: a
    decode vector (m=1) and a prefill batch that takes two groups of x rows (m=9)."""
    assert COMPILER is not None
    for m in (1, 9):
        binary = COMPILER.compile(gpu_source(qtype, m, 40, 512, "CUDA"))
        assert binary[:4] == b"\x7fELF"
    binary = COMPILER.compile(gpu_source(qtype, 1, 40, 512, "CUDA", res=True, glu=True))  # (a decode step's epilogue)
    assert binary[:4] == b"\x7fELF"


def _pooled(device: str = "CPU") -> tuple[Tensor, np.ndarray]:
    """MNIST's first block: bias, relu and a 2x2 max pool of a (8, 4, 26, 26) activation, and numpy's values."""
    rng = np.random.default_rng(1)
    x, b = rng.standard_normal((8, 4, 26, 26)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    y = (Tensor(x, device=device) + Tensor(b, device=device).reshape(1, 4, 1, 1)).relu().max_pool2d((2, 2))
    want = np.maximum(x + b.reshape(1, 4, 1, 1), 0).reshape(8, 4, 13, 2, 13, 2).max((3, 5))
    return y, want


@pytest.mark.parametrize("case", ["pool", "elementwise"])
def test_gpu_threads_take_a_whole_odd_row(case: str) -> None:
    """A pooling (a 4-long reduction, no operand reused) and an elementwise kernel whose rows are 13 and 15 wide:
    the workgroup's threads run along the whole rows (neighbouring threads, neighbouring addresses), not along the
    channels 169 floats apart (a register tile's order): MNIST's pooled rows read at 0.3-0.5 TB/s on an H200."""
    padded = (Tensor.ones(8, 4, 11, 11).contiguous() * 3).exp().pad(((0, 0), (0, 0), (2, 2), (2, 2)))
    t = _pooled()[0] if case == "pool" else padded  # (rows of 15: the padded gradient conv2d's input gradient reads)
    spec = get_program(_last_ast(t), CUDARenderer("sm_90"))
    row = 13 if case == "pool" else 15
    assert [o.arg for o in spec.applied_opts if o.op is OptOps.LOCAL][:2] == [row, row], spec.applied_opts
    assert spec.local_size is not None and spec.local_size[:2] == (row, row), spec.local_size
    assert not any(o.op is OptOps.UPCAST for o in spec.applied_opts), spec.applied_opts
    if COMPILER is not None:
        assert COMPILER.compile(spec.src)[:4] == b"\x7fELF"


def test_gpu_pool_threads_along_rows_give_numpy_values(device: str) -> None:
    """The same pooling run where the device has workgroups (CL; PYTHON and CPU run their own opts): numpy's."""
    y, want = _pooled(device)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-6)


def _conv_kernels(xs: tuple[int, ...], ws: tuple[int, ...], device: str = "CPU") -> dict[str, list[UOp]]:
    """The forward, input-gradient and weight-gradient kernels (their ASTs, the last first) of a conv2d, scheduled,
    not run (a device with compute units may split the weight gradient's reduction in two kernels)."""
    rng = np.random.default_rng(2)
    x = Tensor(rng.standard_normal(xs).astype(np.float32), device=device, requires_grad=True)
    w = Tensor(rng.standard_normal(ws).astype(np.float32), device=device, requires_grad=True)
    out = x.conv2d(w)
    gx, gw = (out * out).sum().gradient(x, w)
    asts = {}
    for name, t in (("forward", out), ("input_grad", gx), ("weight_grad", gw)):
        items = t.schedule()
        for item in items:
            current().unqueue(item)
        asts[name] = [it.ast for it in items if it.ast.op.name == "SINK"][::-1]
    return asts


def test_gpu_conv_threads_along_rows_and_taps() -> None:
    """MNIST's second conv (batch 128 here): the forward and the input gradient (a convolution too) take threads
    along the whole 11- and 13-wide rows, with the 16x4 channel x image register tile (an H200 sweep: 303 -> 147
    and 381 -> 167 us at batch 512); the weight gradient takes threads along its 3x3 taps and 8 output channels
    with a 16x4 input x output channel tile (350 -> 186 us). All compile for sm_90."""
    asts = _conv_kernels((128, 32, 13, 13), (64, 32, 3, 3))
    rows = {"forward": 11, "input_grad": 13}
    for name, found in asts.items():
        spec = get_program(found[0], CUDARenderer("sm_90"))
        locals_ = [o.arg for o in spec.applied_opts if o.op is OptOps.LOCAL]
        ups = sorted(int(o.arg) for o in spec.applied_opts if o.op is OptOps.UPCAST)  # type: ignore[arg-type]
        if name in rows:
            assert locals_[:2] == [rows[name], rows[name]] and ups == [4, 16], (name, spec.applied_opts)
        else:
            assert sorted(locals_) == [3, 3, 8] and ups == [4, 16], (name, spec.applied_opts)
        if COMPILER is not None:
            assert COMPILER.compile(spec.src)[:4] == b"\x7fELF"


def test_gpu_conv_rules_give_numpy_values(device: str) -> None:
    """MNIST's second conv at batch 128 (the batch tile that the row rule replaces needs 128) on a device with
    workgroups (CL): the forward and the input gradient take threads along the rows, the weight gradient along
    the taps; all three against numpy."""
    if not Device[device].renderer.has_local:
        pytest.skip(f"{device} has no workgroups: the GPU rules do not apply (its own rules are tested elsewhere)")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((128, 32, 13, 13)).astype(np.float32)
    w = rng.standard_normal((64, 32, 3, 3)).astype(np.float32)
    renderer = Device[device].renderer
    threads = {
        name: [[o.arg for o in hand_coded_optimizations(Kernel(a, renderer)) if o.op is OptOps.LOCAL] for a in found]
        for name, found in _conv_kernels(x.shape, w.shape, device).items()
    }
    assert threads["forward"][0] == [11, 11, 2] and threads["input_grad"][0] == [13, 13, 2], threads
    assert [8, 3, 3] in threads["weight_grad"], threads  # (where split, its first stage)
    xt, wt = Tensor(x, device=device, requires_grad=True), Tensor(w, device=device, requires_grad=True)
    out = xt.conv2d(wt)
    gx, gw = (out * out).sum().gradient(xt, wt)
    windows = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))  # (128, 32, 11, 11, 3, 3)
    want = np.tensordot(windows, w, axes=((1, 4, 5), (1, 2, 3))).transpose(0, 3, 1, 2)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-3, atol=1e-3)
    g = 2 * want
    np.testing.assert_allclose(gw.numpy(), np.tensordot(g, windows, axes=((0, 2, 3), (0, 2, 3))), rtol=1e-3, atol=1e-2)
    gxw = np.zeros_like(x)
    for kh in range(3):
        for kw in range(3):
            gxw[:, :, kh : kh + 11, kw : kw + 11] += np.tensordot(g, w[:, :, kh, kw], axes=((1,), (0,))).transpose(
                0, 3, 1, 2
            )
    np.testing.assert_allclose(gx.numpy(), gxw, rtol=1e-3, atol=1e-2)
