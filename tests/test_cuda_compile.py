"""Compile-only CUDA tests: the CUDA renderer's output for real kernels compiles with NVRTC (no GPU needed)."""

from __future__ import annotations

import numpy as np
import pytest

from tg import Tensor, dtypes
from tg_codegen import get_program
from tg_codegen.renderer.cuda import CUDARenderer
from tg_runtime.ops_cuda import CUDAError, NVRTCCompiler
from tg_tensor.schedule import pending

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
        pending.remove(item)
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
