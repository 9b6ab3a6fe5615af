"""CUDA C for NVIDIA GPUs (compiled by NVRTC in tg_runtime).

>>> from tg_codegen.renderer.cuda import CUDARenderer
>>> CUDARenderer("sm_90").arch
'sm_90'
"""

from __future__ import annotations

from tg_codegen.limits import LaunchLimits
from tg_codegen.renderer.cstyle import CStyleLanguage
from tg_codegen.tensorcore import TENSOR_CORES_SM80, TensorCore
from tg_uop import DType, Ops, PtrDType, UOp, dtypes

_SPECIAL_NAMES = {"g": "blockIdx", "l": "threadIdx"}


class CUDARenderer(CStyleLanguage):
    """CUDA C: `extern "C" __global__` kernels; launch ids gidx*/lidx* map to blockIdx/threadIdx."""

    device = "CUDA"
    has_local = True
    has_shared = True
    supports_float4 = True
    smem_prefix = "__shared__ __align__(16) "  # 16-byte aligned: wide loads of STAGE tiles
    barrier = "__syncthreads();"
    kernel_prefix = 'extern "C" __global__ '
    buffer_suffix = " __restrict__"
    type_map = {dtypes.bool: "bool", dtypes.float16: "half", dtypes.bfloat16: "nv_bfloat16"}

    code_for_op = {**CStyleLanguage.code_for_op, Ops.WMMA: lambda a, b, c, dt: f"__tg_mma_{dt.name}({a},{b},{c})"}

    def __init__(self, arch: str = "sm_90", limits: LaunchLimits | None = None) -> None:
        if not isinstance(arch, str) or not arch.startswith("sm_") or not arch[3:].isdigit():
            raise ValueError(f"CUDARenderer: arch must look like 'sm_90', got {arch!r}")
        self.arch = arch
        self.limits = limits if limits is not None else LaunchLimits()  # the device's, when it is open
        # mma.sync m16n8k16 with f16/bf16 inputs needs sm_80 (Ampere) or newer
        self.tensor_cores = TENSOR_CORES_SM80 if int(arch[3:]) >= 80 else ()
        # cp.async (global -> shared without registers) and ldmatrix also came with sm_80
        self.has_async_copy = int(arch[3:]) >= 80

    # ---- vectors: small structs (CUDA's own float4 etc. have no indexing), only tensor-core fragments use them
    def render_dtype(self, dt: DType) -> str:
        if dt.count > 1 and not isinstance(dt, PtrDType):
            return f"tg_{dt.scalar().name.replace(' ', '_')}x{dt.count}"  # "unsigned int" -> tg_unsigned_intx4
        return super().render_dtype(dt)

    def render_vectorize(self, lanes: list[str], dt: DType) -> str:
        return f"{self.render_dtype(dt)}{{{{{','.join(lanes)}}}}}"

    def render_gep(self, x: str, i: int) -> str:
        return f"{x}.v[{i}]"

    def render_vector_types(self, dts: list[DType]) -> list[str]:
        lines = []
        for dt in dts:
            align = min(16, dt.itemsize) if dt.itemsize & (dt.itemsize - 1) == 0 else dt.scalar().itemsize
            scalar = super().render_dtype(dt.scalar())
            lines.append(f"struct __align__({align}) {self.render_dtype(dt)} {{ {scalar} v[{dt.count}]; }};")
        for tc in self.tensor_cores:
            if not isinstance(tc, TensorCore):
                continue
            frags = (tc.dtype_in.vec(len(tc.a_rows)), tc.dtype_in.vec(len(tc.b_rows)), tc.dtype_out.vec(len(tc.c_rows)))
            if all(f in dts for f in frags):
                lines.append(self._mma_function(*frags))
        return lines

    def _mma_function(self, a: DType, b: DType, c: DType) -> str:
        """mma.sync m16n8k16 (f16/bf16) or m16n8k8 (tf32), row.col, f32 accumulate, as an inline-PTX function."""
        ptx = {dtypes.float16: "f16", dtypes.bfloat16: "bf16", dtypes.float32: "tf32"}[a.scalar()]
        ta, tb, tc = (self.render_dtype(x) for x in (a, b, c))
        shape = "m16n8k8" if ptx == "tf32" else "m16n8k16"  # both take 4 registers of A and 2 of B
        instr = f"mma.sync.aligned.{shape}.row.col.f32.{ptx}.{ptx}.f32"
        return "\n".join(
            [
                f"__device__ inline {tc} __tg_mma_{a.scalar().name}({ta} a, {tb} b, {tc} c) {{",
                "  const unsigned *ua = reinterpret_cast<const unsigned*>(&a);",
                "  const unsigned *ub = reinterpret_cast<const unsigned*>(&b);",
                f'  asm("{instr} {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%0,%1,%2,%3}};"',
                '      : "+f"(c.v[0]), "+f"(c.v[1]), "+f"(c.v[2]), "+f"(c.v[3])',
                '      : "r"(ua[0]), "r"(ua[1]), "r"(ua[2]), "r"(ua[3]), "r"(ub[0]), "r"(ub[1]));',
                "  return c;",
                "}",
            ]
        )

    def render_alu(self, op: Ops, r: list[str], src: tuple[UOp, ...]) -> str:
        if op is Ops.WMMA:
            return self.code_for_op[op](*r, src[0].dtype.scalar())
        return super().render_alu(op, r, src)

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

    min_blocks_per_sm = 0  # with > 0, __launch_bounds__ also asks nvcc to fit this many blocks on an SM

    def render(self, name: str, uops: list[UOp]) -> str:
        """The kernel, declared with __launch_bounds__(threads per block): nvcc then never uses more registers
        than a launch of that size can have (without it, big blocks fail with 'too many resources requested')."""
        src = super().render(name, uops)
        threads = 1
        for u in uops:
            if u.op is Ops.SPECIAL and str(u.arg[0]).startswith("lidx"):
                threads *= int(u.arg[1])
        bounds = f"{threads}, {self.min_blocks_per_sm}" if self.min_blocks_per_sm else f"{threads}"
        return src.replace(f"{self.kernel_prefix}void ", f"{self.kernel_prefix}__launch_bounds__({bounds}) void ", 1)

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
        text += " ".join(super(CUDARenderer, self).render_dtype(dt.scalar()) for dt in vec_dts)
        headers = [f"#include <{h}>" for h, t in (("cuda_fp16.h", "half"), ("cuda_bf16.h", "nv_bfloat16")) if t in text]
        if "__tg_bitcast" in text:
            headers.append(prelude)
        headers += [code for name, code in _ASYNC_HELPERS.items() if name in text]
        src = super().render_kernel(function_name, body, params, vec_dts)
        return "\n".join([*headers, src])


# STAGE's pipelined tiles (stage.py): 16-byte copies global -> shared without registers, zero-filled when `on` is
# false (src-size 0: nothing is read); commit / wait by group; ldmatrix reads of tensor-core fragments (4 or 2 8x8
# matrices of 16-bit elements, each lane giving one row's address), optionally transposed.
_SMEM = "(unsigned)__cvta_generic_to_shared"
_ASYNC_HELPERS = {
    "__tg_cp_async16": (
        "__device__ inline void __tg_cp_async16(void* dst, const void* src, bool on) {\n"
        f'  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"({_SMEM}(dst)), "l"(src), '
        '"r"(on ? 16 : 0) : "memory");\n}'
    ),
    "__tg_cp_async_commit": (
        '__device__ inline void __tg_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }'
    ),
    "__tg_cp_async_wait": (
        "template <int N> __device__ inline void __tg_cp_async_wait() "
        '{ asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }'
    ),
}
for _n, _regs in (("x4", 4), ("x2", 2)):
    for _t in ("", ".trans"):
        _name = f"__tg_ldmatrix_{_n}{_t.replace('.', '_')}"
        _outs = ",".join(f"%{i}" for i in range(_regs))
        _binds = ", ".join(f'"=r"(u[{i}])' for i in range(_regs))
        _ASYNC_HELPERS[_name] = (
            f"template <class T> __device__ inline T {_name}(const void* p) {{\n"
            f"  T r; unsigned* u = reinterpret_cast<unsigned*>(&r);\n"
            f'  asm volatile("ldmatrix.sync.aligned.m8n8.{_n}{_t}.shared.b16 {{{_outs}}}, [%{_regs}];" : {_binds} '
            f': "r"({_SMEM}(p)));\n  return r;\n}}'
        )
