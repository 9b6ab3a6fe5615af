"""CUDA C for NVIDIA GPUs (compiled by NVRTC in tg_runtime).

>>> from tg_codegen.renderer.cuda import CUDARenderer
>>> CUDARenderer("sm_90").arch
'sm_90'
"""

from __future__ import annotations

from tg_codegen.renderer.cstyle import CStyleLanguage
from tg_uop import DType, UOp, dtypes

_SPECIAL_NAMES = {"g": "blockIdx", "l": "threadIdx"}


class CUDARenderer(CStyleLanguage):
    """CUDA C: `extern "C" __global__` kernels; launch ids gidx*/lidx* map to blockIdx/threadIdx."""

    device = "CUDA"
    has_local = True
    has_shared = True
    smem_prefix = "__shared__ "
    barrier = "__syncthreads();"
    global_max = (2**31 - 1, 65535, 65535)
    local_max = (1024, 1024, 64)
    kernel_prefix = 'extern "C" __global__ '
    buffer_suffix = " __restrict__"
    type_map = {dtypes.bool: "bool", dtypes.float16: "half", dtypes.bfloat16: "nv_bfloat16"}

    def __init__(self, arch: str = "sm_90") -> None:
        self.arch = arch

    @property
    def extra_headers(self) -> tuple[str, ...]:  # type: ignore[override]
        return (
            "#define INFINITY (__int_as_float(0x7f800000))",
            "#define NAN (__int_as_float(0x7fffffff))",
            "#define tg_max(a,b) ((a)!=(a)||(b)!=(b) ? (a)+(b) : ((a)>(b)?(a):(b)))",
        )

    def render_special(self, u: UOp) -> str:
        name = str(u.arg[0])  # gidx<d> or lidx<d>
        return f"{_SPECIAL_NAMES[name[0]]}.{'xyz'[int(name[4:])]}"

    def render_bitcast(self, x: str, src: DType, dt: DType) -> str:
        return f"__tg_bitcast<{self.render_dtype(dt)}>(({self.render_dtype(src)})({x}))"

    def render_kernel(
        self,
        function_name: str,
        body: list[str],
        params: list[tuple[str, DType, bool]],
        vec_dts: tuple[DType, ...] = (),
    ) -> str:
        prelude = (
            "template <class T, class F> __device__ inline T __tg_bitcast(F x) "
            "{ union { F f; T t; } u; u.f = x; return u.t; }"
        )
        text = "\n".join(body) + " ".join(self.render_dtype(dt) for _, dt, _ in params)
        headers = [f"#include <{h}>" for h, t in (("cuda_fp16.h", "half"), ("cuda_bf16.h", "nv_bfloat16")) if t in text]
        if "__tg_bitcast" in text:
            headers.append(prelude)
        src = super().render_kernel(function_name, body, params, vec_dts)
        return "\n".join([*headers, src])
