"""C-family renderers. CStyleLanguage holds what C, OpenCL C and CUDA share; subclasses set the dialect.

>>> from tg_codegen.renderer.cstyle import ClangRenderer
>>> ClangRenderer().render_dtype(__import__("tg_uop").dtypes.float32)
'float'
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from tg_codegen.axes import RangeKind
from tg_codegen.renderer import OperandLayout, Renderer, buffer_params
from tg_uop import DType, Ops, PtrDType, UOp, dtypes
from tg_uop.dtype import truncate_const


def _infix(sym: str) -> Callable[..., str]:
    return lambda a, b, dt: f"({a}{sym}{b})"


_UNSIGNED = dict(zip(dtypes.sints, dtypes.uints))


def _nonzero_divisor(d: UOp) -> bool:
    """A divisor that is never 0 or -1, so C's / and % are defined for every dividend."""
    return bool(d.vmin > 0 or d.vmax < -1)


@dataclass
class ThreadLoop:
    """Where a kernel's THREAD loop is in its rendered body: the `for` line, its closing `}`, variable, bound, type."""

    start: int
    end: int
    var: str
    bound: str
    dtype: str


class CStyleLanguage(Renderer):
    """Renders linear UOps as C-like source: one variable per value, loops as `for`."""

    kernel_prefix: str = ""
    buffer_prefix: str = ""
    buffer_suffix: str = " restrict"
    arg_int_prefix: str = "const int"
    type_map: dict[DType, str] = {}
    extra_headers: tuple[str, ...] = ()
    smem_prefix: str = ""  # declares local (shared) memory
    barrier: str = ""  # waits for every thread of the workgroup

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

    # integer dtypes written as plain literals with this suffix (others are casts of an int literal)
    int_suffix: dict[DType, str] = {dtypes.int32: "", dtypes.uint32: "u", dtypes.int64: "ll", dtypes.uint64: "ull"}

    def render_const(self, x: float | int | bool, dt: DType) -> str:
        """A literal that can stand next to any operator: a negative value is parenthesized (`a-(-2.0f)`,
        never `a--2.0f`), a type's minimum is written as `(-MAX-1)`, NaN and +-inf use the NAN/INFINITY
        macros, -0.0 keeps its sign, an int wraps into its dtype's range (the value the dtype holds)."""
        if dt == dtypes.bool:
            return "1" if x else "0"
        if dtypes.is_float(dt):
            val = self.render_float(float(x), dt)
            return val if dt in (dtypes.float32, dtypes.float64) else f"(({self.render_dtype(dt)}){val})"
        v = int(truncate_const(int(x), dt))
        if (suffix := self.int_suffix.get(dt)) is None:
            return f"(({self.render_dtype(dt)}){v})"  # small ints: `((short)-2)` is a cast of an int literal
        if v == dtypes.min(dt) and v < 0:  # the literal 2147483648 does not fit the type: negate MAX and subtract 1
            return f"({v + 1}{suffix}-1{suffix})"
        return f"({v}{suffix})" if v < 0 else f"{v}{suffix}"

    def render_float(self, x: float, dt: DType) -> str:
        """A float literal; float16/bfloat16 values are exact in float32 and are written as float32 literals."""
        if math.isnan(x):
            return "NAN"
        if math.isinf(x):
            return "INFINITY" if x > 0 else "(-INFINITY)"
        if dt == dtypes.float64:
            text = repr(x)
        else:  # the float32 value itself, so the C compiler's decimal conversion cannot round a second time
            text = repr(truncate_const(x, dtypes.float32)) + "f"
        return f"({text})" if math.copysign(1.0, x) < 0 else text

    def render_cast(self, x: str, dt: DType) -> str:
        return f"(({self.render_dtype(dt)})({x}))"

    def render_bitcast(self, x: str, src: DType, dt: DType) -> str:
        return f"__builtin_bit_cast({self.render_dtype(dt)}, ({self.render_dtype(src)})({x}))"

    def render_kernel(
        self,
        function_name: str,
        body: list[str],
        params: list[tuple[str, DType, bool]],
        vec_dts: tuple[DType, ...] = (),
    ) -> str:
        lines = [
            *self.extra_headers,
            *self.render_vector_types(list(vec_dts)),
            f"{self.kernel_prefix}void {function_name}({', '.join(self.render_params(params))}) {{",
            *body,
            "}",
        ]
        return "\n".join(lines)

    def render_params(self, params: list[tuple[str, DType, bool]]) -> list[str]:
        """The kernel's parameter declarations: buffers (const where only read), then ints."""
        args = []
        for name, dt, mutable in params:
            if isinstance(dt, PtrDType):
                const = "" if mutable else "const "
                args.append(f"{self.buffer_prefix}{const}{self.render_dtype(dt)}{self.buffer_suffix} {name}")
            else:
                args.append(f"{self.arg_int_prefix} {name}")
        return args

    # ---- vectors (a vector dtype has count > 1) ----
    native_vector_ops: frozenset[Ops] = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.NEG})

    def render_deref(self, ptr: str, dt: DType) -> str:
        """`*ptr` for a scalar, a wide access for a vector."""
        return f"*{ptr}" if dt.count == 1 else f"*(({self.render_dtype(dt)}*){ptr})"

    def render_store(self, ptr: str, value: str, dt: DType) -> str:
        return f"{self.render_deref(ptr, dt)} = {value};"

    def render_load(self, ptr: str, dt: DType) -> str:
        """The value at `ptr` (an expression of the value type, also in a gated load's conditional)."""
        return self.render_deref(ptr, dt)

    def render_gep(self, x: str, i: int) -> str:
        return f"{x}[{i}]"

    def render_vectorize(self, lanes: list[str], dt: DType) -> str:
        return f"(({self.render_dtype(dt)}){{{','.join(lanes)}}})"

    def render_local(self, u: UOp) -> str:
        """The declaration of a DEFINE_LOCAL (a workgroup's shared buffer)."""
        assert isinstance(u.dtype, PtrDType)
        return f"{self.smem_prefix}{self.render_dtype(u.dtype.base)} {u.arg}[{u.dtype.size}];"

    def render_wmma(self, arg: str, r: list[str], src: tuple[UOp, ...]) -> str:
        """A tensor-core op (arg: the tensor core's name); renderers with tensor cores override it."""
        return self.render_alu(Ops.WMMA, r, src)

    def render_alu(self, op: Ops, r: list[str], src: tuple[UOp, ...]) -> str:
        """One ALU op; on vectors without a native operator it is written lane by lane."""
        sdt = src[-1].dtype if op is Ops.WHERE else src[0].dtype
        n = max(s.dtype.count for s in src)
        code = self.code_for_op[op]
        if op in (Ops.IDIV, Ops.MOD) and not _nonzero_divisor(src[1]):
            code = self._guarded_divmod(op)
        if n == 1 or op in self.native_vector_ops or (op is Ops.WHERE and src[0].dtype.count == 1):
            return str(code(*r, sdt.scalar()))  # (a scalar condition selects a whole vector: `c ? a : b`)
        lanes = [code(*(self.render_gep(x, i) for x in r), sdt.scalar()) for i in range(n)]
        return self.render_vectorize(lanes, src[0].dtype.scalar().vec(n))

    def _guarded_divmod(self, op: Ops) -> Callable[..., str]:
        """Integer // and % with tg's defined results where C has none: x // 0 and x % 0 are 0, and
        MIN // -1 wraps to MIN (MIN % -1 is 0), as numpy gives them (and exec_alu folds them)."""

        def render(a: str, b: str, dt: DType) -> str:
            t = self.render_dtype(dt)
            if op is Ops.MOD:
                bad = f"({b})==0" if dtypes.is_unsigned(dt) else f"({b})==0||({b})==-1"
                return f"(({bad})?({t})0:({a})%({b}))"
            if dtypes.is_unsigned(dt):
                return f"(({b})==0?({t})0:({a})/({b}))"
            u = self.render_dtype(_UNSIGNED[dt])  # -MIN overflows; negate in unsigned arithmetic instead
            return f"(({b})==0?({t})0:({b})==-1?({t})(0-({u})({a})):({a})/({b}))"

        return render

    def render_vector_cast(self, x: str, dt: DType, src: DType | None = None) -> str:
        """`x` (of dtype `src`) cast to `dt`, lane by lane for vectors."""
        if dt.count == 1:
            return self.render_value_cast(x, dt, src)
        lane = src.scalar() if src is not None else None
        return self.render_vectorize(
            [self.render_value_cast(self.render_gep(x, i), dt.scalar(), lane) for i in range(dt.count)], dt
        )

    def render_value_cast(self, x: str, dt: DType, src: DType | None) -> str:
        """A scalar cast from `src` (None: unknown) to `dt`; dialects route some pairs through another type."""
        return self.render_cast(x, dt)

    def render_vector_types(self, dts: list[DType]) -> list[str]:
        """Declarations a dialect needs before using these vector dtypes."""
        return []

    def render_special(self, u: UOp) -> str:
        raise NotImplementedError(f"{type(self).__name__} has no launch ids (SPECIAL)")

    # ---- the driver ----
    def render(self, name: str, uops: list[UOp]) -> str:
        buffer_params(name, uops)  # refuses a gap in data0..data{n-1}: later arguments would shift
        names: dict[UOp, str] = {}
        counters: dict[str, int] = {}
        body: list[str] = []
        params: list[tuple[str, DType, bool]] = []
        stored = {u.src[0].src[0] for u in uops if u.op is Ops.STORE}
        indent = 1
        thread: ThreadLoop | None = None  # the THREAD loop, when one runs at the top level of the kernel

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
            elif op is Ops.DEFINE_VAR:  # any Variable name ("start pos", "int", "alu0") as a distinct C name
                names[u] = fresh("var_" + "".join(c if c.isalnum() else "_" for c in str(u.arg[0])) + "_")
                params.append((names[u], u.dtype, False))
            elif op is Ops.CONST:
                names[u] = self.render_const(u.arg, u.dtype)
            elif op is Ops.SPECIAL:
                names[u] = u.arg[0]
                line(f"int {u.arg[0]} = {self.render_special(u)}; /* {r[0]} */")
            elif op is Ops.DEFINE_LOCAL:
                names[u] = u.arg
                assert isinstance(u.dtype, PtrDType)
                line(self.render_local(u))
            elif op is Ops.BARRIER:
                line(self.barrier)
            elif op is Ops.RANGE:
                names[u] = f"ridx{u.arg[0]}"
                if u.arg[1] == RangeKind.THREAD and indent == 1 and thread is None:
                    thread = ThreadLoop(len(body), -1, names[u], r[0], self.render_dtype(u.dtype))
                line(f"for ({self.render_dtype(u.dtype)} {names[u]} = 0; {names[u]} < {r[0]}; {names[u]}++) {{")
                indent += 1
            elif op is Ops.ENDRANGE:
                indent -= 1
                if thread is not None and names[src[0]] == thread.var:
                    thread.end = len(body)
                line("}")
            elif op is Ops.INDEX:
                names[u] = f"({r[0]}+{r[1]})"
            elif op is Ops.LOAD:
                names[u] = fresh("val")
                ld = self.render_load(r[0], u.dtype)
                if len(src) > 1:
                    zero = self.render_const(0, u.dtype.scalar())
                    zero = zero if u.dtype.count == 1 else self.render_vectorize([zero] * u.dtype.count, u.dtype)
                    ld = f"({r[1]}?{ld}:{zero})"
                line(f"{self.render_dtype(u.dtype)} {names[u]} = {ld};")
            elif op is Ops.STORE:
                st = self.render_store(r[0], r[1], src[1].dtype)
                line(f"if ({r[2]}) {{ {st} }}" if len(src) > 2 else st)
            elif op is Ops.VECTORIZE:
                names[u] = fresh("vec")
                line(f"{self.render_dtype(u.dtype)} {names[u]} = {self.render_vectorize(r, u.dtype)};")
            elif op is Ops.GEP:
                names[u] = self.render_gep(r[0], u.arg[0])
            elif op is Ops.DEFINE_ACC:
                names[u] = fresh("acc")
                line(f"{self.render_dtype(u.dtype)} {names[u]} = {r[0]};")
            elif op is Ops.ASSIGN:
                names[u] = r[0]
                line(f"{r[0]} = {r[1]};")
            elif op is Ops.CAST:
                names[u] = fresh("cast")
                cast = self.render_vector_cast(r[0], u.dtype, src[0].dtype)
                line(f"{self.render_dtype(u.dtype)} {names[u]} = {cast};")
            elif op is Ops.BITCAST:
                names[u] = fresh("bcast")
                line(f"{self.render_dtype(u.dtype)} {names[u]} = {self.render_bitcast(r[0], src[0].dtype, u.dtype)};")
            elif op is Ops.WMMA:
                names[u] = fresh("alu")
                line(f"{self.render_dtype(u.dtype)} {names[u]} = {self.render_wmma(str(u.arg), r, src)};")
            elif op in self.code_for_op:
                names[u] = fresh("alu")
                line(f"{self.render_dtype(u.dtype)} {names[u]} = {self.render_alu(op, r, src)};")
            elif op is Ops.CUSTOM:  # arg: C text with {0}, {1}... for the sources and {T} for the dtype
                text = str(u.arg).format(*r, T=self.render_dtype(u.dtype))
                if u.dtype == dtypes.void:
                    line(f"{text};")
                else:
                    names[u] = fresh("cust")
                    line(f"{self.render_dtype(u.dtype)} {names[u]} = {text};")
            elif op in (Ops.SINK, Ops.NOOP):
                continue
            else:
                raise NotImplementedError(f"{type(self).__name__} cannot render {op}")
        # buffers are passed by DEFINE_GLOBAL index, whatever order the linearizer met them in (vars stay last)
        order = {names[g]: g.arg for g in uops if g.op is Ops.DEFINE_GLOBAL}
        params.sort(key=lambda p: order.get(p[0], len(order)))
        vec_dts = tuple(sorted({u.dtype for u in uops if u.dtype.count > 1 and not isinstance(u.dtype, PtrDType)}))
        if thread is not None and thread.end == len(body) - 1:  # (nothing after the thread loop)
            return self.render_threaded(name, body, params, vec_dts, thread)
        return self.render_kernel(name, body, params, vec_dts)

    def render_threaded(
        self,
        function_name: str,
        body: list[str],
        params: list[tuple[str, DType, bool]],
        vec_dts: tuple[DType, ...],
        thread: ThreadLoop,
    ) -> str:
        """A kernel whose iterations of its outermost loop (`thread`) run on CPU threads; here, one after another."""
        return self.render_kernel(function_name, body, params, vec_dts)


class ClangRenderer(CStyleLanguage):
    """C for the CPU device (gcc or clang)."""

    device = "CPU"
    has_threads = True
    # gcc 12 has no __bf16 arithmetic: bf16 is computed in float and stored as its 16 bits (bf16.py), as tinygrad does
    emulate_bf16 = True
    type_map = {dtypes.bool: "_Bool", dtypes.float16: "_Float16", dtypes.bfloat16: "unsigned short"}
    # no <math.h>: reading it is ~12 ms of every compiler run. Its INFINITY and NAN are these builtins, and the
    # maths functions are the compiler's builtins of the same names (calls into libm where not inlined)
    extra_headers = (
        "#define INFINITY (__builtin_inff())",
        '#define NAN (__builtin_nanf(""))',
        "#define tg_max(a,b) ((a)!=(a)||(b)!=(b) ? (a)+(b) : ((a)>(b)?(a):(b)))",
    )
    code_for_op = {
        **CStyleLanguage.code_for_op,
        Ops.SQRT: lambda x, dt: f"__builtin_sqrt{_fsuffix(dt)}({x})",
        Ops.EXP2: lambda x, dt: f"__builtin_exp2{_fsuffix(dt)}({x})",
        Ops.LOG2: lambda x, dt: f"__builtin_log2{_fsuffix(dt)}({x})",
        Ops.SIN: lambda x, dt: f"__builtin_sin{_fsuffix(dt)}({x})",
        Ops.TRUNC: lambda x, dt: f"__builtin_trunc{_fsuffix(dt)}({x})",
    }

    def operand_layout(self, dtype: DType) -> OperandLayout:
        """Panels of 16 columns, the register tile's vector width (16 floats, two AVX2 vectors). bench/bench_cpu.py,
        one core: matmul 2048 16 -> 99 GFLOPS packed (numpy 102): unpacked, a 16-column strip of a 2048-wide w
        touches a new 4 KB page every step of k and maps onto a few cache sets."""
        return OperandLayout(panel=16)

    def render_value_cast(self, x: str, dt: DType, src: DType | None) -> str:
        """With `__fp16` (clang 14), a half converts to and from anything but float through float: clang calls the
        runtime's conversion helpers for the other pairs (double -> half: gcc's libgcc returns them in another
        register than clang 14 reads, and 0.5 came out as 0)."""
        half, f32 = dtypes.float16, dtypes.float32
        if self.type_map.get(half) == "__fp16" and src is not None and half in (dt, src) and f32 not in (dt, src):
            return self.render_cast(self.render_cast(x, f32), dt)
        return self.render_cast(x, dt)

    def render_bitcast(self, x: str, src: DType, dt: DType) -> str:
        # a union compound literal: plain C99 that gcc accepts (gcc's C has no __builtin_bit_cast)
        return f"((union {{ {self.render_dtype(src)} a; {self.render_dtype(dt)} b; }}){{ .a = ({x}) }}).b"

    vector_bytes = 32  # AVX2-sized vectors by default (wider ones spill without AVX-512's 32 registers)

    def render_dtype(self, dt: DType) -> str:
        if dt.count > 1 and not isinstance(dt, PtrDType):
            return f"tg_{super().render_dtype(dt.scalar()).replace(' ', '_')}{dt.count}"
        return super().render_dtype(dt)

    def render_deref(self, ptr: str, dt: DType) -> str:
        """A vector is read and written through its `_u` type, aligned to the element: any address works."""
        return f"*{ptr}" if dt.count == 1 else f"*(({self.render_dtype(dt)}_u*){ptr})"

    def render_load(self, ptr: str, dt: DType) -> str:
        deref = self.render_deref(ptr, dt)
        return deref if dt.count == 1 else f"(({self.render_dtype(dt)}){deref})"

    def render_vector_types(self, dts: list[DType]) -> list[str]:
        """gcc/clang vector extensions: the type of values (naturally aligned) and a `_u` type aligned to the element,
        through which memory is loaded and stored (unaligned moves, any address).

        Values keep the natural alignment: clang's OpenMP outlining reads a vector declared before a parallel loop
        through a pointer with aligned moves, which faulted when an under-aligned type left it at an odd stack slot.
        Float vectors also get a NaN-propagating max built from compares and bit selects (no branches)."""
        lines = []
        for dt in dts:
            lines.append(self._vector_typedef(dt))
            if dtypes.is_float(dt) and (idt := _same_size_int(dt)) is not None:
                lines.append(self._vector_typedef(idt))
                lines.append(self._vector_max(dt, idt))
        return list(dict.fromkeys(lines))

    def _vector_typedef(self, dt: DType) -> str:
        name, scalar = self.render_dtype(dt), self.render_dtype(dt.scalar())
        return (
            f"typedef {scalar} {name} __attribute__((vector_size({dt.itemsize}), may_alias));\n"
            f"typedef {scalar} {name}_u __attribute__((vector_size({dt.itemsize}), aligned({dt.scalar().itemsize}), "
            "may_alias));"
        )

    def _vector_max(self, dt: DType, idt: DType) -> str:
        v, i = self.render_dtype(dt), self.render_dtype(idt)
        return (
            f"static inline {v} tg_vmax_{v}({v} a, {v} b) {{ {i} gt = a > b, nan = (a != a) | (b != b); "
            f"{i} pick = (gt & ({i})a) | (~gt & ({i})b); return ({v})((nan & ({i})(a + b)) | (~nan & pick)); }}"
        )

    def render_alu(self, op: Ops, r: list[str], src: tuple[UOp, ...]) -> str:
        dt = src[0].dtype
        if op is Ops.MAX and dt.count > 1 and dtypes.is_float(dt) and _same_size_int(dt) is not None:
            return f"tg_vmax_{self.render_dtype(dt)}({r[0]},{r[1]})"
        if op in _INT_VECTOR_OPS and dt.count > 1 and all(_wide_int(s.dtype) for s in src):
            return str(self.code_for_op[op](*r, dt.scalar()))  # (a random kernel's Threefry: 3x less source)
        return super().render_alu(op, r, src)

    def render_threaded(
        self,
        function_name: str,
        body: list[str],
        params: list[tuple[str, DType, bool]],
        vec_dts: tuple[DType, ...],
        thread: ThreadLoop,
    ) -> str:
        """The THREAD loop's body as a function of one iteration, run on `threads` threads by the thread pool of
        renderer/threadpool.py: the kernel packs its arguments in a struct and hands the pool that function through
        the pointer `tg_parallel`, which the CPU device sets in each library it loads (unset: the iterations run one
        after another). What comes before the loop (constants) is computed again in each iteration."""
        if self.threads <= 1:
            return self.render_kernel(function_name, body, params, vec_dts)
        args, decls = f"{function_name}_args", self.render_params(params)
        names = [name for name, _, _ in params]
        fields = [
            f"{'' if mutable else 'const '}{self.render_dtype(dt)} {name}"
            if isinstance(dt, PtrDType)
            else f"int {name}"
            for name, dt, mutable in params
        ]
        chunk = [
            f"static void {function_name}_chunk(void* tg_args, int tg_chunk) {{",
            f"  struct {args}* tg_a = (struct {args}*)tg_args;",
            *[f"  {decl} = tg_a->{name};" for decl, name in zip(decls, names)],
            *body[: thread.start],
            f"  {thread.dtype} {thread.var} = tg_chunk;",
            *[text[2:] for text in body[thread.start + 1 : thread.end]],
            "}",
        ]
        lines = [
            *self.extra_headers,
            *self.render_vector_types(list(vec_dts)),
            "void (*tg_parallel)(void (*chunk)(void*, int), void* args, int n, int threads);",
            f"struct {args} {{ {' '.join(f + ';' for f in fields)} }};",
            *chunk,
            f"void {function_name}({', '.join(decls)}) {{",
            f"  struct {args} tg_a = {{{', '.join(names)}}};",
            f"  if (tg_parallel) tg_parallel({function_name}_chunk, &tg_a, {thread.bound}, {self.threads});",
            f"  else for (int tg_i = 0; tg_i < {thread.bound}; tg_i++) {function_name}_chunk(&tg_a, tg_i);",
            "}",
        ]
        return "\n".join(lines)

    def __init__(self, threads: int = 1, vector_bytes: int = 32, half: str = "_Float16") -> None:
        """`threads`: CPU threads of THREAD loops; `vector_bytes`: the widest vector, 32 (AVX2) or 64 where the host
        has AVX-512 (its 32 vector registers hold the wider tiles of heuristic._tile_pair); `half`: the C type of
        float16, `_Float16` or, for compilers without it (clang 14 on x86), the storage type `__fp16`."""
        if not isinstance(threads, int) or threads < 1:
            raise ValueError(f"ClangRenderer: threads must be an int >= 1, got {threads!r}")
        if vector_bytes not in (16, 32, 64):
            raise ValueError(f"ClangRenderer: vector_bytes must be 16, 32 or 64, got {vector_bytes!r}")
        if half not in ("_Float16", "__fp16"):
            raise ValueError(f"ClangRenderer: half must be '_Float16' or '__fp16', got {half!r}")
        self.threads, self.vector_bytes = threads, vector_bytes
        if half != "_Float16":  # (an instance attribute only where it differs: part of the program cache's key)
            self.type_map = {**type(self).type_map, dtypes.float16: half}


# bitwise ops and shifts that the vector extensions apply lane by lane, as written on whole vectors; for 32- and
# 64-bit lanes only, where C's integer promotions make no difference (a short lane shifted by 20 would be 0 as a
# vector lane but not in promoted scalar C)
_INT_VECTOR_OPS = frozenset({Ops.XOR, Ops.OR, Ops.AND, Ops.SHL, Ops.SHR})


def _wide_int(dt: DType) -> bool:
    return dtypes.is_int(dt) and dt.scalar().itemsize >= 4


def _same_size_int(dt: DType) -> DType | None:
    """The int vector type with the float vector's lane size (the result type of its compares)."""
    ints = {4: dtypes.int32, 8: dtypes.int64}
    return ints[dt.scalar().itemsize].vec(dt.count) if dt.scalar().itemsize in ints else None


def _fsuffix(dt: DType) -> str:
    return "" if dt == dtypes.float64 else "f"
