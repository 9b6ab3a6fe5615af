"""The DISK device: memory maps of files, so a checkpoint loads without copying its bytes.

A DISK device is named after its file, `DISK:/path/to/file`. Its buffers are windows into the
file's memory map; reading one (`Buffer.as_bytes`, or a COPY to another device) reads the
pages it needs, and nothing else is touched. DISK runs no kernels: move data first (`.to("CPU")`).
Windows opened by `disk_buffers` (safe_load) are read-only; a buffer allocated on DISK
(`Tensor.empty(..., device="DISK:path")`) maps the file's first bytes read-write, creating or
growing the file to the buffer's size, and can be written (`copyin`, `Tensor.assign`).

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
    """Buffers are memoryviews into a mapping of the file: read-only windows, or the file's start read-write."""

    def __init__(self, device: str) -> None:
        self.device = device

    def _alloc(self, nbytes: int) -> Any:
        path = _path_of(self.device)
        if nbytes == 0:
            return memoryview(bytearray(0))
        with open(path, "r+b" if os.path.exists(path) else "w+b") as f:
            if os.fstat(f.fileno()).st_size < nbytes:
                f.truncate(nbytes)
            return memoryview(mmap.mmap(f.fileno(), nbytes, access=mmap.ACCESS_WRITE))

    def _free(self, opaque: Any, nbytes: int) -> None:
        if isinstance(opaque, memoryview):
            opaque.release()

    def _copyin(self, dest: Any, src: memoryview) -> None:
        if dest.readonly:
            raise DiskError(
                f"{self.device}: this DISK buffer is a read-only window (opened by safe_load); "
                f"a tensor made with Tensor.empty(..., device={self.device!r}) can be written"
            )
        dest[:] = src

    def _copyout(self, dest: memoryview, src: Any) -> None:
        dest[:] = src


class DiskCompiler(Compiler):
    """DISK has no processor: every kernel aimed at it is refused with a hint."""

    def __init__(self, device: str) -> None:
        self.device = device

    def compile(self, src: str) -> bytes:
        raise DiskError(f"{self.device} cannot run kernels; move the tensor to a compute device first: t.to('CPU')")


class DiskRenderer(Renderer):
    """DISK renders no programs: a computation on DISK tensors is refused with what to do instead."""

    device = "DISK"

    def render(self, name: str, uops: list[Any]) -> str:
        raise DiskError(
            "DISK runs no kernels: compute on a device, e.g. t.to('CPU') + 1 instead of t + 1 for a DISK tensor t "
            "(copies, slices and assigns of DISK tensors need no kernel)"
        )


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


def disk_window(buf: Buffer, offset: int, count: int) -> Buffer:
    """A Buffer of `count` elements starting at element `offset` of the DISK buffer `buf` (the same memory)."""
    size = buf.dtype.itemsize
    if offset < 0 or count < 0 or offset + count > buf.size:
        raise DiskError(f"{buf.device}: window [{offset}, {offset + count}) is outside the buffer of {buf.size}")
    ret = Buffer(buf.device, count, buf.dtype)
    ret._opaque = buf.opaque[offset * size : (offset + count) * size]
    return ret


def open_device(name: str) -> Compiled:
    _path_of(name)
    return Compiled(name, DiskAllocator(name), DiskRenderer(), DiskCompiler(name), _no_program)
