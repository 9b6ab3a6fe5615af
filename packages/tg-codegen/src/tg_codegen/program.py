"""get_program: kernel AST -> Kernel -> lowered graph -> linear UOps -> source, as a ProgramSpec.

>>> from tg_codegen.program import get_program  # doctest: +SKIP
"""

from __future__ import annotations

from tg_codegen.gpudims import add_gpudims
from tg_codegen.kernel import Kernel
from tg_codegen.linearize import linearize
from tg_codegen.lowerer import lower
from tg_codegen.renderer import ProgramSpec, Renderer, estimate
from tg_uop import Ops, UOp
from tg_uop.helpers import DEBUG


def get_program(ast: UOp, renderer: Renderer, name_override: str | None = None) -> ProgramSpec:
    """Compile-ready program for a kernel AST, rendered for `renderer`."""
    k = Kernel(ast)
    if DEBUG >= 3:
        print(f"{k.name}: full_shape={k.full_shape} first_reduce={k.first_reduce}")
        print(k.ast)
    lowered, launch = add_gpudims(lower(k), renderer)
    uops = linearize(lowered)
    if DEBUG >= 5:
        for i, u in enumerate(uops):
            srcs = [uops.index(s) for s in u.src if s in uops]
            print(f"{i:4d} {u.op.name:<14s} {u.dtype!r:<24s} {srcs!s:<16s} {u.arg!r}")
    name = name_override or k.name
    function_name = k.function_name if name_override is None else name_override
    src = renderer.render(function_name, uops)
    if DEBUG >= 4:
        print(src)
    ops, mem = estimate(uops)
    bufs = [u for u in uops if u.op is Ops.DEFINE_GLOBAL]
    outs = tuple(sorted({u.src[0].src[0].arg for u in uops if u.op is Ops.STORE}))
    return ProgramSpec(
        name=name,
        function_name=function_name,
        src=src,
        device=renderer.device,
        uops=tuple(uops),
        globals=tuple(b.arg for b in bufs),
        outs=outs,
        global_size=launch[0] if launch else None,
        local_size=launch[1] if launch else None,
        vars=tuple(u for u in uops if u.op is Ops.DEFINE_VAR),
        estimated_ops=ops,
        estimated_mem=mem,
    )
