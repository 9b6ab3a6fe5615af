"""The 'write your own backend' exercise: a device built only from the public Allocator / Compiler / Program
classes (a C compiler run by subprocess, the program loaded with ctypes), registered without editing tg."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
from typing import Any

import pytest

from tg import Device, Tensor
from tg_codegen import ClangRenderer
from tg_runtime import Allocator, Compiled, Compiler


class MyAllocator(Allocator):
    def _alloc(self, nbytes: int) -> Any:
        return (ctypes.c_uint8 * nbytes)()

    def _copyin(self, dest: Any, src: memoryview) -> None:
        ctypes.memmove(dest, bytes(src), src.nbytes)

    def _copyout(self, dest: memoryview, src: Any) -> None:
        dest[:] = bytes(src)[: dest.nbytes]


class MyCompiler(Compiler):
    def compile(self, src: str) -> bytes:
        cc = shutil.which("clang") or shutil.which("gcc")
        assert cc is not None
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "k.so")
            subprocess.run(
                [cc, "-shared", "-fPIC", "-O1", "-x", "c", "-", "-o", out, "-lm"], input=src.encode(), check=True
            )
            with open(out, "rb") as f:
                return f.read()


class MyProgram:
    def __init__(self, name: str, lib: bytes) -> None:
        self.tmp = tempfile.NamedTemporaryFile(suffix=".so")
        self.tmp.write(lib)
        self.tmp.flush()
        self.fxn = getattr(ctypes.CDLL(self.tmp.name), name)

    def __call__(
        self,
        *bufs: Any,
        global_size: Any = None,
        local_size: Any = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        self.fxn(*[ctypes.cast(b, ctypes.c_void_p) for b in bufs], *[ctypes.c_int(v) for v in vals])
        return 0.0 if wait else None


@pytest.mark.skipif(not (shutil.which("clang") or shutil.which("gcc")), reason="needs a C compiler")
def test_custom_device() -> None:
    Device.register("MY", lambda name: Compiled(name, MyAllocator(), ClangRenderer(), MyCompiler(), MyProgram))
    assert "MY" in Device.known()
    out = Tensor([1, 2, 3], device="MY") + Tensor([4, 5, 6], device="MY")
    assert out.device == "MY"
    assert out.tolist() == [5, 7, 9]
