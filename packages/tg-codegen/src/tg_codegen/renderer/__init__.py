"""Renderer base class and ProgramSpec: what a device needs to compile and launch one kernel.

>>> from tg_codegen.renderer.cstyle import ClangRenderer
>>> ClangRenderer().device
'CPU'
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tg_uop import Ops, UOp


@dataclass(frozen=True)
class ProgramSpec:
    """A rendered kernel: source, entry point, launch sizes and the buffers and variables it takes."""

    name: str
    function_name: str
    src: str
    device: str
    uops: tuple[UOp, ...] = ()
    global_size: tuple[int, ...] | None = None
    local_size: tuple[int, ...] | None = None
    globals: tuple[int, ...] = ()
    outs: tuple[int, ...] = ()
    vars: tuple[UOp, ...] = ()
    estimated_ops: int = 0
    estimated_mem: int = 0
    applied_opts: tuple[object, ...] = field(default_factory=tuple)


class Renderer:
    """Turns a linear UOp program into source for one device family. Subclass per language."""

    device: str = ""
    has_local: bool = False  # GPU-style launch grid with local (workgroup) ids
    has_shared: bool = False  # local/shared memory
    has_threads: bool = False  # CPU threads over the outermost loop (OptOps.THREAD)
    threads: int = 1  # how many CPU threads the device runs
    supports_float4: bool = False  # scalar loads of neighbouring addresses merge into wide loads (wideload.py)
    vector_bytes: int = 0  # widest vector dtype (0: none); upcast axes are packed into vectors up to this size
    global_max: tuple[int, ...] | None = None
    local_max: tuple[int, ...] | None = None
    tensor_cores: tuple[object, ...] = ()

    def render(self, name: str, uops: list[UOp]) -> str:
        raise NotImplementedError(f"{type(self).__name__} does not render programs")


def estimate(uops: list[UOp]) -> tuple[int, int]:
    """(ALU ops executed, bytes moved) estimated from the loop trip counts."""
    mult, ops, mem = 1, 0, 0
    for u in uops:
        if u.op is Ops.SPECIAL:
            mult *= u.arg[1]
    stack: list[int] = []
    for u in uops:
        if u.op is Ops.RANGE:
            trips = u.src[0].arg if u.src[0].op is Ops.CONST else 1
            stack.append(trips)
            mult *= trips
        elif u.op is Ops.ENDRANGE:
            mult //= stack.pop() or 1
        elif u.op in (Ops.LOAD, Ops.STORE):
            dt = u.dtype if u.op is Ops.LOAD else u.src[1].dtype
            mem += mult * dt.itemsize
        elif u.op.name in _ALU_NAMES:
            ops += mult * u.dtype.count
    return ops, mem


_ALU_NAMES = {o.name for o in Ops if o.value >= Ops.EXP2.value and o is not Ops.CAST}
