"""The PYTHON device: interprets linearized UOps directly. Slow; the reference that needs no compiler.

>>> from tg_runtime.device import Device
>>> Device["PYTHON"].renderer.device
'PYTHON'
"""

from __future__ import annotations

import base64
import pickle
import struct
import time
from typing import Any

from tg_codegen.renderer import Renderer, buffer_params
from tg_runtime.device import Allocator, Compiled, Compiler
from tg_uop import DType, Ops, UOp, dtypes
from tg_uop.uop import bitcast_const, exec_alu


class PythonRenderer(Renderer):
    """'Renders' the program as its pickled UOp list; the interpreter runs that list."""

    device = "PYTHON"
    has_threads = True  # a THREAD axis is an ordinary loop here

    def render(self, name: str, uops: list[UOp]) -> str:
        buffer_params(name, uops)  # refuses a gap in data0..data{n-1}: buffer i of a launch is DEFINE_GLOBAL i
        return base64.b64encode(pickle.dumps(list(uops))).decode()


class PythonCompiler(Compiler):
    cachekey = "python"

    def compile(self, src: str) -> bytes:
        return base64.b64decode(src)


class PythonAllocator(Allocator):
    def _alloc(self, nbytes: int) -> Any:
        return bytearray(nbytes)

    def _copyin(self, dest: Any, src: memoryview) -> None:
        dest[:] = bytes(src)

    def _copyout(self, dest: memoryview, src: Any) -> None:
        dest[:] = src[: dest.nbytes]


def _fmt(dt: DType) -> str:
    if dt == dtypes.bfloat16:
        return "H"
    if dt.fmt is None:
        raise TypeError(f"the PYTHON device cannot hold {dt}")
    return "<" + dt.fmt


def _load(buf: bytearray, dt: DType, idx: int) -> Any:
    if not 0 <= idx * dt.itemsize < len(buf):
        raise IndexError(
            f"PYTHON device: load at element {idx} is outside a buffer of {len(buf) // dt.itemsize} elements"
        )
    v = struct.unpack_from(_fmt(dt), buf, idx * dt.itemsize)[0]
    if dt == dtypes.bfloat16:
        return struct.unpack("<f", struct.pack("<I", v << 16))[0]
    return v


def _store(buf: bytearray, dt: DType, idx: int, value: Any) -> None:
    if not 0 <= idx * dt.itemsize < len(buf):
        raise IndexError(
            f"PYTHON device: store at element {idx} is outside a buffer of {len(buf) // dt.itemsize} elements"
        )
    if dt == dtypes.bfloat16:
        value = struct.unpack("<I", struct.pack("<f", value))[0] >> 16
    struct.pack_into(_fmt(dt), buf, idx * dt.itemsize, value)


class PythonProgram:
    """Runs a linear UOp program with a program counter; loops jump between RANGE and ENDRANGE."""

    def __init__(self, name: str, lib: bytes) -> None:
        self.name = name
        self.uops: list[UOp] = pickle.loads(lib)
        self.index = {u: i for i, u in enumerate(self.uops)}
        self.loop_end: dict[int, int] = {}
        for i, u in enumerate(self.uops):
            if u.op is Ops.ENDRANGE:
                self.loop_end[self.index[u.src[0]]] = i

    def __call__(
        self,
        *bufs: Any,
        global_size: tuple[int, ...] | None = None,
        local_size: tuple[int, ...] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        st = time.perf_counter()
        self._run(list(bufs), list(vals))
        return time.perf_counter() - st if wait else None

    def _run(self, bufs: list[Any], vals: list[int]) -> None:
        uops, index = self.uops, self.index
        values: dict[int, Any] = {}
        var_i = 0

        def val(s: UOp) -> Any:
            return values[index[s.src[0]]] if s.op is Ops.ASSIGN else values[index[s]]

        pc = 0
        while pc < len(uops):
            u = uops[pc]
            op = u.op
            if op is Ops.DEFINE_GLOBAL:
                values[pc] = bufs[u.arg]
            elif op is Ops.DEFINE_VAR:
                values[pc] = vals[var_i]
                var_i += 1
            elif op is Ops.CONST:
                values[pc] = u.arg
            elif op is Ops.RANGE:
                values[pc] = 0
                if val(u.src[0]) <= 0:
                    pc = self.loop_end[pc]
            elif op is Ops.ENDRANGE:
                start = index[u.src[0]]
                values[start] += 1
                if values[start] < val(uops[start].src[0]):
                    pc = start
            elif op is Ops.INDEX:
                values[pc] = (val(u.src[0]), u.src[0].dtype.base, val(u.src[1]))
            elif op is Ops.LOAD:
                if len(u.src) > 1 and not val(u.src[1]):
                    values[pc] = u.const_like(0).arg
                else:
                    buf, dt, i = val(u.src[0])
                    values[pc] = _load(buf, dt, i)
            elif op is Ops.STORE:
                if len(u.src) <= 2 or val(u.src[2]):
                    buf, dt, i = val(u.src[0])
                    _store(buf, dt, i, val(u.src[1]))
            elif op is Ops.DEFINE_ACC:
                values[pc] = val(u.src[0])
            elif op is Ops.ASSIGN:
                values[index[u.src[0]]] = val(u.src[1])
            elif op is Ops.BITCAST:
                values[pc] = bitcast_const(val(u.src[0]), u.src[0].dtype, u.dtype)
            elif op is Ops.CAST or op.name in _ALU:
                values[pc] = exec_alu(op, u.dtype, [val(s) for s in u.src])
            elif op in (Ops.SINK, Ops.NOOP):
                pass
            else:
                raise NotImplementedError(f"PYTHON device cannot run {op}")
            pc += 1


_ALU = {o.name for o in Ops if o.value >= Ops.EXP2.value}


def open_device(name: str) -> Compiled:
    return Compiled(name, PythonAllocator(), PythonRenderer(), PythonCompiler(), PythonProgram, searchable=False)
