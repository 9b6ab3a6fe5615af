"""CUDA C for NVIDIA GPUs (compiled by NVRTC in tg_runtime).

>>> from tg_codegen.renderer.cuda import CUDARenderer
>>> CUDARenderer("sm_90").arch
'sm_90'
"""

from __future__ import annotations

from tg_codegen.limits import LaunchLimits
from tg_codegen.renderer import OperandLayout
from tg_codegen.renderer.cstyle import CStyleLanguage
from tg_codegen.tc.cores import ALLOW_TF32, TENSOR_CORES_SM80, TENSOR_CORES_SM90, TensorCore
from tg_uop import DType, Ops, PtrDType, UOp, dtypes
from tg_uop.helpers import getenv

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

    def __init__(self, arch: str = "sm_90", limits: LaunchLimits | None = None, compute_units: int = 0) -> None:
        if not isinstance(arch, str) or not arch.startswith("sm_") or not arch[3:].isdigit():
            raise ValueError(f"CUDARenderer: arch must look like 'sm_90', got {arch!r}")
        self.arch = arch
        # the SMs of the device when it is open; else those of the arch's data-center part (H100/H200: 132)
        self.compute_units = compute_units or _SMS.get(arch, 108)
        # the device's, when it is open; else those of the arch, with the shared memory a block may opt in to
        self.limits = limits if limits is not None else LaunchLimits(shared_bytes=_OPTIN_SHARED.get(arch, 48) * 1024)
        self._dynamic: dict[str, int] | None = None  # while rendering: shared buffers' offsets in dynamic memory
        # mma.sync m16n8k16 with f16/bf16 inputs needs sm_80 (Ampere) or newer; the warpgroup MMAs sm_90 (Hopper,
        # compiled for sm_90a by tg_runtime's NVRTC compiler)
        sm = int(arch[3:])
        self.tensor_cores = TENSOR_CORES_SM90 if sm == 90 else TENSOR_CORES_SM80 if sm >= 80 else ()
        # cp.async (global -> shared without registers) and ldmatrix also came with sm_80
        self.has_async_copy = sm >= 80

    def operand_layout(self, dtype: DType) -> OperandLayout:
        """K-major for fp32 under ALLOW_TF32 where a warpgroup MMA takes TF32 (Hopper): it takes no transposed operand,
        one stored M- or N-major is copied element by element (142 against 249 TFLOPS at 4096 on an H100).

        >>> from tg_uop.helpers import Context
        >>> with Context(ALLOW_TF32=1):
        ...     print([CUDARenderer(arch).operand_layout(dtypes.float32).k_major for arch in ("sm_90", "sm_80")])
        [True, False]
        """
        tf32 = dtype == dtypes.float32 and ALLOW_TF32.value and getenv("TC", 1)
        wgmma = any(isinstance(tc, TensorCore) and tc.wgmma and tc.dtype_in == dtype for tc in self.tensor_cores)
        return OperandLayout(k_major=bool(tf32) and wgmma)

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
        waits: set[DType] = set()  # accumulator types of the warpgroup MMAs: one commit-and-wait each
        for tc in self.tensor_cores:
            if not isinstance(tc, TensorCore):
                continue
            if tc.wgmma:
                if tc.dtype_out.vec(len(tc.c_rows)) in dts:
                    lines.append(self._wgmma_function(tc))
                    waits.add(tc.dtype_out.vec(len(tc.c_rows)))
                continue
            frags = (tc.dtype_in.vec(len(tc.a_rows)), tc.dtype_in.vec(len(tc.b_rows)), tc.dtype_out.vec(len(tc.c_rows)))
            if all(f in dts for f in frags):
                lines.append(self._mma_function(*frags))
        return lines + [self._wgmma_wait_function(acc) for acc in sorted(waits)]

    def _mma_function(self, a: DType, b: DType, c: DType) -> str:
        """mma.sync m16n8k16 (f16/bf16) or m16n8k8 (tf32), row.col, f32 accumulate, as an inline-PTX function."""
        ptx = _PTX_TYPES[a.scalar()]
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

    def _wgmma_function(self, tc: TensorCore) -> str:
        """wgmma.mma_async (fenced first) of one warpgroup, operands by descriptor, the accumulator in registers,
        operands stored M-/N-major where TA/TB are 1."""
        acc = self.render_dtype(tc.dtype_out.vec(len(tc.c_rows)))
        n = len(tc.c_rows)
        regs = ",".join(f"%{i}" for i in range(n))
        binds = ", ".join(f'"+f"(c.v[{i}])' for i in range(n))
        ptx = _PTX_TYPES[tc.dtype_in]
        m, nn, k = tc.dims
        instr = f"wgmma.mma_async.sync.aligned.m{m}n{nn}k{k}.f32.{ptx}.{ptx}"
        lines = [
            f"template <int TA, int TB> __device__ inline {acc} __tg_wgmma_{ptx}"
            f"(unsigned long long da, unsigned long long db, {acc} c) {{",
            # (TF32 takes no transpose flags: its operands are always K-major)
            f'  asm volatile("wgmma.fence.sync.aligned;\\n{instr} {{{regs}}}, %{n}, %{n + 1}, 1, 1, 1'
            + (';"' if ptx == "tf32" else f', %{n + 2}, %{n + 3};"'),
            f'    : {binds} : "l"(da), "l"(db)' + (");" if ptx == "tf32" else ', "n"(TA), "n"(TB));'),
            "  return c;",
            "}",
        ]
        return "\n".join(lines)

    def _wgmma_wait_function(self, acc: DType) -> str:
        """Commit this step's warpgroup MMAs and wait for them, binding the accumulator's registers (tc/lower.py)."""
        t, binds = self.render_dtype(acc), ", ".join(f'"+f"(c.v[{i}])' for i in range(acc.count))
        return "\n".join(
            [
                f"__device__ inline {t} __tg_wgmma_wait({t} c) {{",
                '  asm volatile("wgmma.commit_group.sync.aligned;\\nwgmma.wait_group.sync.aligned 0;"',
                f'    : {binds} :: "memory");',
                "  return c;",
                "}",
            ]
        )

    def render_wmma(self, arg: str, r: list[str], src: tuple[UOp, ...]) -> str:
        """mma.sync by fragments, or a warpgroup MMA by descriptors (arg: "<name><TA,TB>", tc/lower.py)."""
        name, _, flags = arg.partition("<")
        tc = next((t for t in self.tensor_cores if isinstance(t, TensorCore) and t.name == name), None)
        if tc is not None and tc.wgmma:
            ptx = _PTX_TYPES[tc.dtype_in]
            return f"__tg_wgmma_{ptx}<{flags.rstrip('>')}>({r[0]},{r[1]},{r[2]})"
        return self.render_alu(Ops.WMMA, r, src)

    def render_local(self, u: UOp) -> str:
        """Shared buffers of whole KiBs (pipelined tiles) 1024-byte aligned: the 128-byte swizzle of a warpgroup
        MMA's tiles is on address bits, so a tile's 8-row groups must start on 1024-byte boundaries. Over 48 KiB
        in all (the most a block declares statically), they are pointers into dynamic shared memory."""
        assert isinstance(u.dtype, PtrDType)
        t = self.render_dtype(u.dtype.base)
        if self._dynamic is not None:
            first = "extern __shared__ __align__(1024) unsigned char __tg_smem[]; " if self._dynamic[u.arg] == 0 else ""
            return f"{first}{t}* {u.arg} = ({t}*)(__tg_smem + {self._dynamic[u.arg]});"
        return f"__shared__ __align__({_smem_align(u)}) {t} {u.arg}[{u.dtype.size}];"

    def _shared_offsets(self, uops: list[UOp]) -> tuple[dict[str, int], int]:
        """Each shared buffer's byte offset, aligned as render_local aligns it, and the bytes of all."""
        offsets, total = {}, 0
        for u in uops:
            if u.op is Ops.DEFINE_LOCAL and isinstance(u.dtype, PtrDType):
                total = -(-total // _smem_align(u)) * _smem_align(u)
                offsets[str(u.arg)] = total
                total += u.dtype.size * u.dtype.base.itemsize
        return offsets, total

    def dynamic_shared_bytes(self, uops: list[UOp]) -> int:
        """The bytes of shared memory a launch asks for: all of it where it exceeds the static 48 KiB, else 0."""
        _, total = self._shared_offsets(uops)
        return total if total > STATIC_SHARED_BYTES else 0

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
        offsets, total = self._shared_offsets(uops)
        self._dynamic = offsets if total > STATIC_SHARED_BYTES else None
        try:
            src = super().render(name, uops)
        finally:
            self._dynamic = None
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


_PTX_TYPES = {dtypes.float16: "f16", dtypes.bfloat16: "bf16", dtypes.float32: "tf32"}  # tensor-core input types
STATIC_SHARED_BYTES = 48 * 1024  # the most shared memory a kernel declares statically; beyond it, dynamic
# the shared memory (KiB) a block may opt in to, by arch (CUDA programming guide, compute capabilities table)
_OPTIN_SHARED = {"sm_80": 163, "sm_86": 99, "sm_87": 163, "sm_89": 99, "sm_90": 227}
# SMs of the usual part of an arch, for a renderer without a device (A100 108, A10 72, L4 58, H100 SXM / H200 132)
_SMS = {"sm_80": 108, "sm_86": 72, "sm_89": 58, "sm_90": 132}


def _smem_align(u: UOp) -> int:
    assert isinstance(u.dtype, PtrDType)
    return 1024 if (u.dtype.size * u.dtype.base.itemsize) % 1024 == 0 else 16


# STAGE's pipelined tiles (tc/stage.py): 16-byte copies global -> shared without registers, zero-filled when `on` is
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
    "__tg_fence_proxy_async": (  # this thread's shared-memory writes, made visible to the async proxy (wgmma)
        "__device__ inline void __tg_fence_proxy_async() "
        '{ asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }'
    ),
    "__tg_wgmma_desc": (  # a warpgroup MMA's shared-memory matrix descriptor (the PTX ISA's 64-bit layout)
        "__device__ inline unsigned long long __tg_wgmma_desc(const void* p, unsigned lbo, unsigned sbo, "
        "unsigned mode) {\n"
        f"  unsigned long long a = {_SMEM}(p);\n"
        "  return ((a & 0x3FFFF) >> 4) | ((unsigned long long)(lbo >> 4) << 16)"
        " | ((unsigned long long)(sbo >> 4) << 32) | ((unsigned long long)mode << 62);\n}"
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
