"""Tensor: a lazy, torch-like array built on UOps. Nothing runs until realize/numpy/item/tolist.

The methods live in mixins grouped by kind (creation, elementwise, activation, reduce, movement,
indexing, linalg, nn); this module holds the core: construction, realization, assignment, autograd.

>>> from tg_tensor import Tensor
>>> (Tensor([1, 2, 3]) + 4).tolist()
[5, 6, 7]
>>> Tensor([[1.0, 2.0], [3.0, 4.0]]).sum(axis=1).numpy().tolist()
[3.0, 7.0]
"""

from __future__ import annotations

import contextlib
import itertools
import sys
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, cast

from tg_runtime.device import Device, DeviceSet
from tg_shape import View
from tg_tensor import gradient as autograd
from tg_tensor.activation import ActivationMixin
from tg_tensor.creation import CreationMixin
from tg_tensor.custom import CustomKernelMixin
from tg_tensor.decomp import DecompMixin
from tg_tensor.disk import disk_assign, disk_to, is_disk
from tg_tensor.elementwise import ElementwiseMixin
from tg_tensor.engine import multi
from tg_tensor.engine.inplace import protect_old_values, rebuild_view, view_chain
from tg_tensor.engine.ordering import order_items
from tg_tensor.engine.provenance import note_origin
from tg_tensor.engine.realizer import Realizer, ScheduleItem, Stages, current
from tg_tensor.engine.schedule import buffer_of, check_not_stale, create_schedule, movement_st, replay_one, write_view
from tg_tensor.engine.symbolic import concrete_shape
from tg_tensor.engine.util import (
    DTypeError,
    ShapeError,
    const_uop,
    is_contiguous_buffer,
    np_dtype,
    shape_of_list,
    to_dtype,
)
from tg_tensor.indexing import IndexingMixin
from tg_tensor.linalg import LinalgMixin
from tg_tensor.mathops import MathOpsMixin
from tg_tensor.movement import MovementMixin
from tg_tensor.nn import NNMixin
from tg_tensor.reduce import ReduceMixin
from tg_tensor.selection import SelectionMixin
from tg_tensor.shaping import ShapingMixin
from tg_tensor.sorting import SortingMixin
from tg_tensor.visibility import on_schedule
from tg_uop import ConstType, DType, GroupOp, Ops, UOp, dtypes
from tg_uop.helpers import DEBUG, TRAINING, all_int, prod
from tg_uop.trace import TRACE
from tg_uop.uop import sint

sys.setrecursionlimit(max(sys.getrecursionlimit(), 20_000))

if TYPE_CHECKING:
    import numpy as np

TensorLike = Any  # Tensor | ConstType | nested lists | numpy arrays | bytes

_unique_ids = itertools.count()  # (ids only: a source of fresh node args, never read back)


def _from_numpy(arr: np.ndarray[Any, Any], dtype: DType | None, device: str) -> UOp:
    import numpy as np  # numpy is imported when first used (not by `import tg`)

    if dtype is None:
        dtype = dtypes.from_np(arr.dtype)
    if dtype == dtypes.bfloat16:
        f32 = np.ascontiguousarray(arr, dtype=np.float32)
        raw = (f32.view(np.uint32) + 0x7FFF + ((f32.view(np.uint32) >> 16) & 1)) >> 16
        data = raw.astype(np.uint16).tobytes()
    else:
        data = np.ascontiguousarray(arr, dtype=np_dtype(dtype)).tobytes()
    buf = UOp.new_buffer(device, int(arr.size), dtype)
    if arr.size:
        buffer_of(buf).copyin(memoryview(data))
    return buf.reshape(tuple(int(s) for s in arr.shape))


def _from_list(data: list[Any] | tuple[Any, ...], dtype: DType | None, device: str) -> UOp:
    shape = shape_of_list(data)
    dt = dtype or (dtypes.from_py(data) if prod(shape) else dtypes.default_float)
    import numpy as np

    return _from_numpy(np.array(data, dtype=np_dtype(dt)).reshape(shape), dt, device)


def _strided_window(u: UOp) -> tuple[UOp, View] | None:
    """(BUFFER, window) when `u` reads a realized buffer through one unpadded window with integer strides (a
    reshape, permute, shrink, flip, an expand of a 0-d result): its values are read without a kernel."""
    if (chain := view_chain(u)) is None:
        return None
    base, ops = chain
    if base.shape is None or is_disk(str(base.device)):  # (DISK: never read a whole file for a window)
        return None
    st = movement_st(base.shape, tuple(reversed(ops))).simplify()
    view = st.views[-1]
    if len(st.views) != 1 or view.mask is not None or not all_int((*view.strides, view.offset)):
        return None
    return base, view


class _TensorType(type):
    """Tensor's metaclass: `Tensor.training` is the TRAINING setting, so `Context(TRAINING=1)` (tinygrad 0.14's way)
    and `Tensor.training = True` / `with Tensor.train():` (the older way) are one switch."""

    @property
    def training(cls) -> bool:
        return bool(TRAINING.value)

    @training.setter
    def training(cls, value: bool) -> None:
        TRAINING.value = int(bool(value))


class Tensor(
    CreationMixin,
    MovementMixin,
    IndexingMixin,
    ElementwiseMixin,
    ActivationMixin,
    ReduceMixin,
    LinalgMixin,
    NNMixin,
    MathOpsMixin,
    ShapingMixin,
    SortingMixin,
    SelectionMixin,
    DecompMixin,
    CustomKernelMixin,
    metaclass=_TensorType,
):
    """A lazy multi-dimensional array. Operations build a UOp graph; `realize()` runs it.

    >>> x = Tensor([2.0], requires_grad=True)
    >>> (x * x * x).sum().backward().grad is None
    True
    >>> x.grad.item()
    12.0
    """

    no_grad: ClassVar[bool] = False

    __slots__ = ("_uop", "_live", "_requires_grad", "grad", "_lazy", "__weakref__")

    def __init__(
        self,
        data: TensorLike,
        device: str | tuple[str, ...] | None = None,
        dtype: DType | str | None = None,
        requires_grad: bool | None = None,
    ) -> None:
        self._requires_grad: bool | None = None
        self.grad: Tensor | None = None
        self._lazy: UOp | None = None  # the graph this tensor had before it was realized (for autograd)
        if type(data) is UOp and device is None and dtype is None and data.device is not None:
            uop = self._uop = Tensor._detached(data) if Tensor.no_grad else data  # (an op's result: the usual case)
        else:
            dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
            uop = self._uop = self._make_uop(data, to_dtype(dtype) if dtype is not None else None, dev)
            if uop.device is None:
                raise ValueError("Tensor: the data has no device")
        live = current().live_tensors
        self._live = (live, live.add(self, uop))  # (filed under its node: see `uop`'s setter)
        if TRACE.active or DEBUG.value >= 2:  # (VIZ, DEBUG=2 lines) which operation and user line made this node
            note_origin(uop)
        if requires_grad is not None:
            self.requires_grad = requires_grad

    @staticmethod
    def _make_uop(data: TensorLike, dtype: DType | None, dev: str) -> UOp:
        if isinstance(data, UOp) and data.device is None and isinstance(dev, DeviceSet):  # made on every device
            return multi.replicate(Tensor._make_uop(data, dtype, dev.devices[0]), dev)
        if isinstance(data, UOp) and data.device is None:
            u = _symbolic_value(data, dev)  # a bound Variable or an expression of them: its value at the binding
            return u if dtype is None or u.dtype == dtype else u.cast(dtype)
        if isinstance(data, UOp):
            u = data if dtype is None or data.dtype == dtype else data.cast(dtype)
            return Tensor._detached(u) if Tensor.no_grad else u
        if isinstance(data, Tensor):
            return data.uop if dtype is None else data.uop.cast(dtype)
        if isinstance(data, (bool, int, float)):
            return const_uop(data, dtype or dtypes.from_py(data), dev)
        if isinstance(dev, DeviceSet):  # made on the first device, copied to the others
            return multi.replicate(Tensor._make_uop(data, dtype, dev.devices[0]), dev)
        if isinstance(data, (list, tuple)):
            return _from_list(data, dtype, dev)
        npm: Any = sys.modules.get("numpy")  # an ndarray exists only once numpy was imported
        if npm is not None and isinstance(data, (npm.ndarray, npm.generic)):  # (a numpy scalar: as a 0-d array)
            return _from_numpy(npm.asarray(data), dtype, dev)
        if isinstance(data, (bytes, bytearray, memoryview)):
            import numpy as np

            return _from_numpy(np.frombuffer(bytes(data), dtype=np.uint8), dtype or dtypes.uint8, dev)
        raise TypeError(f"Tensor: cannot build a tensor from {type(data).__name__}")

    @staticmethod
    def _detached(u: UOp) -> UOp:
        """`u` cut off from autograd (under no_grad): a DETACH over it, unless it is a buffer, a view of one, a
        constant or detached already."""
        if u.op in (Ops.BUFFER, Ops.CONST, Ops.DETACH) or u.base.op is Ops.BUFFER:
            return u
        return UOp(Ops.DETACH, u.dtype, (u,))

    # ---- properties ----
    @property
    def uop(self) -> UOp:
        """The node this tensor stands for: a lazy graph, or a view of its realized buffer."""
        return self._uop

    @uop.setter
    def uop(self, node: UOp) -> None:
        self._uop = node
        owner, ref = self._live
        owner.moved(ref, node)  # the live-tensor index follows the tensor

    def __getstate__(self) -> dict[str, Any]:
        # (pickle and copy.copy: the live-index entry is this object's own, never copied)
        return {"uop": self._uop, "_requires_grad": self._requires_grad, "grad": self.grad, "_lazy": self._lazy}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._requires_grad, self.grad, self._lazy = state["_requires_grad"], state["grad"], state["_lazy"]
        self._uop = state["uop"]
        live = current().live_tensors
        self._live = (live, live.add(self, self._uop))

    @property
    def requires_grad(self) -> bool | None:
        """True: backward() fills `.grad`. None (the default): only if an optimizer asks. False: never."""
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool | None) -> None:
        if value and not dtypes.is_float(self.dtype):  # as PyTorch: gradients of integers are not defined
            raise DTypeError(f"only floating point tensors can require gradients, got dtype {self.dtype}")
        self._requires_grad = value
        if value:
            if self.uop.base.op is not Ops.BUFFER:
                # hash-consing makes equal lazy tensors (two Tensor.zeros(3)) one node: give this one its own
                self.uop = UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,), next(_unique_ids))
            current().grad_tensors.add(self)
        else:
            current().grad_tensors.discard(self)

    @property
    def shape(self) -> tuple[sint, ...]:
        """The size of each axis.

        >>> from tg_tensor import Tensor
        >>> Tensor([[1, 2, 3]]).shape
        (1, 3)
        """
        shape = self.uop.shape
        assert shape is not None
        return shape

    @property
    def dtype(self) -> DType:
        """The element type.

        >>> from tg_tensor import Tensor
        >>> Tensor([1.0]).dtype
        dtypes.float
        """
        return self.uop.dtype

    @property
    def device(self) -> str:
        """The device the data lives on (`Device.DEFAULT` unless given)."""
        d = self.uop.device
        assert d is not None
        return d

    @property
    def ndim(self) -> int:
        """The number of axes.

        >>> from tg_tensor import Tensor
        >>> Tensor([[1, 2]]).ndim
        2
        """
        return len(self.shape)

    def numel(self) -> sint:
        """The number of elements.

        >>> from tg_tensor import Tensor
        >>> Tensor([[1, 2, 3]]).numel()
        3
        """
        return prod(self.shape)

    def size(self, dim: int | None = None) -> sint | tuple[sint, ...]:
        """The shape, or the size of one dim (torch's spelling)."""
        return self.shape if dim is None else self.shape[self._axis(dim)]

    def is_floating_point(self) -> bool:
        """Whether the dtype is a float type.

        >>> from tg_tensor import Tensor
        >>> Tensor([1.0]).is_floating_point(), Tensor([1]).is_floating_point()
        (True, False)
        """
        return dtypes.is_float(self.dtype)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Set requires_grad in place and return the tensor."""
        self.requires_grad = requires_grad
        return self

    def element_size(self) -> int:
        """Bytes per element.

        >>> from tg_tensor import Tensor
        >>> Tensor([1.0]).element_size()
        4
        """
        return self.dtype.itemsize

    def nbytes(self) -> int:
        """Bytes of all elements.

        >>> from tg_tensor import Tensor
        >>> Tensor([1.0, 2.0]).nbytes()
        8
        """
        return int(self.numel()) * self.element_size()

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return int(self.shape[0])

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self) -> bool:
        raise TypeError("the truth value of a Tensor is ambiguous: use .item(), .any() or .all()")

    def __repr__(self) -> str:
        return f"<Tensor {self.uop.op.name} shape={self.shape} dtype={self.dtype} device={self.device}>"

    # ---- realization ----
    def schedule(self, *others: Tensor) -> list[ScheduleItem]:
        """The kernels that realizing these tensors would run; the tensors now refer to their outputs.

        A tensor that is only a reshape of a lazy node realizes that node (so `x.mean()` and the
        mean inside `x.std()` share one kernel).
        """
        return current().schedule([self, *others])

    def realize(self, *others: Tensor, do_update_stats: bool = True) -> Tensor:
        """Run every kernel needed to compute this tensor (and `others`).

        do_update_stats is tinygrad's switch for its global counters; tg always counts (accepted, no effect).
        """
        current().realize([self, *others])
        return self

    def kernelize(self, *others: Tensor) -> Tensor:
        """Group the graph into kernels without running them (they run at the next realize)."""
        self.schedule(*others)
        return self

    @property
    def is_realized(self) -> bool:
        """Do the values sit in a device buffer of their own, row-major, with nothing left to compute? True after
        `realize()` of a computed tensor and for tensors made from data; False for a lazy graph, a view of another
        tensor's buffer (`t[1:]`, `t.T`) and a tensor on several devices.

        >>> from tg_tensor import Tensor
        >>> t = Tensor([1, 2]) + 1
        >>> t.is_realized, t.realize().is_realized, t[1:].is_realized
        (False, True, False)
        """
        return is_contiguous_buffer(self.uop)

    @property
    def shard_axis(self) -> int | None:
        """The axis this tensor is split along over its devices (`shard(devices, axis)`); None on one device and for
        a full copy on each.

        >>> from tg_tensor import Tensor
        >>> Tensor.ones(2, 4).shard(("CPU:0", "CPU:1"), axis=1).shard_axis, Tensor.ones(2).shard_axis
        (1, None)
        """
        s = multi.split_of(self.uop)
        return None if s is None else s.axis

    def copyin(self, data: bytes | bytearray | memoryview) -> Tensor:
        """Overwrite the values of this realized tensor with raw bytes (of its dtype, row-major), now: the way to
        refill the input of a TinyJit or a decode step without building a graph. Returns the tensor.

        >>> from tg_tensor import Tensor
        >>> from tg_uop import dtypes
        >>> t = Tensor([0, 0], dtype=dtypes.uint8)
        >>> t.copyin(bytes([7, 9])).tolist()
        [7, 9]
        """
        if not self.is_realized:
            raise ValueError(f"copyin: {self!r} is not a realized buffer (see is_realized): realize it first")
        buffer_of(self.uop.base).copyin(memoryview(data))
        return self

    def tobytes(self) -> bytes:
        """The values as raw bytes of the tensor's dtype, row-major (realizes it; as numpy's `tobytes`, with
        bfloat16 kept as its 2 bytes).

        >>> from tg_tensor import Tensor
        >>> from tg_uop import dtypes
        >>> Tensor([1, 2], dtype=dtypes.uint8).tobytes()
        b'\\x01\\x02'
        """
        from tg_tensor.jit import check_host_read, realized_buffer  # (jit imports this module)

        check_host_read("tobytes()")
        return bytes(realized_buffer(Tensor(self.uop)).as_bytes())

    def contiguous(self, **kwargs: Any) -> Tensor:
        """A tensor whose data is laid out contiguously (a copy kernel unless it already is).

        tinygrad forwards **kwargs to its UOp; tg's CONTIGUOUS node takes no options, so any given raises.
        """
        if kwargs:
            raise TypeError(f"contiguous: unexpected options {sorted(kwargs)} (tg's contiguous takes none)")
        return Tensor(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)))

    def detach(self) -> Tensor:
        """The same values, cut off from autograd."""
        return Tensor(UOp(Ops.DETACH, self.dtype, (self.uop,)))

    def _data(self) -> np.ndarray[Any, Any]:
        from tg_tensor.jit import check_host_read  # (jit imports this module)

        check_host_read("reading values (.numpy()/.item()/.tolist())")
        import numpy as np

        if multi.is_multi(self.uop):  # each device's shard, joined on the host
            self.realize()
            parts, axis = [Tensor(s).numpy() for s in self.uop.src[:-1]], self.uop.arg
            return parts[0] if axis is None else np.concatenate(parts, axis=axis)

        self.realize()  # a lazy tensor gets its own buffer; a view of a buffer stays a view
        shape = concrete_shape(self.shape)
        window = (self.uop.base, View.create(shape)) if is_contiguous_buffer(self.uop) else _strided_window(self.uop)
        # a view that a kernel must gather (padding, several views, DISK), or a symbolic shape (a kernel writes the
        # bound part, row-major, at the start of a buffer of the largest size)
        if window is None or not all_int(self.shape) and not is_contiguous_buffer(self.uop):
            window = (self.contiguous().realize().uop.base, View.create(shape))
        base, view = window
        check_not_stale(base)  # a failed realize never wrote it
        raw = buffer_of(base).as_bytes()
        if self.dtype == dtypes.bfloat16:
            arr = (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype=np_dtype(self.dtype))
        if view.contiguous and view.offset == 0 and arr.size == prod(shape):
            return arr.reshape(shape)
        step = arr.itemsize
        strides = tuple(int(s) * step for s in view.strides)
        return np.ndarray(shape, arr.dtype, arr, int(view.offset) * step, strides)

    def numpy(self) -> np.ndarray[Any, Any]:
        """The values as a new numpy array (realizes the tensor; a symbolic shape at its bound values)."""
        shape = concrete_shape(self.shape)
        if 0 in shape:
            import numpy as np

            return np.zeros(shape, dtype=np_dtype(self.dtype))
        return self._data().copy()

    def data(self) -> memoryview:
        """The values as a memoryview (realizes the tensor)."""
        return memoryview(self.numpy().tobytes()).cast("B")

    def tolist(self) -> Any:
        """The values as (nested) Python lists (realizes the tensor).

        >>> from tg_tensor import Tensor
        >>> Tensor([[1, 2]]).tolist()
        [[1, 2]]
        """
        return self.numpy().tolist()

    def item(self) -> ConstType:
        """The value of a one-element tensor as a Python number (realizes it).

        >>> from tg_tensor import Tensor
        >>> Tensor([[3]]).item()
        3
        """
        if self.numel() != 1:
            raise ValueError(f"item: the tensor has {self.numel()} elements (shape {self.shape}); item needs exactly 1")
        return self._data().reshape(()).item()  # type: ignore[no-any-return]  # (no copy of the array first)

    def to(self, device: str | tuple[str, ...]) -> Tensor:
        """This tensor on another device (a lazy copy); a tensor on several devices is gathered, and a tuple of
        devices gives a full copy on each (as `shard(devices)`)."""
        dev = Device.canonicalize(device)
        if dev == self.device:
            return self
        for d in dev.devices if isinstance(dev, DeviceSet) else (dev,):
            Device[d]  # raises for unknown devices
        if is_disk(self.device) and not is_contiguous_buffer(self.uop) and view_chain(self.uop) is not None:
            # DISK has no copy kernels for views (a computation on DISK fails at realize, saying so)
            ret = Tensor(disk_to(self, dev))
        else:
            ret = Tensor(UOp(Ops.COPY, self.dtype, (self.uop, UOp(Ops.DEVICE, arg=dev))))
        ret.requires_grad = self.requires_grad
        return ret

    def shard(self, devices: tuple[str, ...] | list[str], axis: int | None = None) -> Tensor:
        """This tensor split over `devices` along `axis` (None: a full copy on each device).

        The axis must split evenly (as in tinygrad; RuntimeError otherwise). Ops on the result run on every
        device; a reduction over the sharded axis all-reduces; `.to(device)` gathers it on one device.

        >>> from tg_tensor import Tensor
        >>> t = Tensor([1.0, 2.0, 3.0, 4.0]).shard(("CPU:0", "CPU:1"), axis=0)
        >>> t.device, (t + 1).sum().item()
        ('CPU,CPU:1', 14.0)
        """
        ret = Tensor(multi.shard_uop(self.uop, devices, axis))
        ret.requires_grad = self.requires_grad
        return ret

    def shard_like(self, y: Tensor) -> Tensor:
        """This tensor on y's devices, split as y is (on y's device when y lives on one)."""
        if (split := multi.split_of(y.uop)) is None:
            return self.to(y.device)
        return self.shard(split.devices.devices, split.axis)

    def shard_(self, devices: tuple[str, ...] | list[str], axis: int | None = None) -> Tensor:
        """Shard this tensor in place (see `shard`); returns it."""
        self.uop = multi.shard_uop(self.uop, devices, axis)
        return self

    def clone(self, device: str | None = None) -> Tensor:
        """A copy with its own buffer once realized (on `device` when given), with a clone of `.grad`."""
        ret = self.contiguous() if device is None else self.to(device).contiguous()
        if self.grad is not None:
            ret.grad = self.grad.clone(device)
        return ret

    # ---- in-place update ----
    def assign(self, x: TensorLike) -> Tensor:
        """Overwrite this tensor's values with `value`, lazily, in place (its buffer is reused once realized).

        A view of a buffer (`w[1:3]`, `w.T`) writes into that buffer. Lazy tensors built from the old
        values keep them (inplace.py); views of the buffer see the write.

        >>> from tg_tensor import Tensor
        >>> w = Tensor([1.0, 2.0, 3.0]).realize()
        >>> old = w * 1
        >>> w[1:].assign(w[1:] * 10).realize().tolist(), w.tolist(), old.tolist()
        ([20.0, 30.0], [1.0, 20.0, 30.0], [1.0, 2.0, 3.0])
        """
        if is_disk(self.device):  # written into the file at once (disk.py)
            disk_assign(self, x if isinstance(x, Tensor) else Tensor(x, dtype=self.dtype))
            return self
        value = x if isinstance(x, Tensor) else Tensor(x, device=self.device, dtype=self.dtype)
        if value.shape != self.shape:
            raise ShapeError(f"assign: value of shape {value.shape} does not match the tensor's shape {self.shape}")
        if value.dtype != self.dtype:
            raise DTypeError(f"assign: value of dtype {value.dtype} does not match the tensor's dtype {self.dtype}")
        if value.device != self.device:
            raise ValueError(f"assign: value is on {value.device}, the tensor on {self.device}")
        rz = current()
        if rz.unshare(self):  # it stood for another tensor's result (share_results): replace it
            self.uop = value.uop
            return self
        if multi.is_multi(self.uop):
            return self._assign_shards(value)
        follows = (self.uop,) if self.uop.op is Ops.ASSIGN else ()  # an assign not run yet: this one comes after
        if not follows and (earlier := _assign_below(self.uop)) is not None:
            # a view of an assign's result (`c.assign(x); c[1:2].assign(y)`): that assign is scheduled first, so this
            # write goes to the memory it wrote (and runs after it)
            type(self)(earlier).kernelize()
        # (not through realized lazy nodes: equal lazy graphs are one node, so that memory may be another tensor's;
        # a realized assign's result is its own memory, so those count)
        chain = view_chain(self.uop.src[0] if follows else self.uop, resolve=False, through_assigns=True)
        if chain is None:
            self.uop = value.uop  # a lazy tensor has no buffer to write
            return self
        target, ops = chain
        through_view = any(op is not Ops.RESHAPE for op, _ in ops)
        if _reads_shifted(value.uop, target) or (through_view and _reads_memory(value.uop, target)):
            value = value.contiguous()
        view = rebuild_view(rz.new_version(target), ops)  # (a new version of target's memory)
        write_view(view)  # raises for views that cannot be written
        self.uop = UOp(Ops.ASSIGN, self.dtype, (view, value.uop, *follows))
        if through_view:
            # a write through a view is queued now, as it would run eagerly: the memory's other holders (the tensor
            # it is a view of, other views) see it even when this view tensor is dropped before a realize, and graphs
            # built after it read the new values; it runs at the next realize
            self.kernelize()
        return self

    # ---- autograd ----
    def _assign_shards(self, value: Tensor) -> Tensor:
        """In-place update of a multi-device tensor: each device assigns its shard (the value resharded to match)."""
        memo, users = multi.assign_lowering([self.uop, value.uop])
        target, val = multi.lower(self.uop, memo, users), multi.lower(value.uop, memo, users)
        if not isinstance(target, multi.Shards) or not isinstance(val, multi.Shards) or target.devices != val.devices:
            raise ValueError(f"assign: value is on {value.device}, the tensor on {self.device}")
        val = multi.to_axis(val, target.axis)
        outs = [Tensor(tu).assign(Tensor(vu)).uop for tu, vu in zip(target.uops, val.uops)]
        self.uop = multi.multi_node(outs, target.axis, target.devices)
        return self

    def gradient(self, *targets: Tensor, gradient: Tensor | None = None) -> list[Tensor]:
        """d(self)/d(target) for each target; `self` must be a scalar unless `gradient` is given.

        >>> from tg_tensor import Tensor
        >>> x = Tensor([2.0], requires_grad=True)
        >>> (x**2 + 3*x + 1).sum().gradient(x)[0].tolist()
        [7.0]
        """
        if Tensor.no_grad:
            raise RuntimeError("gradient: gradients are disabled (Tensor.no_grad is set)")
        if bad := [t for t in (self, *targets) if not dtypes.is_float(t.dtype)]:
            raise RuntimeError(f"gradient: only float tensors have gradients, got {bad[0]!r}")
        # a target the result does not depend on has a zero gradient of its own shape, as in tinygrad
        return [g if g is not None else t.zeros_like() for t, g in zip(targets, self._gradients(gradient, targets))]

    def backward(self, gradient: Tensor | None = None) -> Tensor:
        """Accumulate d(self)/dt into `t.grad` for every tensor t in the graph with requires_grad=True."""
        if Tensor.no_grad:
            raise RuntimeError("backward: gradients are disabled (Tensor.no_grad is set)")
        asking = cast("list[Tensor]", list(current().grad_tensors))  # (the engine files them as realizer.Holder)
        targets = [t for t in asking if dtypes.is_float(t.dtype)]
        for t, g in zip(targets, self._gradients(gradient, targets)):
            if g is not None:
                t.grad = g if t.grad is None else t.grad + g
        return self

    def _gradients(self, gradient: Tensor | None, targets: list[Tensor] | tuple[Tensor, ...]) -> list[Tensor | None]:
        """d(self)/dt for each target t: None where t is not in self's graph, zeros where it is only through
        comparisons, casts to int, an empty reduction..."""
        seed, graph = self._seed_gradient(gradient), self._graph()
        nodes = [t._node_in(graph.toposort) for t in targets]
        grads = autograd.compute_gradient(graph, seed.uop, [n for n in nodes if n is not None])
        return [
            None if n is None else Tensor(grads[n]) if n in grads else t.zeros_like() for t, n in zip(targets, nodes)
        ]

    def _graph(self) -> UOp:
        """The lazy graph behind this tensor, even after it was realized."""
        return self._lazy if self._lazy is not None and is_contiguous_buffer(self.uop) else self.uop

    def _node_in(self, graph: Mapping[UOp, None]) -> UOp | None:
        """The node that stands for this tensor in `graph` (its current or its pre-realize graph)."""
        if self.uop in graph:
            return self.uop
        return self._lazy if self._lazy is not None and self._lazy in graph else None

    def _seed_gradient(self, gradient: Tensor | None) -> Tensor:
        if gradient is None:
            if self.numel() != 1:
                raise ValueError(
                    f"backward/gradient of a non-scalar tensor (shape {self.shape}) needs an explicit gradient"
                )
            return Tensor.full(self.shape, 1.0, dtype=self.dtype, device=self.device)
        if gradient.shape != self.shape:
            raise ValueError(f"gradient: seed shape {gradient.shape} does not match the tensor's shape {self.shape}")
        return gradient.cast(self.dtype)

    # ---- modes ----
    @staticmethod
    @contextlib.contextmanager
    def train(mode: bool = True) -> Iterator[None]:
        """`with Tensor.train():` sets Tensor.training (dropout is active) for the block."""
        prev, Tensor.training = Tensor.training, mode
        try:
            yield
        finally:
            Tensor.training = prev

    @staticmethod
    def test() -> contextlib.AbstractContextManager[None]:
        """`with Tensor.test():` clears Tensor.training for the block."""
        return Tensor.train(False)

    @staticmethod
    @contextlib.contextmanager
    def inference_mode() -> Iterator[None]:
        """`with Tensor.inference_mode():` sets Tensor.no_grad: results do not track gradients."""
        prev, Tensor.no_grad = Tensor.no_grad, True
        try:
            yield
        finally:
            Tensor.no_grad = prev


# the engine's scheduling steps and the views of a schedule, handed to the Realizer (which never imports them)
_steps = (create_schedule, replay_one, protect_old_values, order_items, multi.needs_lowering, multi.schedule_multi)
Realizer.stages = Stages(*_steps, on_schedule)

_SYMBOLIC_ALUS = (Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.NEG, Ops.SUB, Ops.AND, Ops.OR)


def _symbolic_value(u: UOp, dev: str) -> UOp:
    """A 0-d int tensor graph holding the value of a symbolic int (`Variable("i", 1, 10).bind(3)`, `i + 1`).

    A bound variable v counts as the sum of v ones: a one-loop kernel whose length is a kernel argument, so one
    compiled kernel (and one TinyJit recording) serves every value.
    """
    if u.op is Ops.CONST:
        return const_uop(u.arg, dtypes.int32, dev)
    if u.op is Ops.DEFINE_VAR:
        raise ValueError(f"Tensor: variable {u.arg[0]!r} has no value; bind it first: Variable(...).bind(value)")
    if u.op is Ops.BIND:
        lo: int = u.src[0].arg[1]
        if lo >= 0:
            return Tensor.ones((u,), dtype=dtypes.int32, device=dev).sum().uop
        counted = Tensor.ones((u - lo,), dtype=dtypes.int32, device=dev).sum()  # counted from the lower bound
        return (counted + lo).uop
    if u.op in _SYMBOLIC_ALUS:
        srcs = [_symbolic_value(s, dev) for s in u.src]
        return srcs[0].alu(u.op, *srcs[1:])
    raise TypeError(f"Tensor: cannot build a tensor from the symbolic expression {u.op} (expected a bound Variable)")


def _assign_below(u: UOp) -> UOp | None:
    """The assign (not run yet) that `u` is a view of, if any."""
    while u.op in GroupOp.Movement:
        u = u.src[0]
    return u if u.op is Ops.ASSIGN and u not in current().realized else None


def _reads_shifted(value: UOp, target: UOp) -> bool:
    """Does `value` read `target`'s memory other than element for element (so writing in place would race)?

    Any BUFFER node sharing target's runtime buffer counts (an older version of an assigned tensor).
    An assign inside `value` is computed by a kernel of its own: only its result is read here.
    """
    memory = buffer_of(target)
    nodes: set[UOp] = set()
    stack = [value]
    while stack:
        node = stack.pop()
        if node not in nodes:
            nodes.add(node)
            stack.extend(node.src[:1] if node.op is Ops.ASSIGN else node.src)
    reaches: set[UOp] = set()
    for node in value.toposort:  # sources come first
        if node not in nodes:
            continue
        srcs = node.src[:1] if node.op is Ops.ASSIGN else node.src
        same_memory = node.op is Ops.BUFFER and buffer_of(node) is memory
        if same_memory or any(s in reaches for s in srcs):
            reaches.add(node)
            moved = node.op in GroupOp.Movement and node.op is not Ops.RESHAPE
            if moved or node.op is Ops.REDUCE_AXIS:
                return True
    return False


def _reads_memory(value: UOp, target: UOp) -> bool:
    """Does `value` read `target`'s memory at all?"""
    memory = buffer_of(target)
    return any(n.op is Ops.BUFFER and buffer_of(n) is memory for n in value.toposort)
