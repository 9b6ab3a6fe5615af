"""OpenCL C: work-group ids for output axes, __local memory and barriers for GROUP reductions.

half is stored with vload_half/vstore_half and computed in float when the device has no cl_khr_fp16;
double needs cl_khr_fp64. bool buffers are stored as uchar (bool is not allowed in kernel arguments).

>>> OpenCLRenderer().render_dtype(__import__("tg_uop").dtypes.float32.vec(4))
'float4'
"""

from __future__ import annotations

import math

from tg_codegen.renderer.cstyle import CStyleLanguage
from tg_uop import DType, PtrDType, UOp, dtypes


class OpenCLRenderer(CStyleLanguage):
    """OpenCL C 1.2 for the CL device."""

    device = "CL"
    has_local = True
    emulate_bf16 = True
    has_shared = True
    vector_bytes = 32
    kernel_prefix = "__kernel "
    buffer_prefix = "__global "
    smem_prefix = "__local "
    barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
    type_map = {
        dtypes.int8: "char",
        dtypes.uint8: "uchar",
        dtypes.int16: "short",
        dtypes.uint16: "ushort",
        dtypes.uint32: "uint",
        dtypes.int64: "long",
        dtypes.uint64: "ulong",
    }

    def __init__(self, fp16: bool = False, fp64: bool = True) -> None:
        self.fp16, self.fp64 = fp16, fp64
        self.extra_headers = (
            (("#pragma OPENCL EXTENSION cl_khr_fp64 : enable",) if fp64 else ())
            + (("#pragma OPENCL EXTENSION cl_khr_fp16 : enable",) if fp16 else ())
            + ("#define tg_max(a,b) ((a)!=(a)||(b)!=(b) ? (a)+(b) : ((a)>(b)?(a):(b)))",)
            + (() if fp16 else (_ROUND_HALF,))
        )

    def supported_dtypes(self) -> set[DType]:
        """All but float64 on a device without cl_khr_fp64 (half and bfloat16 are computed in float where needed)."""
        return super().supported_dtypes() - (set() if self.fp64 else {dtypes.float64})

    def render_float(self, x: float, dt: DType) -> str:
        # NaN through the `nan()` builtin, not the NAN macro: PoCL 3.1 (LLVM) turns `exp2(v * NAN)` into garbage
        # (1.6e-10, 0.0, ... instead of NaN) while `exp2(v * nan(0u))` gives NaN
        if math.isnan(x):
            return "nan((ulong)0)" if dt == dtypes.float64 else "nan(0u)"
        return super().render_float(x, dt)

    def render_dtype(self, dt: DType) -> str:
        if isinstance(dt, PtrDType):
            base = "uchar" if dt.base == dtypes.bool else self.render_dtype(dt.base)
            if dt.base == dtypes.float16:
                base = "half"
            return base + "*"
        if dt.scalar() == dtypes.float16 and not self.fp16:
            return super().render_dtype(dtypes.float32.vec(dt.count) if dt.count > 1 else dtypes.float32)
        if dt.scalar() == dtypes.bfloat16:  # computed in float, stored as its 16 bits (bf16.py)
            return super().render_dtype(dtypes.uint16.vec(dt.count) if dt.count > 1 else dtypes.uint16)
        if dt.scalar() == dtypes.float64 and not self.fp64:
            raise NotImplementedError("this OpenCL device has no float64 (cl_khr_fp64)")
        return super().render_dtype(dt)

    int_suffix = {dtypes.int32: "", dtypes.uint32: "u", dtypes.int64: "l", dtypes.uint64: "ul"}

    def render_bitcast(self, x: str, src: DType, dt: DType) -> str:
        # without cl_khr_fp16 a half value is a float: its bits go through vload_half/vstore_half (a GGUF block's
        # scale read from its bytes); 16-bit integers only, so the value is exact
        if not self.fp16 and dt == dtypes.float16 and src in (dtypes.uint16, dtypes.int16):
            return f"tg_half_of_bits((ushort)({x}))"
        if not self.fp16 and src == dtypes.float16 and dt in (dtypes.uint16, dtypes.int16):
            return f"(({self.render_dtype(dt)})tg_bits_of_half({x}))"
        return super().render_bitcast(x, src, dt)

    def render_const(self, x: float | int | bool, dt: DType) -> str:
        if dt == dtypes.float16:  # half computes in float here (or converts implicitly with cl_khr_fp16)
            return super().render_const(x, dtypes.float32)
        return super().render_const(x, dt)

    def render_cast(self, x: str, dt: DType) -> str:
        if dt == dtypes.float16 and not self.fp16:  # half lives in a float register: round it like a store would
            return f"tg_round_half((float)({x}))"
        return super().render_cast(x, dt)

    def render_special(self, u: UOp) -> str:
        kind, dim = u.arg[0][:4], u.arg[0][4:]
        return f"get_group_id({dim})" if kind == "gidx" else f"get_local_id({dim})"

    def render_deref(self, ptr: str, dt: DType) -> str:
        if dt.scalar() == dtypes.float16 and not self.fp16:
            if dt.count == 1:
                return f"vload_half(0, {ptr})"
            return f"vload_half{dt.count}(0, {ptr})"
        return f"*{ptr}" if dt.count == 1 else f"vload{dt.count}(0, {ptr})"

    def render_vectorize(self, lanes: list[str], dt: DType) -> str:
        return f"(({self.render_dtype(dt)})({','.join(lanes)}))"

    def render_store(self, ptr: str, value: str, dt: DType) -> str:
        if dt.scalar() == dtypes.float16 and not self.fp16:
            return f"vstore_half{'' if dt.count == 1 else dt.count}({value}, 0, {ptr});"
        return f"*{ptr} = {value};" if dt.count == 1 else f"vstore{dt.count}({value}, 0, {ptr});"

    def render_gep(self, x: str, i: int) -> str:
        return f"{x}.s{i:x}"


# a cast to half on a device without cl_khr_fp16: round through a half in private memory
_ROUND_HALF = (
    "inline float tg_round_half(float x) { ushort h; vstore_half(x, 0, (__private half*)&h); "
    "return vload_half(0, (__private half*)&h); }\n"
    # a half's 16 bits and its value (computed in float): the bitcasts between half and 16-bit integers
    "inline float tg_half_of_bits(ushort h) { return vload_half(0, (__private half*)&h); }\n"
    "inline ushort tg_bits_of_half(float x) { ushort h; vstore_half(x, 0, (__private half*)&h); return h; }"
)
