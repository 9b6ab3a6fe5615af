"""DISK tensors: views of a memory-mapped file moved to a compute device, and writes into the file.

DISK runs no kernels, so the usual ways (a copy kernel for a view, an assign kernel) do not apply:
- `t[2:5].to("CPU")`: a view that is one contiguous range of the file copies just that range; any
  other view copies the whole buffer and applies the view on the compute device.
- `t[0:4].assign(x)` (and `t[0:4] = x`): x is computed, then its bytes are written into that range
  of the file at once. The written range must be contiguous.

>>> import os, tempfile
>>> from tg_tensor import Tensor
>>> from tg_uop import dtypes
>>> path = os.path.join(tempfile.mkdtemp(), "t.bin")
>>> t = Tensor.empty(4, dtype=dtypes.int32, device=f"DISK:{path}")
>>> _ = t[1:3].assign(Tensor([7, 8], dtype=dtypes.int32))
>>> t[1:].to("CPU").tolist()
[7, 8, 0]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tg_runtime.ops_disk import DiskError, disk_window
from tg_shape import ShapeTracker
from tg_tensor.engine.inplace import rebuild_view, view_chain
from tg_tensor.engine.realizer import current
from tg_tensor.engine.schedule import buffer_of, movement_st
from tg_tensor.engine.util import is_contiguous_buffer
from tg_uop import Ops, UOp
from tg_uop.helpers import prod

if TYPE_CHECKING:
    from tg_tensor.tensor import Tensor


def is_disk(device: str) -> bool:
    return device.split(":", 1)[0] == "DISK"


def _window(u: UOp) -> tuple[UOp, list[tuple[Ops, Any]], int | None]:
    """(BUFFER, view ops top down, first element when the view is one contiguous range else None)."""
    chain = view_chain(u)
    if chain is None:
        raise DiskError(f"{u.device}: a DISK tensor must be a view of a DISK buffer (DISK runs no kernels)")
    base, ops = chain
    st = movement_st((base.arg[1],), tuple(reversed(ops))).simplify()
    if len(st.views) != 1 or st.views[0].mask is not None:
        return base, ops, None
    v = st.views[0]
    contiguous = ShapeTracker.from_shape(v.shape).views[0].strides
    same = all(a == b or s == 1 for a, b, s in zip(v.strides, contiguous, v.shape))
    return base, ops, (int(v.offset) if same else None)


def disk_to(t: Tensor, device: str) -> UOp:
    """The graph of `t` (a view of a DISK buffer) copied to `device`."""
    base, ops, start = _window(t.uop)
    if start is not None and ops:
        count = int(prod(t.shape))
        win = current().register(disk_window(buffer_of(base), start, count))
        return UOp(Ops.COPY, t.dtype, (win.reshape(t.shape), UOp(Ops.DEVICE, arg=device)))
    copied = UOp(Ops.COPY, t.dtype, (base, UOp(Ops.DEVICE, arg=device)))
    return rebuild_view(copied, ops)


def disk_assign(t: Tensor, value: Tensor) -> None:
    """Write `value` into the range of the file that `t` views (at once: DISK has no kernels to defer to)."""
    if value.shape != t.shape:
        raise ValueError(f"assign: value of shape {value.shape} does not match the DISK tensor's shape {t.shape}")
    base, _, start = _window(t.uop)
    if start is None:
        raise DiskError(f"{t.device}: only a contiguous range of a DISK tensor can be written, not this view")
    v = value.cast(t.dtype) if value.dtype != t.dtype else value
    if is_disk(v.device):  # a value sent to DISK (x.to("DISK:...")) is written from where it comes from
        v = type(t)(v.uop.src[0]) if v.uop.op is Ops.COPY else v.to("CPU")
    v = v.realize() if is_contiguous_buffer(v.uop) else v.contiguous().realize()
    raw = buffer_of(v.uop.base).as_bytes()
    disk_window(buffer_of(base), start, int(prod(t.shape))).copyin(memoryview(raw))
