"""The runtime side of BEAM search: compile in worker processes, time candidates on the real device.

>>> from tg_runtime.search import DeviceSearchTarget  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable

from tg_codegen.renderer import ProgramSpec
from tg_runtime.device import Buffer, Device, program_extra
from tg_uop import DType, Ops, UOp


def buffer_sizes(ast: UOp) -> dict[int, tuple[int, DType]]:
    """Per DEFINE_GLOBAL number: (elements the kernel may touch, dtype), from its views' largest index."""
    sizes: dict[int, tuple[int, DType]] = {}
    for u in ast.toposort:
        if u.op in (Ops.LOAD, Ops.STORE):
            g, view = u.src[0], u.src[1]
            idx, _ = view.arg.to_indexed_uops()
            n = max(int(idx.vmax) + 1, 1)
            sizes[g.arg] = (max(n, sizes.get(g.arg, (0, g.dtype))[0]), g.dtype.base)
    return sizes


class DeviceSearchTarget:
    """Scratch buffers for one kernel AST on one device; times compiled candidates there."""

    def __init__(self, device: str, ast: UOp) -> None:
        dev = Device[device]
        self.device, self.renderer, self.compiler = device, dev.renderer, dev.compiler
        sizes = buffer_sizes(ast)
        self.bufs = [Buffer(device, *sizes[i]).ensure_allocated() for i in range(len(sizes))]

    @property
    def compile_fn(self) -> Callable[[str], bytes]:
        return self.compiler.compile

    def time(self, spec: ProgramSpec, lib: bytes, runs: int, cutoff: float) -> float:
        """Best of `runs` launches in seconds (stops early when a launch is slower than `cutoff`)."""
        prg = Device[self.device].runtime(spec.function_name, lib, *program_extra(spec))
        spec.check_buffers([b.dtype for b in self.bufs])
        opaque = [b.opaque for b in self.bufs]
        vals = tuple(int(v.arg[2]) for v in spec.vars)  # symbolic sizes at their largest (the buffers fit those)
        best = float("inf")
        for _ in range(runs):
            et = prg(*opaque, global_size=spec.global_size, local_size=spec.local_size, vals=vals, wait=True)
            best = min(best, et if et is not None else float("inf"))
            if best > cutoff:
                break
        return best
