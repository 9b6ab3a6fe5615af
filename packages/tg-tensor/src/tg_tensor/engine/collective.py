"""Run a collective schedule item: NCCL between CUDA devices, the host between any other devices.

An item's buffers are its outputs (one per device, in the device set's order) then its inputs.
Kinds: allreduce (SUM, MAX, PROD), allgather (outputs hold every input, device after device),
reducescatter (device i gets the i-th slice of the reduction), broadcast (every output gets the
first input).

>>> from tg_runtime.device import Buffer
>>> from tg_uop import dtypes
>>> a = Buffer("CPU", 2, dtypes.float32).copyin(memoryview(bytes(__import__("array").array("f", [1, 5]))))
>>> b = Buffer("PYTHON", 2, dtypes.float32).copyin(memoryview(bytes(__import__("array").array("f", [3, 2]))))
>>> outs = [Buffer("CPU", 2, dtypes.float32), Buffer("PYTHON", 2, dtypes.float32)]
>>> run_collective("allreduce", "MAX", outs, [a, b])
>>> list(__import__("array").array("f", bytes(outs[1].as_bytes())))
[3.0, 5.0]
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from tg_runtime.device import Buffer
from tg_tensor.engine.util import np_dtype
from tg_uop import dtypes
from tg_uop.helpers import DEBUG

if TYPE_CHECKING:
    import numpy as np


KINDS = ("allreduce", "allgather", "reducescatter", "broadcast")
_REDUCE = {"SUM": "add", "MAX": "maximum", "PROD": "multiply"}  # numpy ufuncs by name (numpy loads on use)


def run_collective(kind: str, op: str, outs: list[Buffer], ins: list[Buffer]) -> None:
    """Run one collective over the devices of `outs` (NCCL when they are all CUDA devices)."""
    if kind not in KINDS:
        raise ValueError(f"collective: unknown kind {kind!r}; expected one of {KINDS}")
    if kind in ("allreduce", "reducescatter") and op not in _REDUCE:
        raise ValueError(f"collective {kind}: unknown reduction {op!r}; expected one of {sorted(_REDUCE)}")
    st = time.perf_counter()
    if all(b.device.split(":")[0] == "CUDA" for b in outs + ins):
        _run_nccl(kind, op, outs, ins)
    else:
        _run_host(kind, op, outs, ins)
    if DEBUG >= 2:
        nbytes = sum(b.nbytes for b in ins)
        print(f"*** {kind} {op} over {len(outs)} devices, {nbytes} bytes in, {(time.perf_counter() - st) * 1e3:.3f} ms")


def _as_numpy(b: Buffer) -> np.ndarray[Any, Any]:
    import numpy as np

    dt = np.uint16 if b.dtype == dtypes.bfloat16 else np_dtype(b.dtype)
    return np.frombuffer(b.as_bytes(), dtype=dt)


def _reduce(op: str, arrays: list[np.ndarray[Any, Any]], bf16: bool) -> np.ndarray[Any, Any]:
    import numpy as np

    if bf16:  # reduce in float32, round back to bfloat16 (to nearest even)
        f = [(a.astype(np.uint32) << 16).view(np.float32) for a in arrays]
        r = _reduce(op, f, False)
        bits = r.view(np.uint32)
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    out = arrays[0].copy()
    for a in arrays[1:]:
        out = getattr(np, _REDUCE[op])(out, a)
    return out


def _run_host(kind: str, op: str, outs: list[Buffer], ins: list[Buffer]) -> None:
    import numpy as np

    arrays = [_as_numpy(b) for b in ins]
    bf16 = ins[0].dtype == dtypes.bfloat16
    if kind == "allreduce":
        results = [_reduce(op, arrays, bf16)] * len(outs)
    elif kind == "allgather":
        results = [np.concatenate(arrays)] * len(outs)
    elif kind == "reducescatter":
        results = list(np.split(_reduce(op, arrays, bf16), len(outs)))
    else:
        results = [arrays[0]] * len(outs)
    for b, r in zip(outs, results):
        b.copyin(memoryview(np.ascontiguousarray(r).tobytes()))


def _run_nccl(kind: str, op: str, outs: list[Buffer], ins: list[Buffer]) -> None:
    from tg_runtime import nccl

    nccl.run_buffers(kind, op, outs, ins)
