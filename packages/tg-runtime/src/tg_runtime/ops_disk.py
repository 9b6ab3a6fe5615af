"""The DISK device: read-only memory maps of files, so a checkpoint loads without copying its bytes.

A DISK device is named after its file, `DISK:/path/to/file`. Its buffers are windows into the
file's memory map; reading one (`Buffer.as_bytes`, or a COPY to another device) reads the
pages it needs, and nothing else is touched. DISK runs no kernels: move data first (`.to("CPU")`).

>>> import tempfile, os
>>> from tg_uop import dtypes
>>> from tg_runtime.ops_disk import disk_buffers
>>> path = os.path.join(tempfile.mkdtemp(), "w.bin")
>>> _ = open(path, "wb").write(bytes(range(8)))
>>> [b] = disk_buffers(path, [(4, 2, dtypes.uint8)])
>>> bytes(b.as_bytes())
b'\\x04\\x05'
"""

from __future__ import annotations

import mmap
import os
from typing import Any

from tg_codegen.renderer import Renderer
from tg_runtime.device import Allocator, Buffer, Compiled, Compiler, Device, Program
from tg_uop import DType


class DiskError(ValueError):
    """A DISK buffer was asked for something a read-only file mapping cannot do."""


class DiskAllocator(Allocator):
    """Buffers are memoryviews into a read-only mapping; they cannot be allocated from nothing."""

    def __init__(self, device: str) -> None:
        self.device = device

    def _alloc(self, nbytes: int) -> Any:
        raise DiskError(
            f"{self.device}: DISK buffers are windows into an existing file, opened with tg_nn.state.safe_load "
            "(or tg_runtime.ops_disk.disk_buffers), not by allocating; DISK runs no kernels: .to('CPU') first"
        )

    def _free(self, opaque: Any, nbytes: int) -> None:
        if isinstance(opaque, memoryview):
            opaque.release()

    def _copyin(self, dest: Any, src: memoryview) -> None:
        raise DiskError(f"{self.device}: DISK buffers are read-only (memory-mapped with read access)")

    def _copyout(self, dest: memoryview, src: Any) -> None:
        dest[:] = src


class DiskCompiler(Compiler):
    """DISK has no processor: every kernel aimed at it is refused with a hint."""

    def __init__(self, device: str) -> None:
        self.device = device

    def compile(self, src: str) -> bytes:
        raise DiskError(f"{self.device} cannot run kernels; move the tensor to a compute device first: t.to('CPU')")


def _no_program(name: str, lib: bytes) -> Program:
    raise DiskError(f"DISK cannot load the program {name!r}")


def _path_of(device: str) -> str:
    base, _, path = device.partition(":")
    if base != "DISK" or not path:
        raise ValueError(f"a DISK device is named 'DISK:<path to a file>', got {device!r}")
    return path


def map_file(path: str | os.PathLike[str]) -> memoryview:
    """A read-only memoryview of the whole file (its length is the file's size at the time of the call)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return memoryview(b"")
        return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))


def disk_buffers(
    path: str | os.PathLike[str], windows: list[tuple[int, int, DType]], mapping: memoryview | None = None
) -> list[Buffer]:
    """Buffers on `DISK:<path>`, each `(byte offset, element count, dtype)` a window into one mapping.

    The windows must lie inside the file; nothing is read until a buffer's bytes are asked for.
    """
    view = map_file(path) if mapping is None else mapping
    device = Device.canonicalize(f"DISK:{os.fspath(path)}")
    ret = []
    for offset, count, dtype in windows:
        end = offset + count * dtype.itemsize
        if offset < 0 or count < 0 or end > view.nbytes:
            raise DiskError(
                f"{device}: window [{offset}, {end}) of {count} x {dtype} is outside the file of {view.nbytes} bytes"
            )
        buf = Buffer(device, count, dtype)
        buf._opaque = view[offset:end]  # the window is the buffer's memory: no copy, no allocation
        ret.append(buf)
    return ret


def open_device(name: str) -> Compiled:
    _path_of(name)
    return Compiled(name, DiskAllocator(name), Renderer(), DiskCompiler(name), _no_program)
