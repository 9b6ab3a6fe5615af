"""The CUDA device: CUDA C compiled by NVRTC and launched through the driver API, both via ctypes.

No CUDA Python package is needed at run time: libcuda (from the driver) and libnvrtc (from a CUDA toolkit or
the `nvidia-cuda-nvrtc` wheel) are loaded directly.

>>> from tg_runtime.ops_cuda import NVRTCCompiler   # doctest: +SKIP
>>> NVRTCCompiler("sm_90").compile('extern "C" __global__ void k(float* x) { x[0] = 1.0f; }')[:4]   # doctest: +SKIP
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import hashlib
import os
import sys
import threading
import time
from typing import Any

from tg_codegen.diskcache import diskcache_get, diskcache_put
from tg_codegen.limits import LaunchLimits
from tg_codegen.renderer.cuda import CUDARenderer
from tg_runtime.device import (
    Allocator,
    Buffer,
    Compiled,
    Compiler,
    Device,
    DeviceUnavailableError,
    GraphCollective,
    GraphCopy,
    GraphItem,
    GraphKernel,
)

CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_INVALID_DEVICE = 101


class CUDAError(RuntimeError):
    """A CUDA driver or NVRTC call failed; the message names the call and the error."""


class CUDAUnavailableError(CUDAError, DeviceUnavailableError):
    """No NVIDIA driver, no GPU, or no NVRTC here: the message says which, and how to install it."""


# ---------------------------------------------------------------------------------------------
# finding the libraries


def _nvrtc_candidates() -> list[str]:
    found: list[str] = []
    for base in sys.path:
        found += sorted(glob.glob(os.path.join(base, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so*")), reverse=True)
        found += sorted(glob.glob(os.path.join(base, "nvidia", "cu*", "lib", "libnvrtc.so*")), reverse=True)
    if (name := ctypes.util.find_library("nvrtc")) is not None:
        found.append(name)
    for root in (os.getenv("CUDA_PATH", ""), "/usr/local/cuda"):
        if root:
            found += sorted(glob.glob(os.path.join(root, "lib64", "libnvrtc.so*")), reverse=True)
    return [f for f in found if "builtins" not in os.path.basename(f)]


def load_nvrtc() -> ctypes.CDLL:
    """libnvrtc from the nvidia-cuda-nvrtc wheel, the system, or $CUDA_PATH; a clear error if none loads."""
    tried = _nvrtc_candidates()
    for path in tried:
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    raise CUDAUnavailableError(
        "NVRTC not found: looked for libnvrtc.so* in the nvidia-cuda-nvrtc wheel (site-packages/nvidia/*/lib), "
        f"the system library path and $CUDA_PATH/lib64 or /usr/local/cuda/lib64 (tried: {tried or 'nothing found'}). "
        "Install it with `pip install nvidia-cuda-nvrtc`."
    )


def cuda_include_dirs() -> list[str]:
    """Folders holding cuda_fp16.h (the nvidia-cuda-runtime wheel, $CUDA_PATH, /usr/local/cuda)."""
    dirs: list[str] = []
    for base in sys.path:
        dirs += sorted(glob.glob(os.path.join(base, "nvidia", "cu*", "include")), reverse=True)
        dirs += glob.glob(os.path.join(base, "nvidia", "cuda_runtime", "include"))
    for root in (os.getenv("CUDA_PATH", ""), "/usr/local/cuda"):
        if root:
            dirs.append(os.path.join(root, "include"))
    return [d for d in dict.fromkeys(dirs) if os.path.isfile(os.path.join(d, "cuda_fp16.h"))]


def load_libcuda() -> ctypes.CDLL:
    """The driver library; a clear error when there is no NVIDIA driver."""
    names = [n for n in (ctypes.util.find_library("cuda"), "libcuda.so.1", "libcuda.so") if n]
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise CUDAUnavailableError(
        f"the CUDA device is unavailable: no NVIDIA driver (could not load libcuda; tried {names}); it needs an "
        "NVIDIA GPU and its driver (https://www.nvidia.com/drivers)"
    )


def device_count() -> int:
    """How many CUDA devices the driver sees (0 where there is no driver or no GPU); opens no context.

    >>> device_count() >= 0
    True
    """
    try:
        lib = load_libcuda()
    except CUDAError:
        return 0
    count = ctypes.c_int()
    if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


# ---------------------------------------------------------------------------------------------
# NVRTC


class NVRTCCompiler(Compiler):
    """CUDA C -> CUBIN for `arch` (e.g. sm_90) with NVRTC."""

    def __init__(self, arch: str = "sm_90", extra_options: tuple[str, ...] = ()) -> None:
        self.arch = arch
        includes = tuple(f"-I{d}" for d in cuda_include_dirs()[:1])
        self.options = (f"--gpu-architecture={arch}", "-default-device", "-std=c++17", *includes, *extra_options)
        self.cachekey = f"cuda:{arch}:{' '.join(extra_options)}"
        self.lib = load_nvrtc()
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        self.version = f"nvrtc {major.value}.{minor.value}"

    def __getstate__(self) -> dict[str, Any]:
        """BEAM sends the compiler to worker processes: the library handle does not pickle, each loads its own."""
        return {k: v for k, v in self.__dict__.items() if k != "lib"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.lib = load_nvrtc()

    def _check(self, status: int, what: str, prog: ctypes.c_void_p | None = None) -> None:
        if status == 0:
            return
        self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        msg = self.lib.nvrtcGetErrorString(status).decode()
        log = self._log(prog) if prog is not None else ""
        raise CUDAError(f"NVRTC {what} failed ({msg}) for {self.arch}" + (f":\n{log}" if log else ""))

    def _log(self, prog: ctypes.c_void_p) -> str:
        size = ctypes.c_size_t()
        self.lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        self.lib.nvrtcGetProgramLog(prog, buf)
        return buf.value.decode(errors="replace")

    def compile(self, src: str) -> bytes:
        """The CUBIN of `src`: from the disk cache (by NVRTC version, options and source), else built by NVRTC. A
        TinyJit capture file's kernels and a second process's kernels come from there (each NVRTC build is tens of
        ms: the GPT example's 387 kernels took 20 s to load from its capture file before)."""
        key = hashlib.sha256(f"{self.version}\n{' '.join(self.options)}\n{src}".encode()).hexdigest()
        if (lib := diskcache_get("cuda_binary", key)) is not None:
            return bytes(lib)
        lib = self._build(src)
        diskcache_put("cuda_binary", key, lib)
        return lib

    def _build(self, src: str) -> bytes:
        prog = ctypes.c_void_p()
        self._check(
            self.lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"kernel.cu", 0, None, None), "create"
        )
        try:
            options = self.options
            if self.arch == "sm_90" and "wgmma." in src:  # Hopper's warpgroup MMAs exist only in sm_90a (not portable)
                options = tuple("--gpu-architecture=sm_90a" if o == "--gpu-architecture=sm_90" else o for o in options)
            opts = (ctypes.c_char_p * len(options))(*(o.encode() for o in options))
            status = self.lib.nvrtcCompileProgram(prog, len(options), opts)
            if status != 0:
                self._check(status, "compile", prog)
            size = ctypes.c_size_t()
            self._check(self.lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "get cubin size")
            out = ctypes.create_string_buffer(size.value)
            self._check(self.lib.nvrtcGetCUBIN(prog, out), "get cubin")
            return out.raw
        finally:
            self.lib.nvrtcDestroyProgram(ctypes.byref(prog))


# ---------------------------------------------------------------------------------------------
# the driver


class Driver:
    """The few libcuda calls tg needs, with errors that name the failing call.

    Each device has its own (primary) context; with several devices open, every call that needs one makes
    its device's context current first (`use`, a no-op when it already is).
    """

    # the context tg made current last, per thread as CUDA's current context is (None: unknown, e.g. after NCCL):
    # a thread that copies to one GPU while another thread drives a second one sets its own
    _current = threading.local()

    def __init__(self, ordinal: int = 0) -> None:
        self.lib = load_libcuda()
        if (status := self.lib.cuInit(0)) == CUDA_ERROR_NO_DEVICE:
            raise CUDAUnavailableError("the CUDA device is unavailable: the NVIDIA driver sees no GPU (cuInit)")
        self.check(status, "cuInit")
        self.dev = ctypes.c_int()
        if (status := self.lib.cuDeviceGet(ctypes.byref(self.dev), ordinal)) == CUDA_ERROR_INVALID_DEVICE:
            raise CUDAUnavailableError(f"CUDA:{ordinal} is unavailable: this machine has {device_count()} GPU(s)")
        self.check(status, f"cuDeviceGet({ordinal})")
        self.ctx = ctypes.c_void_p()
        self.check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), self.dev), "cuDevicePrimaryCtxRetain")
        self.make_current()
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.check(self.lib.cuDeviceGetAttribute(ctypes.byref(major), 75, self.dev), "cuDeviceGetAttribute(major)")
        self.check(self.lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, self.dev), "cuDeviceGetAttribute(minor)")
        self.arch = f"sm_{major.value}{minor.value}"

    def attribute(self, attr: int) -> int:
        """cuDeviceGetAttribute(attr) of this device."""
        val = ctypes.c_int()
        self.check(self.lib.cuDeviceGetAttribute(ctypes.byref(val), attr, self.dev), f"cuDeviceGetAttribute({attr})")
        return val.value

    def limits(self) -> LaunchLimits:
        """The launch limits the driver reports (threads, block and grid sizes, shared memory, registers)."""
        # CU_DEVICE_ATTRIBUTE_*: 1 threads/block, 2-4 block dims, 5-7 grid dims, 12 regs, 97 the shared memory a
        # block may opt in to (a kernel over the static 48 KiB asks for it at launch: CUDAProgram)
        a = self.attribute
        return LaunchLimits(
            max_threads=a(1),
            block=(a(2), a(3), a(4)),
            grid=(a(5), a(6), a(7)),
            shared_bytes=a(97),
            registers_per_block=a(12),
        )

    def make_current(self) -> None:
        self.check(self.lib.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")
        Driver._current.ctx = self.ctx.value

    def use(self) -> None:
        """Make this device's context current unless it already is."""
        if getattr(Driver._current, "ctx", None) != self.ctx.value:
            self.make_current()

    @staticmethod
    def forget_current() -> None:
        """Another library (NCCL) may have changed the current context: set it again before the next call."""
        Driver._current.ctx = None

    def check(self, status: int, what: str) -> None:
        if status != 0:
            msg = ctypes.c_char_p()
            self.lib.cuGetErrorString(status, ctypes.byref(msg))
            raise CUDAError(f"{what} failed: {msg.value.decode() if msg.value else f'CUresult {status}'}")

    def synchronize(self) -> None:
        self.use()
        self.check(self.lib.cuCtxSynchronize(), "cuCtxSynchronize")


class CUDAAllocator(Allocator):
    """Device memory with a cache: a freed block is kept for the next allocation of the same size.

    cuMemFree waits for the GPU to go idle, so freeing a TinyJit replay's previous output stalled every step
    until the GPU had caught up. Kept blocks are safe to reuse at once: every launch and copy runs in order on
    the one (default) stream. When cuMemAlloc runs out of memory the cache is released and it is tried again.
    """

    def __init__(self, drv: Driver) -> None:
        self.drv = drv
        self.cache: dict[int, list[Any]] = {}
        self.cached_bytes = 0

    def _alloc(self, nbytes: int) -> Any:
        if kept := self.cache.get(nbytes):
            self.cached_bytes -= nbytes
            return kept.pop()
        self.drv.use()
        ptr = ctypes.c_uint64()
        status = self.drv.lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes))
        if status == CUDA_ERROR_OUT_OF_MEMORY and self.cached_bytes:
            self.release()
            status = self.drv.lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes))
        self.drv.check(status, f"cuMemAlloc({nbytes})")
        return ptr

    def _free(self, opaque: Any, nbytes: int) -> None:
        self.cache.setdefault(nbytes, []).append(opaque)
        self.cached_bytes += nbytes

    def release(self) -> None:
        """Give every cached block back to the driver."""
        self.drv.use()
        for blocks in self.cache.values():
            for opaque in blocks:
                self.drv.lib.cuMemFree_v2(opaque)
        self.cache.clear()
        self.cached_bytes = 0

    def _copyin(self, dest: Any, src: memoryview) -> None:
        # the async form copies pageable host memory to a staging buffer before it returns (so `src` may go), and
        # unlike cuMemcpyHtoD it does not wait for the GPU to finish earlier work. A writable `src` is read where it
        # is (a model's weights from a private mapping of the file: no host copy first); ctypes can only point at
        # writable memory, so a read-only one is copied once
        host = (
            (ctypes.c_char * src.nbytes).from_buffer_copy(src)
            if src.readonly
            else ((ctypes.c_char * src.nbytes).from_buffer(src))
        )
        self.drv.use()
        self.drv.check(
            self.drv.lib.cuMemcpyHtoDAsync_v2(dest, host, ctypes.c_size_t(src.nbytes), None), "cuMemcpyHtoDAsync"
        )

    def transfer(self, dest: Any, src: Any, nbytes: int, src_allocator: Allocator) -> bool:
        """CUDA -> CUDA without the host: on one device a device-to-device copy on the default stream (in order
        with the kernels there); between two devices cuMemcpyPeer, which the driver orders after all earlier work
        and before all later work of both contexts (no host wait; it stages through the host only where the
        GPUs have no peer access)."""
        if not isinstance(src_allocator, CUDAAllocator):
            return False
        self.drv.use()
        size = ctypes.c_size_t(nbytes)
        if src_allocator.drv.ctx.value == self.drv.ctx.value:
            self.drv.check(self.drv.lib.cuMemcpyDtoDAsync_v2(dest, src, size, None), "cuMemcpyDtoDAsync")
        else:
            other = src_allocator.drv
            self.drv.check(self.drv.lib.cuMemcpyPeer(dest, self.drv.ctx, src, other.ctx, size), "cuMemcpyPeer")
        return True

    def _copyout(self, dest: memoryview, src: Any) -> None:
        self.drv.synchronize()
        host = (ctypes.c_char * dest.nbytes).from_buffer(dest)
        self.drv.check(self.drv.lib.cuMemcpyDtoH_v2(host, src, ctypes.c_size_t(dest.nbytes)), "cuMemcpyDtoH")


class CUDAProgram:
    """A loaded CUBIN function; launches on the default stream and times with events when asked. `shared_bytes`:
    the dynamic shared memory each launch asks for (the kernel's tiles over the static 48 KiB)."""

    def __init__(self, drv: Driver, name: str, lib: bytes, shared_bytes: int = 0) -> None:
        self.drv, self.name, self.shared_bytes = drv, name, shared_bytes
        drv.use()
        self.module = ctypes.c_void_p()
        drv.check(drv.lib.cuModuleLoadData(ctypes.byref(self.module), lib), f"cuModuleLoadData({name})")
        self.fxn = ctypes.c_void_p()
        drv.check(
            drv.lib.cuModuleGetFunction(ctypes.byref(self.fxn), self.module, name.encode()),
            f"cuModuleGetFunction({name})",
        )
        if shared_bytes > 0:  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: opt in to more than 48 KiB
            drv.check(
                drv.lib.cuFuncSetAttribute(self.fxn, 8, shared_bytes), f"cuFuncSetAttribute({name}, {shared_bytes})"
            )

    def __call__(
        self,
        *bufs: Any,
        global_size: tuple[int, ...] | None = None,
        local_size: tuple[int, ...] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        args = [ctypes.c_uint64(b.value) for b in bufs] + [ctypes.c_int(v) for v in vals]
        params = (ctypes.c_void_p * len(args))(*(ctypes.cast(ctypes.byref(a), ctypes.c_void_p) for a in args))
        gs = tuple(global_size or (1,)) + (1, 1, 1)
        ls = tuple(local_size or (1,)) + (1, 1, 1)
        st = time.perf_counter()
        self.drv.use()
        self.drv.check(
            self.drv.lib.cuLaunchKernel(
                self.fxn, gs[0], gs[1], gs[2], ls[0], ls[1], ls[2], self.shared_bytes, None, params, None
            ),
            f"cuLaunchKernel({self.name}, grid={gs[:3]}, block={ls[:3]})",
        )
        if not wait:
            return None
        self.drv.synchronize()
        return time.perf_counter() - st


class CUDADevice(Compiled):
    def __init__(self, name: str) -> None:
        ordinal = int(name.split(":")[1]) if ":" in name else 0
        self.drv = Driver(ordinal)
        drv = self.drv
        super().__init__(
            name,
            CUDAAllocator(drv),
            CUDARenderer(drv.arch, drv.limits(), drv.attribute(16)),  # 16: MULTIPROCESSOR_COUNT
            NVRTCCompiler(drv.arch),
            lambda fname, lib, shared_bytes=0: CUDAProgram(drv, fname, lib, shared_bytes),
        )

    def synchronize(self) -> None:
        self.drv.synchronize()

    def graph(self, launches: list[Launch]) -> CUDAGraph:
        return CUDAGraph(self.drv, list(launches))

    def multi_graph(self, items: list[GraphItem]) -> CUDAMultiGraph:
        return CUDAMultiGraph(items)


def open_device(name: str) -> Compiled:
    return CUDADevice(name)


# ---------------------------------------------------------------------------------------------
# CUDA graphs: record kernel launches once, replay them with one launch


class _KernelNodeParams(ctypes.Structure):
    """CUDA_KERNEL_NODE_PARAMS_v2."""

    _fields_ = [
        ("func", ctypes.c_void_p),
        ("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
        ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
        ("sharedMemBytes", ctypes.c_uint),
        ("kernelParams", ctypes.POINTER(ctypes.c_void_p)),
        ("extra", ctypes.POINTER(ctypes.c_void_p)),
        ("kern", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
    ]  # fmt: skip


Launch = tuple[CUDAProgram, list[Any], tuple[int, ...] | None, tuple[int, ...] | None, tuple[int, ...]]


class CUDAGraph:
    """A recorded chain of kernel launches (each after the previous), replayed by one cuGraphLaunch.

    launches: (program, device buffers, global size, local size, int variable values) per kernel.
    """

    def __init__(
        self, drv: Driver, launches: list[Launch | ctypes.c_void_p], after: list[list[int]] | None = None
    ) -> None:
        """An entry that is a graph handle (work captured from a stream: a copy, an NCCL call) becomes a child
        graph node in its place (`set_child` swaps it for another capture). `after`: per entry, the earlier
        entries it waits for (default: the one before it); a kernel runs in its program's context, so one graph
        may hold the work of several devices."""
        if not launches:
            raise ValueError("CUDAGraph needs at least one launch")
        self.drv = drv
        self.graph, self.exec = ctypes.c_void_p(), ctypes.c_void_p()
        drv.use()
        drv.check(drv.lib.cuGraphCreate(ctypes.byref(self.graph), 0), "cuGraphCreate")
        self.launches = list(launches)
        self.nodes: list[ctypes.c_void_p] = []
        self._args: list[Any] = []  # per node, the argument storage its parameters point into
        for i, entry in enumerate(launches):
            node = ctypes.c_void_p()
            waits = ([i - 1] if i else []) if after is None else after[i]
            deps = (ctypes.c_void_p * max(1, len(waits)))(*(self.nodes[w] for w in waits))
            if isinstance(entry, ctypes.c_void_p):
                drv.check(
                    drv.lib.cuGraphAddChildGraphNode(ctypes.byref(node), self.graph, deps, len(waits), entry),
                    "cuGraphAddChildGraphNode",
                )
                keep: Any = None
            else:
                prog, bufs, gsz, lsz, vals = entry
                params, keep = self._params(prog, bufs, gsz, lsz, vals)
                drv.check(
                    drv.lib.cuGraphAddKernelNode_v2(
                        ctypes.byref(node), self.graph, deps, len(waits), ctypes.byref(params)
                    ),
                    f"cuGraphAddKernelNode({prog.name})",
                )
            self.nodes.append(node)
            self._args.append(keep)
        drv.check(
            drv.lib.cuGraphInstantiateWithFlags(ctypes.byref(self.exec), self.graph, ctypes.c_ulonglong(0)),
            "cuGraphInstantiateWithFlags",
        )

    def _params(
        self,
        prog: CUDAProgram,
        bufs: list[Any],
        gsz: tuple[int, ...] | None,
        lsz: tuple[int, ...] | None,
        vals: tuple[int, ...],
    ) -> tuple[_KernelNodeParams, Any]:
        """The node parameters, and the storage they point into (keep it alive with the node)."""
        args = [ctypes.c_uint64(b.value) for b in bufs] + [ctypes.c_int(v) for v in vals]
        ptrs = (ctypes.c_void_p * len(args))(*(ctypes.cast(ctypes.byref(a), ctypes.c_void_p) for a in args))
        g = tuple(gsz or (1,)) + (1, 1, 1)
        b = tuple(lsz or (1,)) + (1, 1, 1)
        p = _KernelNodeParams(
            prog.fxn.value,
            g[0],
            g[1],
            g[2],
            b[0],
            b[1],
            b[2],
            prog.shared_bytes,
            ctypes.cast(ptrs, ctypes.POINTER(ctypes.c_void_p)),
            None,
            None,
            prog.drv.ctx.value,
        )
        return p, (args, ptrs, p)

    def update(self, i: int, bufs: list[Any], vals: tuple[int, ...] | None = None) -> None:
        """Point launch `i` of the instantiated graph at other device buffers (same sizes and kinds) and, given
        `vals`, other values of its int variables."""
        entry = self.launches[i]
        assert not isinstance(entry, ctypes.c_void_p), "a child graph node is changed by set_child"
        prog, _, gsz, lsz, old_vals = entry
        vals = old_vals if vals is None else vals
        # the node's argument storage is written in place: the driver copies the values when it sets them (a
        # replay that changes an input and its output updates two nodes; building new storage cost ~13 us each)
        args, _, params = self._args[i]
        for arg, b in zip(args, bufs):
            arg.value = b.value
        for arg, v in zip(args[len(bufs) :], vals):
            arg.value = v
        status = self.drv.lib.cuGraphExecKernelNodeSetParams_v2(self.exec, self.nodes[i], ctypes.byref(params))
        if status:
            self.drv.check(status, f"cuGraphExecKernelNodeSetParams({prog.name})")
        self.launches[i] = (prog, bufs, gsz, lsz, vals)

    def set_child(self, i: int, graph: ctypes.c_void_p) -> None:
        """Replace the work of child graph node `i` by that of `graph` (a capture of the same kind of work)."""
        self.drv.use()
        self.drv.check(
            self.drv.lib.cuGraphExecChildGraphNodeSetParams(self.exec, self.nodes[i], graph),
            "cuGraphExecChildGraphNodeSetParams",
        )
        self.launches[i] = graph

    def __call__(self, wait: bool = False) -> float | None:
        st = time.perf_counter()
        self.drv.use()
        self.drv.check(self.drv.lib.cuGraphLaunch(self.exec, None), "cuGraphLaunch")
        if not wait:
            return None
        self.drv.synchronize()
        return time.perf_counter() - st

    def __del__(self) -> None:
        try:
            if self.exec.value:
                self.drv.lib.cuGraphExecDestroy(self.exec)
            if self.graph.value:
                self.drv.lib.cuGraphDestroy(self.graph)
        except Exception:  # interpreter shutdown
            pass


CU_STREAM_NON_BLOCKING, CU_STREAM_CAPTURE_MODE_RELAXED, CU_EVENT_DISABLE_TIMING = 1, 2, 2


class CUDAMultiGraph:
    """Work on several CUDA devices replayed as one CUDA graph: each device's kernels in order, the copies between
    devices and the NCCL collectives over them captured from streams into child graph nodes in their places. A
    copy waits for the last work of both its devices (and both wait for it); a collective's node on each device
    waits for that device's last work (NCCL's kernels meet across the devices inside the graph).

    The graph is launched on the first device's default stream, after the work queued on the others' (events),
    and the others' later work waits for it.
    """

    def __init__(self, items: list[GraphItem]) -> None:
        self.items = list(items)
        self.drvs: dict[str, Driver] = {}
        for item in items:
            names = [item.device] if isinstance(item, GraphKernel) else [b.device for b in self._buffers(item)]
            for name in names:
                dev = Device[name]
                if not isinstance(dev, CUDADevice):
                    raise ValueError(f"CUDAMultiGraph: {name} is not a CUDA device")
                self.drvs.setdefault(dev.device, dev.drv)
        self.streams: dict[str, ctypes.c_void_p] = {}
        self.events: dict[str, ctypes.c_void_p] = {}
        for name, drv in self.drvs.items():
            drv.use()
            stream, event = ctypes.c_void_p(), ctypes.c_void_p()
            drv.check(drv.lib.cuStreamCreate(ctypes.byref(stream), CU_STREAM_NON_BLOCKING), "cuStreamCreate")
            drv.check(drv.lib.cuEventCreate(ctypes.byref(event), CU_EVENT_DISABLE_TIMING), "cuEventCreate")
            self.streams[name], self.events[name] = stream, event
        entries: list[Launch | ctypes.c_void_p] = []
        after: list[list[int]] = []
        last: dict[str, int] = {}  # device -> its last entry so far
        self.where: list[list[int]] = []  # per item: its entries
        for item in items:
            if isinstance(item, GraphKernel):
                name = Device[item.device].device
                placed: list[tuple[Launch | ctypes.c_void_p, list[str]]] = [(item.launch, [name])]
            elif isinstance(item, GraphCopy):
                ((name, graph),) = self._capture(item)
                placed = [(graph, [name, Device[item.src.device].device])]
            else:
                placed = [(graph, [name]) for name, graph in self._capture(item)]
            self.where.append([])
            for entry, waits_on in placed:
                after.append(sorted({last[d] for d in waits_on if d in last}))
                self.where[-1].append(len(entries))
                for d in waits_on:
                    last[d] = len(entries)
                entries.append(entry)
        self.first = next(iter(self.drvs))
        self.graph = CUDAGraph(self.drvs[self.first], entries, after)

    @staticmethod
    def _buffers(item: GraphCopy | GraphCollective) -> list[Buffer]:
        return [item.dest, item.src] if isinstance(item, GraphCopy) else item.outs + item.ins

    def _capture(self, item: GraphCopy | GraphCollective) -> list[tuple[str, ctypes.c_void_p]]:
        """The copy or collective captured on its devices' streams: one graph per device it runs on."""
        from tg_runtime import nccl

        if isinstance(item, GraphCopy):
            names = [Device[item.dest.device].device]
        else:
            names = [Device[b.device].device for b in item.outs]
        for name in names:
            self.drvs[name].use()
            self.drvs[name].check(
                self.drvs[name].lib.cuStreamBeginCapture_v2(self.streams[name], CU_STREAM_CAPTURE_MODE_RELAXED),
                "cuStreamBeginCapture",
            )
        try:
            if isinstance(item, GraphCopy):
                drv = self.drvs[names[0]]  # (unified addressing: the pointers name their devices)
                drv.use()
                drv.check(
                    drv.lib.cuMemcpyAsync(
                        item.dest.opaque, item.src.opaque, ctypes.c_size_t(item.src.nbytes), self.streams[names[0]]
                    ),
                    "cuMemcpyAsync",
                )
            else:
                nccl.run_buffers(item.kind, item.op, item.outs, item.ins, [self.streams[n] for n in names])
        finally:
            Driver.forget_current()
            graphs = []
            for name in names:
                drv, graph = self.drvs[name], ctypes.c_void_p()
                drv.use()
                drv.check(drv.lib.cuStreamEndCapture(self.streams[name], ctypes.byref(graph)), "cuStreamEndCapture")
                graphs.append(graph)
        return list(zip(names, graphs))

    def update(self, i: int, bufs: list[Any], vals: tuple[int, ...] | None = None) -> None:
        """Item `i` with other buffers: a kernel's launch arguments (and variable values), or the Buffers of a copy
        (dest, src) or a collective (outs then ins, as before), captured again."""
        item = self.items[i]
        if isinstance(item, GraphKernel):
            self.graph.update(self.where[i][0], bufs, vals)
            return
        if isinstance(item, GraphCopy):
            self.items[i] = item = GraphCopy(bufs[0], bufs[1])
        else:
            n = len(item.outs)
            item.outs, item.ins = list(bufs[:n]), list(bufs[n:])
        for idx, (name, graph) in zip(self.where[i], self._capture(item)):
            old = self.graph.launches[idx]
            self.graph.set_child(idx, graph)
            if isinstance(old, ctypes.c_void_p):  # (the instantiated graph holds its own copy of the work)
                self.drvs[name].lib.cuGraphDestroy(old)

    def _wait(self, waiting: list[str], on: list[str]) -> None:
        """The default streams of `waiting` wait for the work queued so far on those of `on`."""
        for name in on:
            self.drvs[name].use()
            self.drvs[name].check(self.drvs[name].lib.cuEventRecord(self.events[name], None), "cuEventRecord")
        for name in waiting:
            drv = self.drvs[name]
            drv.use()
            for other in on:
                drv.check(drv.lib.cuStreamWaitEvent(None, self.events[other], 0), "cuStreamWaitEvent")

    def __call__(self, wait: bool = False) -> float | None:
        st = time.perf_counter()
        others = [name for name in self.drvs if name != self.first]
        self._wait([self.first], others)
        self.graph()
        self._wait(others, [self.first])
        if not wait:
            return None
        self.drvs[self.first].synchronize()
        return time.perf_counter() - st

    def __del__(self) -> None:
        try:
            for name, drv in self.drvs.items():
                drv.lib.cuStreamDestroy_v2(self.streams[name])
                drv.lib.cuEventDestroy_v2(self.events[name])
            for entry in self.graph.launches:
                if isinstance(entry, ctypes.c_void_p):
                    self.graph.drv.lib.cuGraphDestroy(entry)
        except Exception:  # interpreter shutdown
            pass
