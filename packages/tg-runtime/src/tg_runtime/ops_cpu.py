"""The CPU device: C from ClangRenderer, compiled by clang (when present) or gcc, loaded with ctypes.

>>> from tg_runtime.device import Device
>>> Device["CPU"].compiler.cc in ("clang", "gcc", "cc")
True
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import mmap
import os
import platform
import re
import shutil
import subprocess
import tempfile
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from typing import Any, cast

from tg_codegen.diskcache import diskcache_get, diskcache_put
from tg_codegen.renderer.cstyle import ClangRenderer
from tg_codegen.renderer.threadpool import THREAD_POOL_C
from tg_runtime.cpu_graph import CPUGraph
from tg_runtime.device import Allocator, Compiled, Compiler, GraphLaunch, UnusableCompilerError


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

    def release(self) -> None:
        """Drop the kept arrays and give the freed memory back to the system (glibc keeps freed heap memory for
        reuse: malloc_trim returns it; elsewhere the memory is merely freed)."""
        self.cache.clear()
        self.cached_bytes = 0
        if (trim := _malloc_trim()) is not None:
            trim(0)

    def _copyin(self, dest: Any, src: memoryview) -> None:
        ctypes.memmove(dest, bytes(src) if src.readonly else (ctypes.c_char * src.nbytes).from_buffer(src), src.nbytes)

    def _copyout(self, dest: memoryview, src: Any) -> None:
        ctypes.memmove((ctypes.c_char * dest.nbytes).from_buffer(dest), src, dest.nbytes)

    def transfer(self, dest: Any, src: Any, nbytes: int, src_allocator: Allocator) -> bool:
        """CPU:i -> CPU:j is one memmove (both are host memory; CPU kernels run synchronously). A DISK window (a
        memoryview of the file's mapping) is copied straight from the mapping, with no host copy in between, and
        the mapping's pages are then dropped from this process (they stay in the page cache): loading a model
        file holds its bytes once, in the copies, not twice."""
        if isinstance(src, memoryview) and isinstance(dest, ctypes.Array) and src.nbytes == nbytes:
            memoryview(dest).cast("B")[:nbytes] = src.cast("B")
            if isinstance(src.obj, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
                src.obj.madvise(mmap.MADV_DONTNEED)
            return True
        if not isinstance(src_allocator, CPUAllocator):
            return False
        ctypes.memmove(dest, src, nbytes)
        return True


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where the C library has none."""
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
        return trim
    except (OSError, AttributeError):
        return None


def find_cc() -> str:
    """$CC if set; else clang, gcc or cc, the first on PATH."""
    if cc := os.getenv("CC"):
        if not shutil.which(cc):
            raise UnusableCompilerError(
                f"CC={cc!r} is not an executable on PATH; install it, or unset CC to use clang or gcc"
            )
        return cc
    found = [cc for cc in ("clang", "gcc", "cc") if shutil.which(cc)]
    if not found:
        raise RuntimeError("the CPU device needs a C compiler: none of $CC, clang, gcc, cc was found on PATH")
    return found[0]


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
def half_type(cc: str) -> str:
    """The C type of float16 for `cc`: `_Float16` where it compiles (gcc 12+, clang 15+ on x86), else `__fp16` (clang
    14 on x86), a storage type whose arithmetic runs in float and rounds to half when assigned (the kernels assign
    every op to a variable, so each op rounds once, as with _Float16). Asked once per compiler build (disk cache)."""
    if isinstance(known := diskcache_get("cc_half", compiler_build(cc)), str):
        return known
    with tempfile.TemporaryDirectory() as tmp:
        src = "_Float16 f(_Float16 a, _Float16 b) { return a * b; }\n"
        cmd = [cc, "-c", "-x", "c", "-", "-o", os.path.join(tmp, "t.o")]
        ok = subprocess.run(cmd, input=src.encode(), capture_output=True).returncode == 0
    found = "_Float16" if ok else "__fp16"
    diskcache_put("cc_half", compiler_build(cc), found)
    return found


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
def _cpuinfo() -> dict[str, str]:
    """Each field of /proc/cpuinfo ("model name", "flags", ...) at its first occurrence; empty where there is none."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


@functools.cache
def host_cpu() -> str:
    """The machine and CPU model (-march=native code is built for this CPU)."""
    return f"{platform.machine()} {_cpuinfo().get('model name', '')}"


class ClangCompiler(Compiler):
    """C source -> shared object bytes, cached on disk by source, compiler (and its version), flags and host CPU.

    Several kernels compile in one compiler process (`compile_many`): most of a small kernel's compile is the
    compiler starting, reading headers and linking, paid once per batch instead of once per kernel. The shared
    object of a batch holds all its kernels; each kernel's binary is that object (the CPU program finds its
    function by name in it).

    >>> c = ClangCompiler()
    >>> c.cache_key("void k(void) {}") != ClangCompiler(args=("-O1",)).cache_key("void k(void) {}")
    True
    """

    threadsafe = True  # each compile is its own process
    batches = True

    def __init__(self, cc: str | None = None, args: tuple[str, ...] | None = None) -> None:
        self.cc = cc or find_cc()
        # (no -ftree-vectorize: the renderer writes the vector code itself; gcc's vectorizer spent ~15% of the
        # compile on the kernels of an MNIST step and changed none of their speeds, bench/bench_cpu.py.
        # -ffp-contract=fast: a product and the sum it feeds become one FMA across statements, as gcc does by default;
        # clang fuses only within one expression, and a register tile's `acc = acc + a*b` ran as a MUL and an ADD)
        default = ("-O2", "-march=native", "-fno-tree-vectorize", "-ffp-contract=fast")
        self.args = args if args is not None else default
        self.cachekey = f"cpu:{self.cc}:{' '.join(self.args)}"
        self.invocations = 0  # how many times the C compiler ran (a disk cache hit runs none)
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        """Picklable without its lock: BEAM sends `compile` to worker processes (a lock cannot be pickled, and
        every candidate failed, so BEAM=2 on the CPU fell back to the hand-coded opts)."""
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def cache_key(self, src: str) -> str:
        """The disk cache key of `src`'s binary: any change of source, compiler build, flags or CPU misses."""
        ident = f"{self.cachekey}\n{compiler_version(self.cc)}\n{host_cpu()}\n{src}"
        return hashlib.sha256(ident.encode()).hexdigest()

    def compile(self, src: str) -> bytes:
        return self.compile_many([src])[0]

    def compile_many(self, srcs: list[str]) -> list[bytes]:
        """The shared objects of `srcs` (from the disk cache, or built in as few compiler runs as the kernels'
        function names allow: one object cannot hold two functions of one name).

        A batch the compiler rejects is built again one kernel at a time, so one bad kernel fails alone (its
        CompileError is raised once the others are built and cached)."""
        libs: dict[str, bytes] = {}
        for src in dict.fromkeys(srcs):
            if (lib := diskcache_get("cpu_binary", self.cache_key(src))) is not None:
                libs[src] = bytes(lib)
        errors: list[CompileError] = []
        for batch in name_batches([src for src in dict.fromkeys(srcs) if src not in libs]):
            built = self._compile_batch(batch, errors)
            for src, lib in built.items():
                diskcache_put("cpu_binary", self.cache_key(src), lib)
            libs.update(built)
        if errors:
            raise errors[0]
        return [libs[src] for src in srcs]

    def _compile_batch(self, batch: list[str], errors: list[CompileError]) -> dict[str, bytes]:
        if len(batch) > 1:
            try:
                lib = self._compile(join_sources(batch))
                return dict.fromkeys(batch, lib)
            except CompileError:
                pass  # (one at a time below: the error names the kernel that fails)
        built = {}
        for src in batch:
            try:
                built[src] = self._compile(src)
            except CompileError as e:
                errors.append(e)
        return built

    def compile_library(self, src: str, flags: tuple[str, ...]) -> bytes:
        """A shared object of `src` built with these extra flags (the thread pool: -pthread), disk-cached."""
        key = self.cache_key(f"// {' '.join(flags)}\n{src}")
        if (lib := diskcache_get("cpu_binary", key)) is not None:
            return bytes(lib)
        lib = self._compile(src, flags)
        diskcache_put("cpu_binary", key, lib)
        return lib

    def _compile(self, src: str, flags: tuple[str, ...] = ()) -> bytes:
        with self._lock:
            self.invocations += 1
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "kernel.so")
            cmd = [self.cc, "-shared", "-fPIC", *self.args, *flags, "-x", "c", "-", "-o", out, "-lm"]
            proc = subprocess.run(cmd, input=src.encode(), capture_output=True)
            if proc.returncode != 0 and b"Assembler messages" in proc.stderr and "-march=native" in cmd:
                # a compiler newer than its assembler emits instructions of this CPU that the assembler cannot
                # encode (gcc 13 with an older binutils: "unsupported masking for `vmovsh'" for AVX512-FP16):
                # build this kernel for the generic target instead of failing
                # (the warnings module's default filter shows it once: one line of code warns)
                warnings.warn(
                    f"{self.cc}: the assembler rejected -march=native code; kernels it rejects are built without it",
                    RuntimeWarning,
                    stacklevel=2,
                )
                generic = [a for a in cmd if a != "-march=native"]
                proc = subprocess.run(generic, input=src.encode(), capture_output=True)
            if proc.returncode != 0:
                raise CompileError(
                    f"{self.cc} failed to compile the kernel:\n{proc.stderr.decode()}\n--- source ---\n{src}"
                )
            with open(out, "rb") as f:
                return f.read()


_FUNCTION = re.compile(r"^(?:[A-Za-z_]\w*[\s*]+)+?([A-Za-z_]\w*)\s*\(", re.M)
_DEFINE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)", re.M)


def exported_names(src: str) -> set[str]:
    """The names a source defines at file scope that are not `static` (its kernel function).

    >>> sorted(exported_names("static inline int h(int a) { return a; }\\nvoid E_4(float* restrict d) {}"))
    ['E_4']
    """
    return {m.group(1) for m in _FUNCTION.finditer(src) if not m.group(0).startswith(("static", "typedef", "extern"))}


def name_batches(srcs: list[str]) -> list[list[str]]:
    """`srcs` in batches, in order, each without two sources that define one name (kernels of one name differ
    in their shapes or ops: `E_4` twice is common)."""
    batches: list[tuple[list[str], set[str]]] = []
    for src in srcs:
        names = exported_names(src)
        home = next((b for b in batches if not (b[1] & names)), None)
        if home is None:
            batches.append(home := ([], set()))
        home[0].append(src)
        home[1].update(names)
    return [b[0] for b in batches]


def join_sources(srcs: list[str]) -> str:
    """One translation unit holding every source. Each source reads exactly what it read alone: a line it
    shares with an earlier source at file scope (a vector typedef, a static helper, an #include) is kept once,
    and the macros a source defines are #undef'd after it. Anything else that clashes (two helpers of one name
    and different bodies) fails to compile, and the batch is compiled one source at a time instead.

    >>> a, b = "#define M 1\\ntypedef int v2;\\nvoid a(void) {}", "#define M 2\\ntypedef int v2;\\nvoid b(void) {}"
    >>> print(join_sources([a, b]), end="")
    #define M 1
    typedef int v2;
    void a(void) {}
    #undef M
    #define M 2
    void b(void) {}
    #undef M
    """
    seen: set[str] = set()
    out: list[str] = []
    for src in srcs:
        for line in src.splitlines():
            if line.startswith(("typedef ", "static ", "#include ", "extern ")) and line.endswith((";", "}", ">", '"')):
                if line in seen:
                    continue
                seen.add(line)
            out.append(line)
        out.extend(f"#undef {name}" for name in dict.fromkeys(_DEFINE.findall(src)))
    return "\n".join(out) + "\n"


_loaded: weakref.WeakValueDictionary[bytes, ctypes.CDLL] = weakref.WeakValueDictionary()
_load_lock = threading.Lock()


def load_library(lib: bytes) -> ctypes.CDLL:
    """The shared object `lib`, loaded once while any program uses it (the kernels of a batch share one), its
    kernels' `tg_parallel` pointed at the thread pool where one is loaded (load_thread_pool)."""
    with _load_lock:
        if (found := _loaded.get(lib)) is not None:
            return found
        with tempfile.NamedTemporaryFile(suffix=".so", delete=False) as f:
            f.write(lib)
            path = f.name
        try:
            loaded = _loaded[lib] = ctypes.CDLL(path)
        finally:
            os.unlink(path)
        if _pool_run and hasattr(loaded, "tg_parallel"):
            ctypes.c_void_p.in_dll(loaded, "tg_parallel").value = _pool_run[0]
        return loaded


_pools: list[ctypes.CDLL] = []  # the thread pool library, loaded once per process and kept
_pool_run: list[int] = []  # the address of its tg_pool_run


def load_thread_pool(compiler: ClangCompiler) -> bool:
    """Build (once per compiler and host, disk-cached) and load the thread pool that runs THREAD loops
    (tg_codegen.renderer.threadpool); kernel libraries loaded from now on call it. False when it cannot be built
    (threaded kernels then run their iterations one after another)."""
    if _pools:
        return True
    try:
        lib = compiler.compile_library(THREAD_POOL_C, ("-pthread",))
    except CompileError as e:
        warnings.warn(
            f"the CPU thread pool did not build, kernels run on one thread: {e}", RuntimeWarning, stacklevel=2
        )
        return False
    pool = load_library(lib)
    _pools.append(pool)
    _pool_run.append(ctypes.cast(pool.tg_pool_run, ctypes.c_void_p).value or 0)
    return True


class CPUProgram:
    """A compiled kernel: the function `name` of a loaded shared object."""

    def __init__(self, name: str, lib: bytes) -> None:
        self.name = name
        self.lib = load_library(lib)
        self.fxn = getattr(self.lib, name)

    def __call__(
        self,
        *bufs: Any,
        global_size: tuple[int, ...] | None = None,
        local_size: tuple[int, ...] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        # a ctypes array (the allocator's buffers) is passed as a pointer to its first byte, without a cast
        args: Any = bufs
        if vals or not _all_arrays(bufs):
            args = [b if isinstance(b, ctypes.Array) else ctypes.cast(b, ctypes.c_void_p) for b in bufs]
            args += [ctypes.c_int(v) for v in vals]
        if not wait:
            self.fxn(*args)
            return None
        st = time.perf_counter()
        self.fxn(*args)
        return time.perf_counter() - st

    def launcher(
        self, global_size: tuple[int, ...] | None = None, local_size: tuple[int, ...] | None = None
    ) -> Callable[..., Any]:
        """The launch on this allocator's buffers (ctypes arrays, passed as pointers) with no variables: the C
        function itself (`device.launcher_of`)."""
        return self.fxn  # type: ignore[no-any-return]

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


def _all_arrays(bufs: tuple[Any, ...]) -> bool:
    for b in bufs:
        if not isinstance(b, ctypes.Array):
            return False
    return True


@functools.cache
def host_vector_bytes() -> int:
    """The widest vector the kernels use on this host: 64 bytes where the CPU has AVX-512 (-march=native code may
    use it), else 32."""
    flags = _cpuinfo().get("flags", "").split()
    return 64 if platform.machine() in ("x86_64", "AMD64") and "avx512f" in flags and "avx512vl" in flags else 32


class CPUDevice(Compiled):
    """The CPU: a TinyJit replay is one call into C (tg_runtime.cpu_graph)."""

    def graph(self, launches: list[GraphLaunch]) -> CPUGraph:
        compiler = cast(ClangCompiler, self.compiler)  # (open_device's)
        return CPUGraph(launches, lambda src: compiler.compile_library(src, ()), load_library)


def open_device(name: str) -> Compiled:
    threads = int(os.getenv("THREADS", "0")) or len(os.sched_getaffinity(0))
    compiler = ClangCompiler()
    if threads > 1 and not load_thread_pool(compiler):
        threads = 1
    renderer = ClangRenderer(threads, host_vector_bytes(), half=half_type(compiler.cc))
    dev = CPUDevice(name, CPUAllocator(), renderer, compiler, CPUProgram)
    if threads > 1:
        wake = _pools[0].tg_pool_wake
        wake.restype = None
        dev.waker = wake
    return dev
