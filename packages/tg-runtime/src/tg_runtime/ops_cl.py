"""The CL device: OpenCL C through pyopencl (`pip install tg-runtime[opencl]`, plus a driver such as PoCL).

>>> from tg_runtime.device import Device
>>> "CL" in Device.known()
True
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from tg_codegen.diskcache import diskcache_get, diskcache_put
from tg_codegen.renderer.opencl import OpenCLRenderer
from tg_runtime.device import Allocator, Compiled, Compiler, DeviceUnavailableError

INSTALL_DRIVER = (
    "install an OpenCL driver, e.g. `apt-get install pocl-opencl-icd ocl-icd-libopencl1` (PoCL, OpenCL on the CPU) "
    "or your GPU vendor's ICD"
)


class CLCompileError(RuntimeError):
    """The OpenCL driver rejected a kernel; the message holds its build log."""


def _cl() -> Any:
    try:
        import pyopencl
    except ImportError as e:
        raise DeviceUnavailableError(
            "the CL device is unavailable: pyopencl is not installed; pip install 'tg-runtime[opencl]'"
        ) from e
    return pyopencl


def _cl_devices(cl: Any) -> list[Any]:
    """Every OpenCL device of every platform; DeviceUnavailableError when the ICD loader finds no platform."""
    try:
        return [d for p in cl.get_platforms() for d in p.get_devices()]
    except cl.Error as e:  # PLATFORM_NOT_FOUND_KHR: no ICD registered (OCL_ICD_VENDORS, /etc/OpenCL/vendors)
        raise DeviceUnavailableError(f"the CL device is unavailable: no OpenCL platform ({e}); {INSTALL_DRIVER}") from e


class CLAllocator(Allocator):
    def __init__(self, ctx: Any, queue: Any) -> None:
        self.ctx, self.queue = ctx, queue

    def _alloc(self, nbytes: int) -> Any:
        cl = _cl()
        return cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE, nbytes)

    def _copyin(self, dest: Any, src: memoryview) -> None:
        _cl().enqueue_copy(self.queue, dest, np.frombuffer(bytes(src), np.uint8), is_blocking=True)

    def _copyout(self, dest: memoryview, src: Any) -> None:
        host = np.empty(dest.nbytes, np.uint8)
        _cl().enqueue_copy(self.queue, host, src, is_blocking=True)
        dest[:] = host.tobytes()


class CLCompiler(Compiler):
    """OpenCL C -> program binary for one device (cached on disk)."""

    def __init__(self, ctx: Any, device: Any) -> None:
        self.ctx, self.dev = ctx, device
        self.cachekey = f"cl:{device.platform.name}:{device.name}:{device.driver_version}"

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("CLCompiler holds an OpenCL context and cannot go to another process")

    def compile(self, src: str) -> bytes:
        key = hashlib.sha256(f"{self.cachekey}\n{src}".encode()).hexdigest()
        if (lib := diskcache_get("cl_binary", key)) is not None:
            return bytes(lib)
        cl = _cl()
        try:
            prg = cl.Program(self.ctx, src).build(options="-cl-std=CL1.2")
        except cl.RuntimeError as e:
            raise CLCompileError(f"OpenCL build failed:\n{e}\n--- source ---\n{src}") from e
        lib = bytes(prg.binaries[0])
        diskcache_put("cl_binary", key, lib)
        return lib


class CLProgram:
    """A kernel loaded from its binary; launched over global_size groups of local_size work items."""

    def __init__(self, ctx: Any, queue: Any, device: Any, name: str, lib: bytes) -> None:
        cl = _cl()
        self.queue, self.name = queue, name
        self.prg = cl.Program(ctx, [device], [lib]).build()
        self.kernel = getattr(self.prg, name)

    def __call__(
        self,
        *bufs: Any,
        global_size: tuple[int, ...] | None = None,
        local_size: tuple[int, ...] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        local = tuple(local_size or (1,))
        groups = tuple(global_size or (1,))
        dims = max(len(local), len(groups))
        local = local + (1,) * (dims - len(local))
        groups = groups + (1,) * (dims - len(groups))
        total = tuple(g * lo for g, lo in zip(groups, local))
        args = [*bufs, *(np.int32(v) for v in vals)]
        evt = self.kernel(self.queue, total, local, *args)
        if not wait:
            return None
        evt.wait()
        return float(evt.profile.end - evt.profile.start) * 1e-9


class CLDevice(Compiled):
    queue: Any = None
    is_gpu: bool = False

    def synchronize(self) -> None:
        self.queue.finish()


def open_device(name: str) -> Compiled:
    cl = _cl()
    devices = _cl_devices(cl)
    if not devices:
        raise DeviceUnavailableError(
            f"the CL device is unavailable: no OpenCL device on any platform; {INSTALL_DRIVER}"
        )
    idx = int(name.split(":")[1]) if ":" in name else 0
    if idx >= len(devices):
        raise DeviceUnavailableError(f"{name} is unavailable: this machine has {len(devices)} OpenCL device(s)")
    dev = devices[idx]
    ctx = cl.Context([dev])
    queue = cl.CommandQueue(ctx, dev, properties=cl.command_queue_properties.PROFILING_ENABLE)
    renderer = OpenCLRenderer(fp16="cl_khr_fp16" in dev.extensions, fp64="cl_khr_fp64" in dev.extensions)
    ret = CLDevice(
        name,
        CLAllocator(ctx, queue),
        renderer,
        CLCompiler(ctx, dev),
        lambda fn, lib: CLProgram(ctx, queue, dev, fn, lib),
    )
    ret.queue = queue
    ret.is_gpu = bool(dev.type & cl.device_type.GPU)
    return ret
