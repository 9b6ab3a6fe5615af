"""The CPU device: C from ClangRenderer, compiled by clang (when present) or gcc, loaded with ctypes.

>>> from tg_runtime.device import Device
>>> Device["CPU"].compiler.cc in ("clang", "gcc", "cc")
True
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from tg_codegen.diskcache import diskcache_get, diskcache_put
from tg_codegen.renderer.cstyle import ClangRenderer
from tg_runtime.device import Allocator, Compiled, Compiler, UnusableCompilerError


class CompileError(RuntimeError):
    """The device compiler rejected a kernel; the message holds its output."""


class CPUAllocator(Allocator):
    """Host memory as ctypes byte arrays (16-byte aligned by malloc).

    Freed arrays are kept (up to CACHE_BYTES) and handed out again for the same size: a fresh array is
    zero-filled and page-faulted in, which costs more than many kernels that write it.
    """

    CACHE_BYTES = 1 << 30

    def __init__(self) -> None:
        self.cache: dict[int, list[Any]] = {}
        self.cached_bytes = 0

    def _alloc(self, nbytes: int) -> Any:
        if self.cache.get(nbytes):
            self.cached_bytes -= nbytes
            return self.cache[nbytes].pop()
        return (ctypes.c_uint8 * nbytes)()

    def _free(self, opaque: Any, nbytes: int) -> None:
        nbytes = max(nbytes, 1)  # alloc rounds 0 up to 1
        if self.cached_bytes + nbytes <= self.CACHE_BYTES:
            self.cache.setdefault(nbytes, []).append(opaque)
            self.cached_bytes += nbytes

    def _copyin(self, dest: Any, src: memoryview) -> None:
        ctypes.memmove(dest, bytes(src) if src.readonly else (ctypes.c_char * src.nbytes).from_buffer(src), src.nbytes)

    def _copyout(self, dest: memoryview, src: Any) -> None:
        ctypes.memmove((ctypes.c_char * dest.nbytes).from_buffer(dest), src, dest.nbytes)


def find_cc() -> str:
    """$CC if set; else clang or gcc, preferring one that can build OpenMP (threads); else cc."""
    if cc := os.getenv("CC"):
        if not shutil.which(cc):
            raise UnusableCompilerError(
                f"CC={cc!r} is not an executable on PATH; install it, or unset CC to use clang or gcc"
            )
        return cc
    found = [cc for cc in ("clang", "gcc", "cc") if shutil.which(cc)]
    if not found:
        raise RuntimeError("the CPU device needs a C compiler: none of $CC, clang, gcc, cc was found on PATH")
    return next((cc for cc in found if openmp_flags(cc)), found[0])


@functools.cache
def compiler_build(cc: str) -> str:
    """The compiler binary's resolved path, size and modification time: changes when the compiler does."""
    path = os.path.realpath(shutil.which(cc) or cc)
    try:
        st = os.stat(path)
    except OSError:
        return path
    return f"{path}:{st.st_size}:{st.st_mtime_ns}"


@functools.cache
def openmp_flags(cc: str) -> tuple[str, ...]:
    """("-fopenmp",) when `cc` can build and link OpenMP code, else () (loops then run on one core).

    Found by a test compile once per compiler build (kept in the disk cache)."""
    if isinstance(known := diskcache_get("cc_openmp", compiler_build(cc)), bool):
        return ("-fopenmp",) if known else ()
    with tempfile.TemporaryDirectory() as tmp:
        src = "#include <omp.h>\nint f(void) { return omp_get_max_threads(); }\n"
        cmd = [cc, "-shared", "-fPIC", "-fopenmp", "-x", "c", "-", "-o", os.path.join(tmp, "t.so")]
        ok = subprocess.run(cmd, input=src.encode(), capture_output=True).returncode == 0
    diskcache_put("cc_openmp", compiler_build(cc), ok)
    return ("-fopenmp",) if ok else ()


@functools.cache
def compiler_version(cc: str) -> str:
    """Which build of `cc` this is: its resolved path and the first line of `cc --version`.

    The version is asked once per build (the answer is kept in the disk cache under the binary's path, size
    and modification time), so a process that finds its kernels cached starts no compiler at all.
    """
    build = compiler_build(cc)
    if isinstance(known := diskcache_get("cc_version", build), str):
        return f"{build} {known}"
    try:
        proc = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=60)
        version = (proc.stdout.splitlines() or ["unknown"])[0]
    except (OSError, subprocess.SubprocessError):
        version = "unknown"
    diskcache_put("cc_version", build, version)
    return f"{build} {version}"


@functools.cache
def host_cpu() -> str:
    """The machine and CPU model (-march=native code is built for this CPU)."""
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return f"{platform.machine()} {model}"


class ClangCompiler(Compiler):
    """C source -> shared object bytes, cached on disk by source, compiler (and its version), flags and host CPU.

    >>> c = ClangCompiler()
    >>> c.cache_key("void k(void) {}") != ClangCompiler(args=("-O1",)).cache_key("void k(void) {}")
    True
    """

    threadsafe = True  # each compile is its own process

    def __init__(self, cc: str | None = None, args: tuple[str, ...] | None = None) -> None:
        self.cc = cc or find_cc()
        self.args = args if args is not None else ("-O2", "-march=native", *openmp_flags(self.cc))
        self.cachekey = f"cpu:{self.cc}:{' '.join(self.args)}"
        self.invocations = 0  # how many times the C compiler ran (a disk cache hit runs none)
        self._lock = threading.Lock()

    def cache_key(self, src: str) -> str:
        """The disk cache key of `src`'s binary: any change of source, compiler build, flags or CPU misses."""
        ident = f"{self.cachekey}\n{compiler_version(self.cc)}\n{host_cpu()}\n{src}"
        return hashlib.sha256(ident.encode()).hexdigest()

    def compile(self, src: str) -> bytes:
        key = self.cache_key(src)
        if (lib := diskcache_get("cpu_binary", key)) is not None:
            return bytes(lib)
        lib = self._compile(src)
        diskcache_put("cpu_binary", key, lib)
        return lib

    def _compile(self, src: str) -> bytes:
        with self._lock:
            self.invocations += 1
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "kernel.so")
            cmd = [self.cc, "-shared", "-fPIC", *self.args, "-x", "c", "-", "-o", out, "-lm"]
            proc = subprocess.run(cmd, input=src.encode(), capture_output=True)
            if proc.returncode != 0:
                raise CompileError(
                    f"{self.cc} failed to compile the kernel:\n{proc.stderr.decode()}\n--- source ---\n{src}"
                )
            with open(out, "rb") as f:
                return f.read()


class CPUProgram:
    """A compiled kernel loaded from its shared object."""

    def __init__(self, name: str, lib: bytes) -> None:
        self.name = name
        with tempfile.NamedTemporaryFile(suffix=".so", delete=False) as f:
            f.write(lib)
            path = f.name
        try:
            self.lib = ctypes.CDLL(path)
        finally:
            os.unlink(path)
        self.fxn = getattr(self.lib, name)

    def __call__(
        self,
        *bufs: Any,
        global_size: tuple[int, ...] | None = None,
        local_size: tuple[int, ...] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        args = [ctypes.cast(b, ctypes.c_void_p) for b in bufs] + [ctypes.c_int(v) for v in vals]
        st = time.perf_counter()
        self.fxn(*args)
        return time.perf_counter() - st if wait else None

    def bind(
        self,
        *bufs: Any,
        global_size: tuple[int, ...] | None = None,
        local_size: tuple[int, ...] | None = None,
        vals: tuple[int, ...] = (),
    ) -> Callable[[], Any]:
        """The launch on these ctypes buffers as a call of the C function: one void* per buffer, then one int
        per variable (~1 us)."""
        args = [ctypes.c_void_p(ctypes.addressof(b)) for b in bufs] + [ctypes.c_int(v) for v in vals]
        return functools.partial(self.fxn, *args)


def open_device(name: str) -> Compiled:
    threads = int(os.getenv("THREADS", "0")) or len(os.sched_getaffinity(0))
    return Compiled(name, CPUAllocator(), ClangRenderer(threads), ClangCompiler(), CPUProgram)
