"""get_program: kernel AST -> Kernel -> lowered graph -> linear UOps -> source, as a ProgramSpec.

>>> from tg_codegen.program import get_program  # doctest: +SKIP
"""

from __future__ import annotations

from tg_codegen.axes import AxisType
from tg_codegen.bf16 import emulate_bf16
from tg_codegen.gpudims import launch_dims
from tg_codegen.heuristic import hand_coded_optimizations
from tg_codegen.kernel import Kernel
from tg_codegen.linearize import linearize
from tg_codegen.lowerer import Lowerer
from tg_codegen.opt import Opt
from tg_codegen.renderer import KernelParamError, ProgramSpec, Renderer, buffer_params, estimate
from tg_codegen.tc.lower import lower_tc
from tg_codegen.wideload import widen_loads
from tg_uop import DType, Ops, PtrDType, UOp
from tg_uop.helpers import DEBUG, NOOPT, ContextVar
from tg_uop.trace import TRACE


def optimized_kernel(ast: UOp, renderer: Renderer, opts: list[Opt] | tuple[Opt, ...] | None = None) -> Kernel:
    """The Kernel for `ast` with `opts` applied; None means the hand-coded heuristics (none under NOOPT=1)."""
    if renderer.emulate_bf16:
        ast = emulate_bf16(ast)
    k = Kernel(ast, renderer)
    if opts is None:
        with TRACE.hidden():  # the heuristics try opts on copies: not passes of this kernel
            opts = [] if NOOPT else hand_coded_optimizations(k)
            if OPT_FUZZ and not NOOPT:
                from tg_codegen.search import fuzz_opts

                opts = fuzz_opts(k, opts, OPT_FUZZ.value)
    return k.apply_opts(opts)


# OPT_FUZZ=n (n > 0): the heuristics' opts plus a few random actions of BEAM's space, drawn from a generator seeded
# by n and the kernel (search.fuzz_opts); the codegen fuzzer (tests/test_codegen_fuzz.py) covers the opt space so
OPT_FUZZ = ContextVar("OPT_FUZZ", 0)


def get_program(
    ast: UOp, renderer: Renderer, name_override: str | None = None, opts: list[Opt] | tuple[Opt, ...] | None = None
) -> ProgramSpec:
    """Compile-ready program for a kernel AST, rendered for `renderer` (see `optimized_kernel` for `opts`).

    Every graph pass the kernel goes through is a named `graph_rewrite` or `run_pass`; DEBUG=5 prints
    their names in order (`kernel_passes` returns them).
    """
    if DEBUG >= 5 and TRACE.passes is None:
        with TRACE.collect_passes() as passes:
            spec = get_program(ast, renderer, name_override, opts)
        print(f"{spec.name} passes: {' -> '.join(passes)}")
        return spec
    start_us = TRACE.now_us()
    TRACE.graph_step("kernel AST (from the scheduler)", ast)
    spec = program_for_kernel(optimized_kernel(ast, renderer, opts), name_override)
    TRACE.event(spec.name, "codegen", spec.device, start_us, TRACE.now_us() - start_us)
    return spec


def kernel_passes(ast: UOp, renderer: Renderer, opts: list[Opt] | tuple[Opt, ...] | None = None) -> list[str]:
    """The names of the graph passes `get_program` runs on `ast`, in order (what DEBUG=5 prints).

    >>> from tg_codegen import ClangRenderer
    >>> from tg_shape import ShapeTracker
    >>> from tg_uop import dtypes
    >>> view = UOp(Ops.VIEW, arg=ShapeTracker.from_shape((4,)))
    >>> out, inp = (UOp(Ops.DEFINE_GLOBAL, dtypes.float32.ptr(), (), i) for i in (0, 1))
    >>> load = UOp(Ops.LOAD, dtypes.float32, (inp, view))
    >>> ast = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (out, view, load)),))
    >>> kernel_passes(ast, ClangRenderer(), opts=[])  # doctest: +NORMALIZE_WHITESPACE
    ['fold one-hot gathers', 'lower: indexing, ranges, loads and stores', 'simplify lowered kernel',
     'drop true gates', 'expand reduces']
    """
    with TRACE.collect_passes() as passes:
        get_program(ast, renderer, opts=opts)
    return passes


def lower(k: Kernel) -> UOp:
    """The lowered SINK for a kernel (tensor-core kernels by tc.lower, the others by the Lowerer)."""
    if k.axes_of(AxisType.TCK):
        return lower_tc(k)
    sink = Lowerer(k).lower()
    return widen_loads(sink) if k.opts.supports_float4 else sink  # (a named pass)


def program_for_kernel(k: Kernel, name_override: str | None = None) -> ProgramSpec:
    """Lower, linearize and render an (optimized) Kernel."""
    renderer = k.opts
    if DEBUG >= 3:
        print(f"{k.name}: full_shape={k.full_shape} axes={k.axis_types} opts={k.applied_opts}")
        print(k.ast)
    if TRACE.active:
        TRACE.text_step("optimizations", f"full_shape={k.full_shape}\naxes={k.axis_types}\nopts={k.applied_opts}")
    lowered = lower(k)
    TRACE.graph_step("lowered (indexing, ranges, loads and stores)", lowered)
    uops = with_every_buffer(k, linearize(lowered))
    if DEBUG >= 5:
        print(format_linear(uops))
    name = name_override or k.name
    function_name = k.function_name if name_override is None else name_override
    src = renderer.render(function_name, uops)
    if TRACE.active:
        TRACE.text_step("linearized", format_linear(uops))
        TRACE.text_step("source", src)
        if (g := TRACE.current) is not None:
            g.meta.update(shape=list(k.full_shape), opts=[str(o) for o in k.applied_opts])
    if DEBUG >= 4:
        print(src)
    ops, mem = estimate(uops)
    bufs = buffer_params(name, uops)
    stored = (u.src[0].src[0] for u in uops if u.op is Ops.STORE)
    outs = tuple(sorted({b.arg for b in stored if b.op is Ops.DEFINE_GLOBAL}))
    return ProgramSpec(
        global_size=launch_dims(uops, "gidx") or ((1,) if renderer.has_local else None),
        local_size=launch_dims(uops, "lidx") or ((1,) if renderer.has_local else None),
        name=name,
        function_name=function_name,
        src=src,
        device=renderer.device,
        uops=tuple(uops),
        globals=tuple(b.arg for b in bufs),
        buffer_dtypes=tuple(_element(b.dtype) for b in bufs),
        outs=outs,
        vars=tuple(u for u in uops if u.op is Ops.DEFINE_VAR),
        estimated_ops=ops,
        estimated_mem=mem,
        applied_opts=tuple(k.applied_opts),
        shared_bytes=renderer.dynamic_shared_bytes(uops),
    )


def with_every_buffer(k: Kernel, uops: list[UOp]) -> list[UOp]:
    """The linear program declaring every buffer of the kernel AST, used or not.

    The launcher passes one buffer per DEFINE_GLOBAL of the AST, in number order. When simplification
    deletes the last use of one (`c.where(b, b) -> b` drops the load of `c`), its DEFINE_GLOBAL is put
    back so the signature still has that parameter and later arguments do not shift.
    """
    ast_bufs = buffer_params(k.name, k.bufs)
    used = {u.arg: u for u in uops if u.op is Ops.DEFINE_GLOBAL}
    for arg, u in used.items():
        if arg >= len(ast_bufs) or _element(ast_bufs[arg].dtype) != _element(u.dtype):
            raise KernelParamError(f"kernel {k.name}: the program uses data{arg} ({u.dtype}), not a buffer of its AST")
    return [b for b in ast_bufs if b.arg not in used] + uops


def _element(dt: DType) -> DType:
    return dt.base if isinstance(dt, PtrDType) else dt


def format_linear(uops: list[UOp]) -> str:
    """The linear program, one UOp per line: index, op, dtype, source indices, arg (as DEBUG=5 prints it)."""
    index = {u: i for i, u in enumerate(uops)}
    lines = []
    for i, u in enumerate(uops):
        srcs = [index[s] for s in u.src if s in index]
        lines.append(f"{i:4d} {u.op.name:<14s} {u.dtype!r:<24s} {srcs!s:<16s} {u.arg!r}")
    return "\n".join(lines)
