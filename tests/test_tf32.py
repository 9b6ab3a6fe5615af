"""TF32 (fp32 matmuls on tensor cores) is used only when allowed, and its kernels compile for sm_80 and sm_90.

Runs without a GPU: kernels are rendered for CUDA and compiled with NVRTC. tests/test_cuda_tc.py checks the
values on the GPU.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from tg import Context, Tensor
from tg_codegen import KernelOptError, Opt, OptOps, get_program
from tg_codegen.renderer.cuda import CUDARenderer
from tg_runtime.ops_cuda import CUDAError, NVRTCCompiler
from tg_tensor.engine.realizer import current
from tg_uop import UOp


def matmul_ast(m: int, n: int, k: int) -> UOp:
    rng = np.random.default_rng(0)
    a = Tensor(rng.standard_normal((m, k)).astype(np.float32))
    b = Tensor(rng.standard_normal((k, n)).astype(np.float32))
    items = a.matmul(b).schedule()
    for item in items:
        current().unqueue(item)
    return items[-1].ast


def test_off_by_default_and_refused_when_asked() -> None:
    ast = matmul_ast(64, 64, 64)
    spec = get_program(ast, CUDARenderer("sm_90"))
    assert not any(o.op is OptOps.TC for o in spec.applied_opts)
    assert "tf32" not in spec.src
    with pytest.raises(KernelOptError, match="fp32 takes the TF32 tensor core only under ALLOW_TF32=1"):
        get_program(ast, CUDARenderer("sm_90"), opts=[Opt(OptOps.TC, 0, 0)])


def test_environment_variable_allows_it() -> None:
    code = "from tg_codegen.tc.cores import ALLOW_TF32; print(ALLOW_TF32.value)"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "ALLOW_TF32": "1"}, capture_output=True)
    assert out.stdout.strip() == b"1", out.stderr


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("shape", [(64, 64, 64), (128, 256, 32), (32, 16, 8)])
def test_tf32_kernels_compile(arch: str, shape: tuple[int, int, int]) -> None:
    try:
        compiler = NVRTCCompiler(arch)
    except CUDAError as e:
        pytest.skip(f"NVRTC unavailable: {e}")
    with Context(ALLOW_TF32=1):
        spec = get_program(matmul_ast(*shape), CUDARenderer(arch))
    assert any(o.op is OptOps.TC for o in spec.applied_opts), spec.applied_opts
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in spec.src
    assert compiler.compile(spec.src)[:4] == b"\x7fELF"


def test_no_tf32_below_sm80() -> None:
    with Context(ALLOW_TF32=1):
        spec = get_program(matmul_ast(64, 64, 64), CUDARenderer("sm_75"))
    assert not any(o.op is OptOps.TC for o in spec.applied_opts)
