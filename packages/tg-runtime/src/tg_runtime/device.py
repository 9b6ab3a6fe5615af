"""Devices: the registry, Buffer, and the Allocator / Compiler / Program interfaces a backend implements.

Write your own backend by combining the three:

>>> from tg_runtime.device import Device, Compiled
>>> Device.canonicalize("cpu")
'CPU'
"""

from __future__ import annotations

import functools
import importlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from tg_codegen.renderer import ProgramSpec, Renderer
from tg_uop import DType
from tg_uop.helpers import DEBUG, GlobalCounters, LRUCache, getenv
from tg_uop.trace import TRACE


class UnusableCompilerError(RuntimeError):
    """The compiler the user chose (e.g. $CC) cannot be used; raised instead of quietly taking another."""


class DeviceUnavailableError(RuntimeError):
    """A device, or a library it needs, is not on this machine (no driver, no OpenCL platform, no GPU).

    The message names what is missing and how to install it; tests skip on it with that message as the reason.

    >>> str(DeviceUnavailableError("the CL device is unavailable: no OpenCL platform"))
    'the CL device is unavailable: no OpenCL platform'
    """


class Allocator:
    """Device memory. Subclasses implement `_alloc`, `_free`, `_copyin` and `_copyout`."""

    def alloc(self, nbytes: int) -> Any:
        if not isinstance(nbytes, int) or nbytes < 0:
            raise ValueError(f"alloc: size must be a non-negative int of bytes, got {nbytes!r}")
        return self._alloc(max(nbytes, 1))

    def free(self, opaque: Any, nbytes: int) -> None:
        self._free(opaque, nbytes)

    def copyin(self, dest: Any, src: memoryview) -> None:
        """Host bytes -> device buffer."""
        self._copyin(dest, src)

    def copyout(self, dest: memoryview, src: Any) -> None:
        """Device buffer -> host bytes."""
        self._copyout(dest, src)

    def transfer(self, dest: Any, src: Any, nbytes: int, src_allocator: Allocator) -> bool:
        """Copy `nbytes` from `src` (memory of `src_allocator`, maybe another device's) straight into `dest`, in
        order with both devices' work; False where this allocator cannot (the caller copies through host bytes).
        CPU devices memmove between their arrays; CUDA devices copy device to device (cuMemcpyPeer between GPUs)."""
        return False

    def release(self) -> None:
        """Give the memory of freed buffers that this allocator keeps for reuse back to the system (none here)."""

    def _alloc(self, nbytes: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement _alloc")

    def _free(self, opaque: Any, nbytes: int) -> None:
        pass

    def _copyin(self, dest: Any, src: memoryview) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _copyin")

    def _copyout(self, dest: memoryview, src: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _copyout")


class Compiler:
    """Source -> binary. Results are cached in memory per (compiler, source).

    `compile_many` builds several sources at once; a compiler that can do that in one run cheaper than in one
    run each (the C compiler: one process for a batch of kernels) overrides it and sets `batches`.
    """

    cachekey: str | None = None
    threadsafe = False  # may several threads compile at once (kernels of one schedule compile in parallel)
    batches = False  # compile_many is cheaper than compiling the sources one by one

    def compile(self, src: str) -> bytes:
        raise NotImplementedError(f"{type(self).__name__} must implement compile")

    def compile_many(self, srcs: list[str]) -> list[bytes]:
        """The binaries of `srcs`, in order: each holds (at least) the kernel of its source."""
        return [self.compile(src) for src in srcs]

    def compile_cached(self, src: str) -> bytes:
        return self.compile_cached_many([src])[0]

    def remember(self, src: str, lib: bytes) -> None:
        """Keep `lib` as the binary of `src` (built by this compiler in another process)."""
        _compiled[_memory_key(self, src)] = lib

    def compile_cached_many(self, srcs: list[str]) -> list[bytes]:
        """`compile_many` of the sources not compiled before in this process (their binaries are kept)."""
        found = {src: lib for src in srcs if (lib := _compiled.get(_memory_key(self, src))) is not None}
        todo = list(dict.fromkeys(src for src in srcs if src not in found))
        if todo:
            libs = self.compile_many(todo) if len(todo) > 1 else [self.compile(todo[0])]
            for src, lib in zip(todo, libs, strict=True):
                found[src] = _compiled[_memory_key(self, src)] = lib
        return [found[src] for src in srcs]


def _memory_key(compiler: Compiler, src: str) -> tuple[str, Compiler, str]:
    return (compiler.cachekey or type(compiler).__name__, compiler, src)


class _LockedLRU:
    """The binaries compiled in this process, the most recently used KERNEL_CACHE_MAX of them (compile threads
    read and write it)."""

    def __init__(self, maxsize: int) -> None:
        self.lru = LRUCache[tuple[str, Compiler, str], bytes](maxsize)
        self.lock = threading.Lock()

    def get(self, key: tuple[str, Compiler, str]) -> bytes | None:
        with self.lock:
            return self.lru.get(key)

    def __setitem__(self, key: tuple[str, Compiler, str], lib: bytes) -> None:
        with self.lock:
            self.lru[key] = lib


_compiled = _LockedLRU(int(getenv("KERNEL_CACHE_MAX", 1024)))


class Program(Protocol):
    """A loaded kernel. Called with device buffers (and int variable values); returns seconds if `wait`."""

    def __call__(
        self,
        *bufs: Any,
        global_size: tuple[int, ...] | None = None,
        local_size: tuple[int, ...] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None: ...


# (function name, binary[, dynamic shared bytes: CUDA's kernels over 48 KiB of shared memory, see program_extra])
ProgramFactory = Callable[..., Program]


def program_extra(spec: ProgramSpec) -> tuple[int, ...]:
    """The arguments after (name, binary) a device's program factory takes for `spec`: its dynamic shared memory,
    where it asks for any (only CUDA's renderer does), else none (every device's factory takes the two)."""
    return (spec.shared_bytes,) if spec.shared_bytes else ()


def bind_program(
    program: Program,
    *bufs: Any,
    global_size: tuple[int, ...] | None = None,
    local_size: tuple[int, ...] | None = None,
    vals: tuple[int, ...] = (),
) -> Callable[[], Any]:
    """One launch of `program` on these buffers as a call with everything prepared (TinyJit's replays).

    A program class may define `bind(*bufs, global_size=, local_size=, vals=)` with a faster calling convention
    (the CPU program calls its C function with raw pointers); otherwise the launch is `program(*bufs, ...)`.
    """
    if (bind := getattr(program, "bind", None)) is not None:
        return bind(*bufs, global_size=global_size, local_size=local_size, vals=vals)  # type: ignore[no-any-return]
    return functools.partial(program, *bufs, global_size=global_size, local_size=local_size, vals=vals)


def launcher_of(
    program: Program, global_size: tuple[int, ...] | None = None, local_size: tuple[int, ...] | None = None
) -> Callable[..., Any]:
    """`program`'s launch as a call on buffer handles given positionally, without variables or timing (the
    replay of a recorded schedule, `CompiledRunner.run_replayed`).

    A program class may define `launcher(global_size=, local_size=)` with a faster calling convention (the CPU
    program gives its C function: its allocator's handles are ctypes arrays, passed as pointers); otherwise the
    launch is `program(*handles, global_size=, local_size=)`.
    """
    if (launcher := getattr(program, "launcher", None)) is not None:
        return launcher(global_size=global_size, local_size=local_size)  # type: ignore[no-any-return]
    return functools.partial(program, global_size=global_size, local_size=local_size)


class Compiled:
    """A device: its allocator, renderer, compiler and program loader.

    `searchable`: BEAM may time candidate kernels on it (False for the PYTHON interpreter: too slow to time).
    """

    def __init__(
        self,
        device: str,
        allocator: Allocator,
        renderer: Renderer,
        compiler: Compiler,
        runtime: ProgramFactory,
        searchable: bool = True,
    ) -> None:
        self.device, self.allocator, self.renderer, self.compiler, self.runtime = (
            device,
            allocator,
            renderer,
            compiler,
            runtime,
        )
        self.searchable = searchable
        self.waker: Callable[[], object] | None = None  # (the CPU: wakes its thread pool)

    def prepare(self) -> None:
        """Kernels are about to be launched here (a realize starts): a device whose threads sleep when idle has
        them woken now (`waker`), so they are up by the first launch instead of after it. Default: nothing."""
        if self.waker is not None:
            self.waker()

    def synchronize(self) -> None:
        """Wait for queued work (devices that run synchronously need nothing)."""

    def graph(self, launches: list[GraphLaunch]) -> DeviceGraph | None:
        """A recording of these kernel launches that replays them in one go, or None (the default: the device
        has no such thing, and callers launch one by one). TinyJit uses it for its replays."""
        return None

    def multi_graph(self, items: list[GraphItem]) -> DeviceGraph | None:
        """A replay of work on several devices of this kind (`items` in order: kernels, copies between them,
        collectives over them) as one graph, or None (the default: launched one by one).
        `update(i, ...)` then takes item i's new launch arguments (a kernel) or Buffers (a copy, a collective)."""
        return None


# one kernel launch of a graph: (program, buffer handles, global size, local size, int variable values)
GraphLaunch = tuple[Any, list[Any], "tuple[int, ...] | None", "tuple[int, ...] | None", "tuple[int, ...]"]


@dataclass
class GraphKernel:
    """A kernel launch on `device`, an item of a multi-device graph."""

    device: str
    launch: GraphLaunch


@dataclass
class GraphCopy:
    """A copy of Buffer `src` into `dest` (another device of the same kind), an item of a multi-device graph."""

    dest: Buffer
    src: Buffer


@dataclass
class GraphCollective:
    """A collective over the devices of `outs` (kind, op and buffers as tg_runtime.nccl.run_buffers takes them)."""

    kind: str
    op: str
    outs: list[Buffer]
    ins: list[Buffer]


GraphItem = GraphKernel | GraphCopy | GraphCollective


class DeviceGraph(Protocol):
    """Replays recorded launches; `update` points launch `i` at other buffers (and, given `vals`, other
    variable values) before the next replay."""

    def __call__(self, wait: bool = False) -> float | None: ...

    def update(self, i: int, bufs: list[Any], vals: tuple[int, ...] | None = None) -> None: ...


# plain device names seen -> their canonical names (canonicalize is called for every Buffer and launch)
_CANONICAL: dict[str, str] = {}


class _DeviceRegistry:
    """`Device["CPU"]` opens (once) and returns a device; `Device.DEFAULT` is the default device's name."""

    _builtin: dict[str, str] = {
        "CPU": "tg_runtime.ops_cpu",
        "PYTHON": "tg_runtime.ops_python",
        "CUDA": "tg_runtime.ops_cuda",
        "DISK": "tg_runtime.ops_disk",
        "CL": "tg_runtime.ops_cl",
    }

    def __init__(self) -> None:
        self._factories: dict[str, Callable[[str], Compiled]] = {}
        self._opened: dict[str, Compiled] = {}
        self._default: str | None = None

    @staticmethod
    def canonicalize(name: str | tuple[str, ...] | list[str]) -> str:
        """The canonical name: `cpu` -> `CPU`, `CUDA:0` -> `CUDA`; several devices give a DeviceSet."""
        if type(name) is str and (known := _CANONICAL.get(name)) is not None:  # (every Buffer and launch asks)
            return known
        if isinstance(name, (tuple, list)) or (isinstance(name, str) and "," in name):
            return DeviceSet(name)
        if not isinstance(name, str) or not name:
            raise ValueError(f"device name must be a non-empty string, got {name!r}")
        base, _, idx = name.partition(":")
        base = base.upper()
        out = base if idx in ("", "0") else f"{base}:{idx}"
        if type(name) is str and len(_CANONICAL) < 4096:
            _CANONICAL[name] = out
        return out

    def register(self, name: str, factory: Callable[[str], Compiled]) -> None:
        """Add a device without editing tg: `factory(name)` builds its Compiled object."""
        self._factories[self.canonicalize(name).split(":")[0]] = factory

    def known(self) -> list[str]:
        return sorted(set(self._builtin) | set(self._factories) | set(_entry_point_devices()))

    def __getitem__(self, name: str) -> Compiled:
        if (dev := self._opened.get(name)) is not None:  # (a canonical name of an open device: the usual case)
            return dev
        key = self.canonicalize(name)
        if isinstance(key, DeviceSet):
            names = ", ".join(key.devices)
            raise ValueError(f"Device[{key!r}]: that is several devices; open them one by one ({names})")
        if key not in self._opened:
            self._opened[key] = self._open(key)
        return self._opened[key]

    def _open(self, key: str) -> Compiled:
        base = key.split(":")[0]
        if base in self._factories:
            return self._factories[base](key)
        if base in self._builtin:
            module = importlib.import_module(self._builtin[base])
            return module.open_device(key)  # type: ignore[no-any-return]
        eps = _entry_point_devices()
        if base in eps:
            return eps[base]().__call__(key)  # type: ignore[no-any-return]
        raise KeyError(f"unknown device {key!r}; known devices: {', '.join(self.known())}")

    @property
    def DEFAULT(self) -> str:  # noqa: N802  (tinygrad's spelling)
        if self._default is None:
            self._default = self._pick_default()
        return self._default

    @DEFAULT.setter
    def DEFAULT(self, name: str) -> None:  # noqa: N802
        self[name]  # validate by opening
        self._default = self.canonicalize(name)

    def _pick_default(self) -> str:
        if dev := os.getenv("DEV"):
            self[dev]
            return self.canonicalize(dev)
        for flag in ("CUDA", "CL", "CPU", "PYTHON"):
            if os.getenv(flag, "0") not in ("", "0"):
                self[flag]
                return flag
        for candidate in ("CUDA", "CL", "CPU"):
            if candidate not in self.known():
                continue
            try:
                if candidate == "CL" and not getattr(self[candidate], "is_gpu", False):
                    continue  # CL is the default only on a GPU (PoCL on the CPU is slower than CPU)
                self[candidate]
                return candidate
            except UnusableCompilerError:  # the user asked for it: an error, never a quiet fallback
                raise
            except Exception as e:  # a device that fails to open is skipped
                if DEBUG >= 1:
                    print(f"device {candidate} unavailable: {e}")
        return "PYTHON"


@functools.cache
def _entry_point_devices() -> dict[str, Any]:
    from importlib.metadata import entry_points

    return {ep.name.upper(): ep.load for ep in entry_points(group="tg.devices")}


Device = _DeviceRegistry()


class DeviceSet(str):
    """Several devices of one kind, where a sharded tensor lives: a str (`"CPU,CPU:1"`) so it travels wherever a
    device name does, equal to the tuple of its names as well (tinygrad's `t.device` of a sharded tensor).

    A set of one device is a device set too (as in tinygrad, `shard((d,))` gives a sharded tensor on the 1-tuple):
    its name ends with a comma, like Python's 1-tuple, so it is never mistaken for the device itself.

    >>> ds = DeviceSet(("cpu:0", "CPU:1"))
    >>> ds.devices, ds == ("CPU", "CPU:1"), ds
    (('CPU', 'CPU:1'), True, 'CPU,CPU:1')
    >>> one = DeviceSet(("CPU:0",))
    >>> one, one.devices, one == ("CPU",), one == "CPU", DeviceSet("CPU,") == one
    ('CPU,', ('CPU',), True, False, True)
    """

    devices: tuple[str, ...]
    made: ClassVar[bool] = False  # set once any DeviceSet exists (schedulers skip looking for one until then)

    def __new__(cls, names: str | tuple[str, ...] | list[str]) -> DeviceSet:
        items = names.split(",") if isinstance(names, str) else list(names)
        if isinstance(names, str) and len(items) == 2 and items[1] == "":
            items = items[:1]  # "CUDA,": the set of one device
        if not items or not all(isinstance(d, str) and d.strip() for d in items):
            raise ValueError(f"a device set needs one or more device names, got {names!r}")
        devs = tuple(_DeviceRegistry.canonicalize(d.strip()) for d in items)
        if len(set(devs)) != len(devs):
            raise ValueError(f"a device set names a device twice: {devs}")
        kinds = sorted({d.split(":")[0] for d in devs})
        if len(kinds) > 1:
            raise ValueError(
                f"devices of different kinds in one set: {devs} ({', '.join(kinds)}); a sharded tensor lives on "
                "devices of one kind (collectives run within one kind: NCCL on CUDA, the host between CPU devices)"
            )
        self = super().__new__(cls, ",".join(devs) + ("," if len(devs) == 1 else ""))
        self.devices = devs
        DeviceSet.made = True
        return self

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (tuple, list)):
            try:
                return self.devices == DeviceSet(other).devices
            except ValueError:
                return False
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = str.__hash__

    def __reduce__(self) -> tuple[type[DeviceSet], tuple[tuple[str, ...]]]:
        return (DeviceSet, (self.devices,))


class Buffer:
    """`size` elements of `dtype` on `device`, allocated on first use.

    >>> b = Buffer("PYTHON", 3, __import__("tg_uop").dtypes.int32).copyin(memoryview(bytes(12)))
    >>> bytes(b.as_bytes())
    b'\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00'
    """

    def __init__(self, device: str, size: int, dtype: DType) -> None:
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"Buffer: size must be a non-negative int, got {size!r}")
        self.device, self.size, self.dtype = Device.canonicalize(device), size, dtype
        self._opaque: Any = None
        self._allocator: Allocator | None = None  # the allocator that gave _opaque, once allocated here
        self._counted = 0  # bytes this buffer added to GlobalCounters.mem_used (0 for memory it was handed)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def allocator(self) -> Allocator:
        return Device[self.device].allocator

    def is_allocated(self) -> bool:
        return self._opaque is not None

    def ensure_allocated(self) -> Buffer:
        if self._opaque is None:
            nbytes = self.size * self.dtype.itemsize
            self._allocator = allocator = Device[self.device].allocator  # (frees it: no device lookup in __del__)
            self._opaque = allocator._alloc(nbytes or 1)  # (`alloc` without its checks: the size was checked)
            GlobalCounters.mem_used += nbytes
            self._counted = nbytes
            if TRACE.profiling:
                TRACE.memory(self.device, nbytes)
        return self

    @property
    def opaque(self) -> Any:
        return self.ensure_allocated()._opaque

    def copyin(self, data: memoryview) -> Buffer:
        data = memoryview(data).cast("B")
        if data.nbytes != self.nbytes:
            raise ValueError(
                f"copyin: got {data.nbytes} bytes for a buffer of {self.nbytes} bytes ({self.size} x {self.dtype})"
            )
        self.allocator.copyin(self.opaque, data)
        return self

    def as_bytes(self) -> memoryview:
        """A copy of the contents as host bytes."""
        out = memoryview(bytearray(self.nbytes))
        if self.nbytes:
            Device[self.device].synchronize()
            self.allocator.copyout(out, self.opaque)
        return out

    def __del__(self) -> None:
        if self._opaque is not None:
            try:
                (self._allocator or self.allocator)._free(self._opaque, self.size * self.dtype.itemsize)
                GlobalCounters.mem_used -= self._counted  # DISK windows were never added
                if TRACE.profiling and self._counted:
                    TRACE.memory(self.device, -self._counted)
            except Exception:  # interpreter shutdown
                pass

    def __repr__(self) -> str:
        return f"<buf {self.device} size={self.size} dtype={self.dtype}>"
