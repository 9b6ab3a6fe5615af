"""Tensor: a lazy, torch-like array built on UOps. Nothing runs until realize/numpy/item/tolist.

>>> from tg_tensor import Tensor
>>> (Tensor([1, 2, 3]) + 4).tolist()
[5, 6, 7]
>>> Tensor([[1.0, 2.0], [3.0, 4.0]]).sum(axis=1).numpy().tolist()
[3.0, 7.0]
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from tg_runtime.device import Device
from tg_tensor.realize import run_pending
from tg_tensor.schedule import ScheduleItem, buffer_of, create_schedule, pending
from tg_uop import ConstType, DType, Ops, UOp, dtypes
from tg_uop.helpers import all_int, prod
from tg_uop.uop import sint

sys.setrecursionlimit(max(sys.getrecursionlimit(), 20_000))

TensorLike = Any  # Tensor | ConstType | nested lists | numpy arrays


def _np_dtype(dt: DType) -> np.dtype[Any]:
    return np.dtype(dtypes.to_np_name(dt))


def _from_numpy(arr: np.ndarray[Any, Any], dtype: DType | None, device: str) -> UOp:
    if dtype is None:
        dtype = dtypes.from_np(arr.dtype)
    if dtype == dtypes.bfloat16:
        f32 = np.ascontiguousarray(arr, dtype=np.float32)
        raw = (f32.view(np.uint32) + 0x7FFF + ((f32.view(np.uint32) >> 16) & 1)) >> 16
        data = raw.astype(np.uint16).tobytes()
    else:
        data = np.ascontiguousarray(arr, dtype=_np_dtype(dtype)).tobytes()
    buf = UOp.new_buffer(device, int(arr.size), dtype)
    buffer_of(buf).copyin(memoryview(data))
    return buf.reshape(tuple(int(s) for s in arr.shape))


def _shape_of_list(data: Any) -> tuple[int, ...]:
    if not isinstance(data, (list, tuple)):
        return ()
    if not data:
        return (0,)
    sub = [_shape_of_list(d) for d in data]
    if any(s != sub[0] for s in sub):
        raise ValueError(f"Tensor: ragged nested sequence, sub-shapes {sorted(set(sub))} differ")
    return (len(data), *sub[0])


class Tensor:
    """A lazy multi-dimensional array. Operations build a UOp graph; `realize()` runs it."""

    training: ClassVar[bool] = False
    no_grad: ClassVar[bool] = False

    __slots__ = ("uop", "requires_grad", "grad", "__weakref__")

    def __init__(
        self, data: TensorLike, device: str | None = None, dtype: DType | None = None, requires_grad: bool | None = None
    ) -> None:
        dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
        if dtype is not None and not isinstance(dtype, DType):
            raise TypeError(f"Tensor: dtype must be a tg DType, got {dtype!r}")
        self.requires_grad: bool | None = requires_grad
        self.grad: Tensor | None = None
        if isinstance(data, UOp):
            self.uop = data if dtype is None or data.dtype == dtype else data.cast(dtype)
        elif isinstance(data, (bool, int, float)):
            self.uop = _const(data, dtype or dtypes.from_py(data), dev)
        elif isinstance(data, (list, tuple)):
            shape = _shape_of_list(data)
            dt = dtype or (dtypes.from_py(data) if prod(shape) else dtypes.default_float)
            self.uop = _from_numpy(
                np.array(data, dtype=_np_dtype(dt) if dt != dtypes.bfloat16 else np.float32).reshape(shape), dt, dev
            )
        elif isinstance(data, (np.ndarray, np.generic)):
            data = np.asarray(data)
            self.uop = _from_numpy(data, dtype, dev)
        elif isinstance(data, (bytes, bytearray, memoryview)):
            self.uop = _from_numpy(np.frombuffer(bytes(data), dtype=np.uint8), dtype or dtypes.uint8, dev)
        else:
            raise TypeError(f"Tensor: cannot build a tensor from {type(data).__name__}")
        if self.uop.device is None:
            raise ValueError("Tensor: the data has no device")

    # ---- properties ----
    @property
    def shape(self) -> tuple[sint, ...]:
        shape = self.uop.shape
        assert shape is not None
        return shape

    @property
    def dtype(self) -> DType:
        return self.uop.dtype

    @property
    def device(self) -> str:
        d = self.uop.device
        assert d is not None
        return d

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> sint:
        return prod(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return int(self.shape[0])

    def __repr__(self) -> str:
        return f"<Tensor {self.uop.op.name} shape={self.shape} dtype={self.dtype} device={self.device}>"

    # ---- creation ----
    @staticmethod
    def full(
        shape: tuple[sint, ...] | int, fill_value: ConstType, dtype: DType | None = None, device: str | None = None
    ) -> Tensor:
        """A tensor of `shape` filled with `fill_value` (lazy: no memory until realized)."""
        shape = _norm_shape(shape)
        dt = dtype or dtypes.from_py(fill_value)
        dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
        return Tensor(_const(fill_value, dt, dev).reshape((1,) * len(shape)).expand(shape))

    @staticmethod
    def zeros(*shape: Any, dtype: DType | None = None, device: str | None = None) -> Tensor:
        return Tensor.full(_varargs_shape(shape), 0.0, dtype or dtypes.default_float, device)

    @staticmethod
    def ones(*shape: Any, dtype: DType | None = None, device: str | None = None) -> Tensor:
        return Tensor.full(_varargs_shape(shape), 1.0, dtype or dtypes.default_float, device)

    @staticmethod
    def arange(
        start: int | float,
        stop: int | float | None = None,
        step: int | float = 1,
        dtype: DType | None = None,
        device: str | None = None,
    ) -> Tensor:
        """Evenly spaced values in [start, stop). One argument means [0, start)."""
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ValueError("arange: step must not be zero")
        n = max(0, math.ceil((stop - start) / step))
        dt = dtype or (
            dtypes.default_float if any(isinstance(v, float) for v in (start, stop, step)) else dtypes.default_int
        )
        values = np.array([start + i * step for i in range(n)], dtype=np.float64)
        return Tensor(values.astype(_np_dtype(dt)) if dt != dtypes.bfloat16 else values, device=device, dtype=dt)

    def full_like(self, fill_value: ConstType, dtype: DType | None = None) -> Tensor:
        return Tensor.full(self.shape, fill_value, dtype or self.dtype, self.device)

    def zeros_like(self, dtype: DType | None = None) -> Tensor:
        return self.full_like(0, dtype)

    def ones_like(self, dtype: DType | None = None) -> Tensor:
        return self.full_like(1, dtype)

    # ---- realization ----
    def schedule(self, *others: Tensor) -> list[ScheduleItem]:
        """The kernels that realizing these tensors would run; the tensors now refer to their outputs."""
        tensors = [self, *others]
        items, becomes = create_schedule([t.uop for t in tensors])
        for t in tensors:
            t.uop = becomes[t.uop]
        pending.extend(items)
        return items

    def realize(self, *others: Tensor) -> Tensor:
        """Run every kernel needed to compute this tensor (and `others`)."""
        self.schedule(*others)
        run_pending()
        return self

    def contiguous(self) -> Tensor:
        """A tensor whose data is laid out contiguously (a copy kernel unless it already is)."""
        return Tensor(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)))

    def detach(self) -> Tensor:
        return Tensor(UOp(Ops.DETACH, self.dtype, (self.uop,)))

    def _data(self) -> np.ndarray[Any, Any]:
        t = self if _is_contiguous_buffer(self.uop) else self.contiguous()
        t.realize()
        base = t.uop.base
        raw = buffer_of(base).as_bytes()
        if self.dtype == dtypes.bfloat16:
            arr = (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype=_np_dtype(self.dtype))
        return arr.reshape(tuple(int(s) for s in self.shape))

    def numpy(self) -> np.ndarray[Any, Any]:
        """The values as a new numpy array (realizes the tensor)."""
        if not all_int(self.shape):
            raise ValueError(f"numpy: shape {self.shape} is symbolic")
        if 0 in self.shape:
            return np.zeros(tuple(int(s) for s in self.shape), dtype=_np_dtype(self.dtype))
        return self._data().copy()

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def item(self) -> ConstType:
        if self.numel() != 1:
            raise ValueError(f"item: the tensor has {self.numel()} elements (shape {self.shape}); item needs exactly 1")
        return self.numpy().reshape(()).item()  # type: ignore[no-any-return]

    def to(self, device: str) -> Tensor:
        """This tensor on another device (a lazy copy)."""
        dev = Device.canonicalize(device)
        if dev == self.device:
            return self
        Device[dev]  # raises for unknown devices
        return Tensor(UOp(Ops.COPY, self.dtype, (self.uop, UOp(Ops.DEVICE, arg=dev))))

    # ---- movement ----
    def reshape(self, shape: Any, *args: Any) -> Tensor:
        """Same data, new shape; one dim may be -1."""
        new = _varargs_shape((shape, *args))
        if sum(1 for s in new if s == -1) > 1:
            raise ValueError(f"reshape: only one dimension can be -1, got {new}")
        if -1 in new:
            known = prod(s for s in new if s != -1)
            if known == 0 or self.numel() % known != 0:
                raise ValueError(f"reshape: cannot reshape {self.shape} (size {self.numel()}) to {new}")
            new = tuple(self.numel() // known if s == -1 else s for s in new)
        if prod(new) != self.numel():
            raise ValueError(f"reshape: cannot reshape {self.shape} (size {self.numel()}) to {new} (size {prod(new)})")
        return Tensor(self.uop.reshape(new))

    def view(self, shape: Any, *args: Any) -> Tensor:
        return self.reshape(shape, *args)

    def permute(self, order: Any, *args: Any) -> Tensor:
        axes = tuple(self._axis(a) for a in _varargs_shape((order, *args)))
        return Tensor(self.uop.permute(axes))

    def expand(self, shape: Any, *args: Any) -> Tensor:
        """Broadcast size-1 dims to `shape` (-1 keeps a dim); new leading dims are added."""
        new = _varargs_shape((shape, *args))
        if len(new) < self.ndim:
            raise ValueError(f"expand: cannot expand shape {self.shape} to fewer dims {new}")
        cur = (1,) * (len(new) - self.ndim) + self.shape
        new = tuple(c if s == -1 else s for c, s in zip(cur, new))
        return Tensor(self.uop.reshape(cur).expand(new))

    def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
        order = list(range(self.ndim))
        a, b = self._axis(dim0), self._axis(dim1)
        order[a], order[b] = order[b], order[a]
        return self.permute(tuple(order))

    @property
    def T(self) -> Tensor:  # noqa: N802
        return self.permute(tuple(reversed(range(self.ndim))))

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        if self.ndim == 0:
            return self.reshape((1,))
        s, e = self._axis(start_dim), self._axis(end_dim)
        return self.reshape(self.shape[:s] + (prod(self.shape[s : e + 1]),) + self.shape[e + 1 :])

    def _axis(self, axis: int) -> int:
        n = max(self.ndim, 1)
        if not isinstance(axis, int) or not -n <= axis < n:
            raise IndexError(f"axis {axis!r} is out of range for a tensor of {self.ndim} dims (shape {self.shape})")
        return axis % n if self.ndim else 0

    # ---- elementwise ----
    def _broadcasted(self, other: TensorLike, reverse: bool = False) -> tuple[Tensor, Tensor]:
        x, y = self, other
        if not isinstance(y, Tensor):
            if not isinstance(y, (bool, int, float)):
                y = Tensor(y, device=self.device)
            else:
                y = Tensor(_const(y, _scalar_dtype(x.dtype, y), x.device))
        if x.dtype != y.dtype:
            out = dtypes.least_upper(x.dtype, y.dtype)
            x, y = x.cast(out), y.cast(out)
        shape = _broadcast_shape(x.shape, y.shape)
        x, y = x._broadcast_to(shape), y._broadcast_to(shape)
        return (y, x) if reverse else (x, y)

    def _broadcast_to(self, shape: tuple[sint, ...]) -> Tensor:
        if self.shape == shape:
            return self
        padded = (1,) * (len(shape) - self.ndim) + self.shape
        return Tensor(self.uop.reshape(padded).expand(shape))

    def _binop(self, op: Ops, other: TensorLike, reverse: bool = False) -> Tensor:
        x, y = self._broadcasted(other, reverse)
        return Tensor(x.uop.alu(op, y.uop))

    def add(self, x: TensorLike, reverse: bool = False) -> Tensor:
        return self._binop(Ops.ADD, x, reverse)

    def sub(self, x: TensorLike, reverse: bool = False) -> Tensor:
        return self._binop(Ops.SUB, x, reverse)

    def mul(self, x: TensorLike, reverse: bool = False) -> Tensor:
        return self._binop(Ops.MUL, x, reverse)

    def div(self, x: TensorLike, reverse: bool = False) -> Tensor:
        """True division; integer inputs give the default float."""
        a, b = self._broadcasted(x, reverse)
        ft = dtypes.least_upper_float(a.dtype)
        return Tensor(a.cast(ft).uop.alu(Ops.FDIV, b.cast(ft).uop))

    def neg(self) -> Tensor:
        return self.logical_not() if self.dtype == dtypes.bool else Tensor(self.uop.alu(Ops.NEG))

    def logical_not(self) -> Tensor:
        return Tensor(self.uop.ne(True)) if self.dtype == dtypes.bool else self.cast(dtypes.bool).logical_not()

    def maximum(self, x: TensorLike) -> Tensor:
        return self._binop(Ops.MAX, x)

    def relu(self) -> Tensor:
        return self.maximum(0)

    def cast(self, dtype: DType) -> Tensor:
        if not isinstance(dtype, DType):
            raise TypeError(f"cast: expected a tg DType, got {dtype!r}")
        return self if self.dtype == dtype else Tensor(self.uop.cast(dtype))

    def __add__(self, x: TensorLike) -> Tensor:
        return self.add(x)

    def __radd__(self, x: TensorLike) -> Tensor:
        return self.add(x, True)

    def __sub__(self, x: TensorLike) -> Tensor:
        return self.sub(x)

    def __rsub__(self, x: TensorLike) -> Tensor:
        return self.sub(x, True)

    def __mul__(self, x: TensorLike) -> Tensor:
        return self.mul(x)

    def __rmul__(self, x: TensorLike) -> Tensor:
        return self.mul(x, True)

    def __truediv__(self, x: TensorLike) -> Tensor:
        return self.div(x)

    def __rtruediv__(self, x: TensorLike) -> Tensor:
        return self.div(x, True)

    def __neg__(self) -> Tensor:
        return self.neg()

    # ---- reductions ----
    def _reduce(self, op: Ops, axis: int | Sequence[int] | None, keepdim: bool) -> Tensor:
        axes = (
            tuple(range(self.ndim))
            if axis is None
            else tuple(self._axis(a) for a in ((axis,) if isinstance(axis, int) else axis))
        )
        if self.ndim == 0:
            return self
        if any(self.shape[a] == 0 for a in axes) and op is Ops.MAX:
            raise ValueError(f"max: cannot reduce over a size-0 axis of shape {self.shape}")
        ret = Tensor(self.uop.r(op, axes))
        if keepdim:
            return ret
        return ret.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def sum(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, dtype: DType | None = None) -> Tensor:
        """Sum over `axis` (all axes by default). Small ints and bools accumulate in int32, halfs in float32."""
        acc = dtype or _sum_acc_dtype(self.dtype)
        ret = self.cast(acc)._reduce(Ops.ADD, axis, keepdim)
        return ret.cast(self.dtype) if dtype is None and self.dtype in (dtypes.float16, dtypes.bfloat16) else ret

    def max(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        return self._reduce(Ops.MAX, axis, keepdim)

    def float(self) -> Tensor:
        return self.cast(dtypes.float32)

    def int(self) -> Tensor:
        return self.cast(dtypes.int32)


def _const(value: ConstType, dtype: DType, device: str) -> UOp:
    return UOp(Ops.CONST, dtype, (UOp(Ops.DEVICE, arg=device),), dtypes.as_const(value, dtype))


def _scalar_dtype(tensor_dtype: DType, value: ConstType) -> DType:
    """The dtype a Python scalar takes next to a tensor (tinygrad's rule: the tensor's, unless it must widen)."""
    if isinstance(value, float) and not dtypes.is_float(tensor_dtype):
        return dtypes.default_float
    if isinstance(value, int) and not isinstance(value, bool) and tensor_dtype == dtypes.bool:
        return dtypes.default_int
    return tensor_dtype


def _sum_acc_dtype(dt: DType) -> DType:
    if dtypes.is_unsigned(dt):
        return dtypes.least_upper(dt, dtypes.uint32)
    if dtypes.is_int(dt) or dt == dtypes.bool:
        return dtypes.least_upper(dt, dtypes.int32)
    return dtypes.least_upper(dt, dtypes.float32)


def _broadcast_shape(a: tuple[sint, ...], b: tuple[sint, ...]) -> tuple[sint, ...]:
    n = max(len(a), len(b))
    pa, pb = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(pa, pb):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"shapes {a} and {b} cannot be broadcast together")
        out.append(y if x == 1 else x)
    return tuple(out)


def _varargs_shape(args: tuple[Any, ...]) -> tuple[int, ...]:
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    if not all(isinstance(a, int) or isinstance(a, UOp) for a in args):
        raise TypeError(f"shape entries must be ints, got {args}")
    return tuple(args)


def _norm_shape(shape: tuple[sint, ...] | int) -> tuple[int, ...]:
    shp = (shape,) if isinstance(shape, int) else tuple(shape)
    if any(isinstance(s, int) and s < 0 for s in shp):
        raise ValueError(f"negative dimension in shape {shp}")
    return shp


def _is_contiguous_buffer(u: UOp) -> bool:
    return u.op is Ops.BUFFER or (u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER)
