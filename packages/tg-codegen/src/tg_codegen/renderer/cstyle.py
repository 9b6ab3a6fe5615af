"""C-family renderers. CStyleLanguage holds what C, OpenCL C and CUDA share; subclasses set the dialect.

>>> from tg_codegen.renderer.cstyle import ClangRenderer
>>> ClangRenderer().render_dtype(__import__("tg_uop").dtypes.float32)
'float'
"""

from __future__ import annotations

import math
from collections.abc import Callable

from tg_codegen.renderer import Renderer
from tg_uop import DType, Ops, PtrDType, UOp, dtypes


def _infix(sym: str) -> Callable[..., str]:
    return lambda a, b, dt: f"({a}{sym}{b})"


class CStyleLanguage(Renderer):
    """Renders linear UOps as C-like source: one variable per value, loops as `for`."""

    kernel_prefix: str = ""
    buffer_prefix: str = ""
    buffer_suffix: str = " restrict"
    arg_int_prefix: str = "const int"
    float4: str | None = None
    type_map: dict[DType, str] = {}
    extra_headers: tuple[str, ...] = ()

    code_for_op: dict[Ops, Callable[..., str]] = {
        Ops.NEG: lambda x, dt: f"(!{x})" if dt == dtypes.bool else f"(-{x})",
        Ops.SQRT: lambda x, dt: f"sqrt({x})",
        Ops.RECIP: lambda x, dt: f"(1/{x})",
        Ops.EXP2: lambda x, dt: f"exp2({x})",
        Ops.LOG2: lambda x, dt: f"log2({x})",
        Ops.SIN: lambda x, dt: f"sin({x})",
        Ops.TRUNC: lambda x, dt: f"trunc({x})",
        Ops.ADD: _infix("+"),
        Ops.SUB: _infix("-"),
        Ops.MUL: _infix("*"),
        Ops.FDIV: _infix("/"),
        Ops.IDIV: _infix("/"),
        Ops.MOD: _infix("%"),
        Ops.CMPLT: _infix("<"),
        Ops.CMPNE: _infix("!="),
        Ops.XOR: _infix("^"),
        Ops.OR: _infix("|"),
        Ops.AND: _infix("&"),
        Ops.SHL: _infix("<<"),
        Ops.SHR: _infix(">>"),
        Ops.MAX: lambda a, b, dt: f"(({a}>{b})?{a}:{b})" if not dtypes.is_float(dt) else f"tg_max({a},{b})",
        Ops.WHERE: lambda c, a, b, dt: f"({c}?{a}:{b})",
        Ops.MULACC: lambda a, b, c, dt: f"(({a}*{b})+{c})",
    }

    # ---- pieces a dialect may override ----
    def render_dtype(self, dt: DType) -> str:
        if isinstance(dt, PtrDType):
            return self.render_dtype(dt.base) + "*"
        if dt.count > 1:
            return self.type_map.get(dt.scalar(), dt.scalar().name).replace(" ", "_") + str(dt.count)
        return self.type_map.get(dt, dt.name)

    def render_const(self, x: float | int | bool, dt: DType) -> str:
        if dt == dtypes.bool:
            return "1" if x else "0"
        if dtypes.is_float(dt):
            if math.isnan(x):
                val = "NAN"
            elif math.isinf(x):
                val = ("-" if x < 0 else "") + "INFINITY"
            else:
                val = f"{float(x)!r}" if dt == dtypes.float64 else f"{float(x)!r}f"
            return val if dt in (dtypes.float32, dtypes.float64) else f"(({self.render_dtype(dt)}){val})"
        if dt == dtypes.int64:
            return f"{int(x)}ll"
        if dt == dtypes.uint64:
            return f"{int(x)}ull"
        if dt == dtypes.uint32:
            return f"{int(x)}u"
        if dt == dtypes.int32 and x == dtypes.min(dtypes.int32):
            return "(-2147483647-1)"
        return str(int(x)) if dt in (dtypes.int32,) else f"(({self.render_dtype(dt)}){int(x)})"

    def render_cast(self, x: str, dt: DType) -> str:
        return f"(({self.render_dtype(dt)})({x}))"

    def render_bitcast(self, x: str, src: DType, dt: DType) -> str:
        return f"__builtin_bit_cast({self.render_dtype(dt)}, ({self.render_dtype(src)})({x}))"

    def render_kernel(self, function_name: str, body: list[str], params: list[tuple[str, DType, bool]]) -> str:
        args = []
        for name, dt, mutable in params:
            if isinstance(dt, PtrDType):
                const = "" if mutable else "const "
                args.append(f"{self.buffer_prefix}{const}{self.render_dtype(dt)}{self.buffer_suffix} {name}")
            else:
                args.append(f"{self.arg_int_prefix} {name}")
        lines = [*self.extra_headers, f"{self.kernel_prefix}void {function_name}({', '.join(args)}) {{", *body, "}"]
        return "\n".join(lines)

    def render_special(self, u: UOp) -> str:
        raise NotImplementedError(f"{type(self).__name__} has no launch ids (SPECIAL)")

    # ---- the driver ----
    def render(self, name: str, uops: list[UOp]) -> str:
        names: dict[UOp, str] = {}
        counters: dict[str, int] = {}
        body: list[str] = []
        params: list[tuple[str, DType, bool]] = []
        stored = {u.src[0].src[0] for u in uops if u.op is Ops.STORE}
        indent = 1

        def fresh(prefix: str) -> str:
            counters[prefix] = counters.get(prefix, 0) + 1
            return f"{prefix}{counters[prefix] - 1}"

        def line(text: str) -> None:
            body.append("  " * indent + text)

        for u in uops:
            op, src = u.op, u.src
            r = [names.get(s, "") for s in src]
            if op is Ops.DEFINE_GLOBAL:
                names[u] = f"data{u.arg}"
                params.append((names[u], u.dtype, u in stored))
            elif op is Ops.DEFINE_VAR:
                names[u] = u.arg[0]
                params.append((u.arg[0], u.dtype, False))
            elif op is Ops.CONST:
                names[u] = self.render_const(u.arg, u.dtype)
            elif op is Ops.SPECIAL:
                names[u] = u.arg
                line(f"int {u.arg} = {self.render_special(u)}; /* {r[0]} */")
            elif op is Ops.RANGE:
                names[u] = f"ridx{u.arg[0]}"
                line(f"for (int {names[u]} = 0; {names[u]} < {r[0]}; {names[u]}++) {{")
                indent += 1
            elif op is Ops.ENDRANGE:
                indent -= 1
                line("}")
            elif op is Ops.INDEX:
                names[u] = f"({r[0]}+{r[1]})"
            elif op is Ops.LOAD:
                names[u] = fresh("val")
                ld = f"*{r[0]}"
                if len(src) > 1:
                    ld = f"({r[1]}?{ld}:{self.render_const(0, u.dtype)})"
                line(f"{self.render_dtype(u.dtype)} {names[u]} = {ld};")
            elif op is Ops.STORE:
                st = f"*{r[0]} = {r[1]};"
                line(f"if ({r[2]}) {{ {st} }}" if len(src) > 2 else st)
            elif op is Ops.DEFINE_ACC:
                names[u] = fresh("acc")
                line(f"{self.render_dtype(u.dtype)} {names[u]} = {r[0]};")
            elif op is Ops.ASSIGN:
                names[u] = r[0]
                line(f"{r[0]} = {r[1]};")
            elif op is Ops.CAST:
                names[u] = fresh("cast")
                line(f"{self.render_dtype(u.dtype)} {names[u]} = {self.render_cast(r[0], u.dtype)};")
            elif op is Ops.BITCAST:
                names[u] = fresh("bcast")
                line(f"{self.render_dtype(u.dtype)} {names[u]} = {self.render_bitcast(r[0], src[0].dtype, u.dtype)};")
            elif op in self.code_for_op:
                names[u] = fresh("alu")
                expr = self.code_for_op[op](*r, src[-1].dtype if op is Ops.WHERE else src[0].dtype)
                line(f"{self.render_dtype(u.dtype)} {names[u]} = {expr};")
            elif op in (Ops.SINK, Ops.NOOP):
                continue
            else:
                raise NotImplementedError(f"{type(self).__name__} cannot render {op}")
        # buffers are passed by DEFINE_GLOBAL index, whatever order the linearizer met them in (vars stay last)
        order = {names[g]: g.arg for g in uops if g.op is Ops.DEFINE_GLOBAL}
        params.sort(key=lambda p: order.get(p[0], len(order)))
        return self.render_kernel(name, body, params)


class ClangRenderer(CStyleLanguage):
    """C for the CPU device (gcc or clang)."""

    device = "CPU"
    type_map = {dtypes.bool: "_Bool", dtypes.float16: "_Float16", dtypes.bfloat16: "__bf16"}
    extra_headers = (
        "#include <math.h>",
        "#define tg_max(a,b) ((a)!=(a)||(b)!=(b) ? (a)+(b) : ((a)>(b)?(a):(b)))",
    )
    code_for_op = {
        **CStyleLanguage.code_for_op,
        Ops.SQRT: lambda x, dt: f"sqrt{_fsuffix(dt)}({x})",
        Ops.EXP2: lambda x, dt: f"exp2{_fsuffix(dt)}({x})",
        Ops.LOG2: lambda x, dt: f"log2{_fsuffix(dt)}({x})",
        Ops.SIN: lambda x, dt: f"sin{_fsuffix(dt)}({x})",
        Ops.TRUNC: lambda x, dt: f"trunc{_fsuffix(dt)}({x})",
    }

    def render_bitcast(self, x: str, src: DType, dt: DType) -> str:
        # a union compound literal: plain C99 that gcc accepts (gcc's C has no __builtin_bit_cast)
        return f"((union {{ {self.render_dtype(src)} a; {self.render_dtype(dt)} b; }}){{ .a = ({x}) }}).b"


def _fsuffix(dt: DType) -> str:
    return "" if dt == dtypes.float64 else "f"
