"""CPU graphs: a TinyJit replay of C kernels as one call into C, not one ctypes call per kernel.

A replay launched kernel by kernel from Python costs ~1-2 us of ctypes and interpreter time per kernel: a decode
step of SmolLM2-135M (518 kernels) spent ~1.2 ms of its ~11 ms on one core there. `CPUGraph` writes a small C
function that calls each recorded kernel in turn, reading its arguments from one array of pointers (buffers) and
integers (variable values), compiles it once (disk-cached: the source depends only on the kernels' signatures, so
the same step in a new process compiles nothing), and replays the whole step with one ctypes call. `update` writes a
launch's new buffer addresses and values into the array.

>>> import ctypes
>>> CPUGraph.source([(2, 0), (1, 1)]).count("((void (*)(")
2
"""

from __future__ import annotations

import ctypes
import time
from typing import Any

__all__ = ["CPUGraph"]

CALLS_PER_FUNCTION = 256  # calls per generated C function (a few small functions compile faster than one huge one)


def _address(handle: Any) -> int:
    """The address a CPU buffer handle stands for (a ctypes array, a ctypes pointer or an int)."""
    if isinstance(handle, ctypes.Array):
        return ctypes.addressof(handle)
    if isinstance(handle, ctypes.c_void_p):
        return handle.value or 0
    return int(handle)


class CPUGraph:
    """The launches `(program, buffer handles, global size, local size, values)` of one CPU device as one C call.

    `compile_library(src) -> bytes` builds a shared object and `load(lib) -> ctypes.CDLL` loads it (the CPU device's
    compiler and loader)."""

    def __init__(self, launches: list[Any], compile_library: Any, load: Any) -> None:
        sigs = [(len(bufs), len(vals)) for _, bufs, _, _, vals in launches]
        self._start: list[int] = []  # each launch's first slot in the argument array
        at = 0
        for nb, nv in sigs:
            self._start.append(at)
            at += nb + nv
        self._nbufs = [nb for nb, _ in sigs]
        self._fns = (ctypes.c_void_p * max(1, len(launches)))()
        self._args = (ctypes.c_void_p * max(1, at))()
        self._keep: list[Any] = [None] * len(launches)  # the handles of each launch, alive while the graph uses them
        for i, (program, bufs, _, _, vals) in enumerate(launches):
            self._fns[i] = ctypes.cast(program.fxn, ctypes.c_void_p).value
            self.update(i, bufs, vals)
        self._lib = load(compile_library(self.source(sigs)))  # (kept: the function lives in it)
        self._run = self._lib.tg_graph_run
        self._run.argtypes, self._run.restype = [ctypes.c_void_p, ctypes.c_void_p], None

    @staticmethod
    def source(sigs: list[tuple[int, int]]) -> str:
        """C source of `tg_graph_run(fns, args)`: calls fns[i] with its buffers' pointers and its int values, read
        from `args` in order, for launches of (buffers, values) `sigs`."""
        parts, calls, at = ["#include <stdint.h>\n"], [], 0
        for i, (nb, nv) in enumerate(sigs):
            params = ", ".join(["void*"] * nb + ["int"] * nv) or "void"
            args = [f"a[{at + j}]" for j in range(nb)] + [f"(int)(intptr_t)a[{at + nb + j}]" for j in range(nv)]
            calls.append(f"  ((void (*)({params}))f[{i}])({', '.join(args)});\n")
            at += nb + nv
        names: list[str] = []
        for c in range(0, len(calls), CALLS_PER_FUNCTION):
            names.append(f"tg_graph_part{len(names)}")
            body = "".join(calls[c : c + CALLS_PER_FUNCTION])
            parts.append(f"static void {names[-1]}(void* const* f, void* const* a) {{\n{body}}}\n")
        run = "".join(f"  {n}(f, a);\n" for n in names)
        parts.append(f"void tg_graph_run(void* const* f, void* const* a) {{\n{run}}}\n")
        return "".join(parts)

    def update(self, i: int, bufs: list[Any], vals: tuple[int, ...] | None = None) -> None:
        """Launch `i` reads and writes `bufs` (and takes `vals`, when given) from the next replay on."""
        if len(bufs) != self._nbufs[i]:
            raise ValueError(f"CPUGraph: launch {i} takes {self._nbufs[i]} buffers, got {len(bufs)}")
        at = self._start[i]
        for j, b in enumerate(bufs):
            self._args[at + j] = _address(b)
        if vals is not None:
            for j, v in enumerate(vals):
                self._args[at + len(bufs) + j] = v % (1 << 64)  # (two's complement: C reads its low 32 bits)
        self._keep[i] = list(bufs)

    def __call__(self, wait: bool = False) -> float | None:
        st = time.perf_counter()
        self._run(self._fns, self._args)
        return time.perf_counter() - st if wait else None
