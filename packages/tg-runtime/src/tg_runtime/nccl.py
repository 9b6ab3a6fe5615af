"""NCCL collectives between CUDA devices of one host, driven by one process, through ctypes over libnccl.

libnccl comes from the `nvidia-nccl-cu12` (or `nvidia-nccl-cu13`) wheel or the system. One
communicator is made per set of devices (ncclCommInitAll) and kept; each collective is one group
call over every device of the set, on each device's default stream (where tg's kernels and copies
run, so they are ordered without extra synchronization).
NVLink multicast (NVLS) stays off: NCCL_NVLS_ENABLE=0 is set before the first communicator is made.

>>> from tg_runtime.nccl import NCCL_OPS
>>> sorted(NCCL_OPS)
['MAX', 'PROD', 'SUM']
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import sys
from typing import Any

from tg_runtime.device import Buffer, DeviceUnavailableError
from tg_uop import DType, dtypes

NCCL_OPS = {"SUM": 0, "PROD": 1, "MAX": 2}  # ncclRedOp_t
_NCCL_TYPES = {  # ncclDataType_t
    dtypes.int8: 0, dtypes.uint8: 1, dtypes.int32: 2, dtypes.uint32: 3, dtypes.int64: 4, dtypes.uint64: 5,
    dtypes.float16: 6, dtypes.float32: 7, dtypes.float64: 8, dtypes.bfloat16: 9, dtypes.bool: 1,
}  # fmt: skip


class NCCLError(RuntimeError):
    """libnccl is missing, or one of its calls failed (the message names the call)."""


class NCCLUnavailableError(NCCLError, DeviceUnavailableError):
    """libnccl is not installed: the message says how to install it."""


def _candidates() -> list[str]:
    found: list[str] = []
    for site in sys.path:
        found += sorted(glob.glob(os.path.join(site, "nvidia", "nccl", "lib", "libnccl.so*")))
    if (name := ctypes.util.find_library("nccl")) is not None:
        found.append(name)
    return found + ["libnccl.so.2"]


_lib: ctypes.CDLL | None = None


def load_nccl() -> ctypes.CDLL:
    """libnccl from the nvidia-nccl wheel or the system; an NCCLError naming the wheel when none loads."""
    global _lib
    if _lib is not None:
        return _lib
    os.environ["NCCL_NVLS_ENABLE"] = "0"  # NVLink multicast stays off (read by NCCL when a communicator is made)
    tried = []
    for path in _candidates():
        try:
            _lib = ctypes.CDLL(path)
            return _lib
        except OSError:
            tried.append(path)
    raise NCCLUnavailableError(
        "NCCL not found: collectives between CUDA devices need libnccl (looked in site-packages/nvidia/nccl/lib "
        f"and the system library path; tried {tried}). Install it with `pip install nvidia-nccl-cu12` "
        "(or nvidia-nccl-cu13 for CUDA 13). Collectives between CPU devices "
        "need no library."
    )


def _check(status: int, what: str) -> None:
    if status != 0:
        lib = load_nccl()
        lib.ncclGetErrorString.restype = ctypes.c_char_p
        msg = lib.ncclGetErrorString(status)
        raise NCCLError(f"{what} failed: {msg.decode() if msg else f'ncclResult {status}'}")


_comms: dict[tuple[int, ...], ctypes.Array[ctypes.c_void_p]] = {}


def communicator(ordinals: tuple[int, ...]) -> ctypes.Array[ctypes.c_void_p]:
    """The communicators (one per device, in order) of this set of CUDA device ordinals, made once."""
    if (comms := _comms.get(ordinals)) is None:
        lib = load_nccl()
        comms = (ctypes.c_void_p * len(ordinals))()
        devlist = (ctypes.c_int * len(ordinals))(*ordinals)
        _check(lib.ncclCommInitAll(comms, len(ordinals), devlist), f"ncclCommInitAll({list(ordinals)})")
        _comms[ordinals] = comms
    return comms


def _ptr(opaque: Any) -> ctypes.c_void_p:
    return ctypes.c_void_p(opaque.value if hasattr(opaque, "value") else int(opaque))


def nccl_type(dtype: DType) -> int:
    if dtype not in _NCCL_TYPES:
        raise NCCLError(f"NCCL has no data type for {dtype}")
    return _NCCL_TYPES[dtype]


def run_buffers(kind: str, op: str, outs: list[Buffer], ins: list[Buffer], streams: list[Any] | None = None) -> None:
    """`run` on Buffers of CUDA devices, one output and one input per device in set order (a broadcast reads the
    first input)."""
    ordinals = tuple(int(b.device.split(":")[1]) if ":" in b.device else 0 for b in outs)
    count = {"allgather": ins[0].size, "reducescatter": outs[0].size}.get(kind, outs[0].size)
    srcs = ins if kind != "broadcast" else [ins[0]] * len(outs)
    run(kind, op, ordinals, [b.opaque for b in outs], [b.opaque for b in srcs], count, outs[0].dtype, streams)


def run(
    kind: str,
    op: str,
    ordinals: tuple[int, ...],
    outs: list[Any],
    ins: list[Any],
    count: int,
    dtype: DType,
    streams: list[Any] | None = None,
) -> None:
    """One collective over every device of the set, as one NCCL group call.

    kind: allreduce (count elements each), allgather (count = each input's size), reducescatter (count = each
    output's size), broadcast (from the first device; count elements). outs/ins: device pointers, in set order.
    streams: a CUDA stream per device (default: each device's default stream), e.g. streams being captured into a
    CUDA graph.
    """
    lib, comms, dt = load_nccl(), communicator(ordinals), nccl_type(dtype)
    red = NCCL_OPS.get(op, 0)
    n = ctypes.c_size_t(count)
    _check(lib.ncclGroupStart(), "ncclGroupStart")
    try:
        for i, comm in enumerate(comms):
            src, dst = _ptr(ins[i]), _ptr(outs[i])
            stream = None if streams is None else streams[i]
            if kind == "allreduce":
                status = lib.ncclAllReduce(src, dst, n, dt, red, ctypes.c_void_p(comm), stream)
            elif kind == "allgather":
                status = lib.ncclAllGather(src, dst, n, dt, ctypes.c_void_p(comm), stream)
            elif kind == "reducescatter":
                status = lib.ncclReduceScatter(src, dst, n, dt, red, ctypes.c_void_p(comm), stream)
            elif kind == "broadcast":
                status = lib.ncclBroadcast(src, dst, n, dt, 0, ctypes.c_void_p(comm), stream)
            else:
                raise NCCLError(f"unknown collective {kind!r}")
            _check(status, f"nccl {kind} on device {ordinals[i]}")
    finally:
        try:
            _check(lib.ncclGroupEnd(), "ncclGroupEnd")
        finally:
            from tg_runtime.ops_cuda import Driver

            Driver.forget_current()  # NCCL switches devices: tg sets its context again before its next call
