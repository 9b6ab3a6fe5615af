# mypy: disable-error-code="misc"
# (mixin methods annotate `self: Tensor`, the class they are mixed into; mypy flags that as "misc")
"""Tensor creation: constants, ranges, eye, and seeded random numbers.

Random numbers are made on the device from a seed and a call counter held in device buffers
(Threefry-2x32, see rng.py): the same seed gives the same numbers on every device, and a TinyJit
replay draws new ones.

>>> from tg_tensor import Tensor
>>> Tensor.manual_seed(0)
>>> a = Tensor.rand(3).tolist()
>>> Tensor.manual_seed(0)
>>> a == Tensor.rand(3).tolist()
True
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tg_runtime.device import Buffer, Device, DeviceSet
from tg_runtime.ops_disk import disk_buffers
from tg_tensor.engine.multi import multi_node, shard_uop, split_of
from tg_tensor.engine.realizer import current
from tg_tensor.engine.util import const_uop, norm_shape, np_dtype, to_dtype, varargs_shape
from tg_tensor.front import front
from tg_tensor.rng import RandomState, to_unit_float
from tg_uop import ConstType, DType, UOp, dtypes
from tg_uop.helpers import all_int, prod
from tg_uop.uop import sint

if TYPE_CHECKING:
    from tg_tensor.tensor import Tensor


def _dt(dtype: DType | str | None) -> DType | None:
    return None if dtype is None else to_dtype(dtype)


def _default_state() -> RandomState:
    """The stream Tensor.rand and friends draw from (Tensor.manual_seed resets it); one per Realizer."""
    st = front()
    if st.random is None:
        st.random = RandomState(0)
    return st.random


class CreationMixin:
    """Constructors: full/zeros/ones/empty, arange/linspace/eye, rand/randn/randint/normal/uniform, inits."""

    __slots__ = ()

    # ---- constants ----
    @classmethod
    def full(
        cls: type[Tensor],
        shape: tuple[sint, ...] | int,
        fill_value: ConstType,
        dtype: DType | str | None = None,
        device: str | None = None,
        **kwargs: Any,
    ) -> Tensor:
        """A tensor of `shape` filled with `fill_value` (lazy: no memory until realized).

        >>> from tg_tensor import Tensor
        >>> Tensor.full((2,), 7).tolist()
        [7, 7]
        """
        shp = norm_shape(shape)
        dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
        if isinstance(fill_value, UOp):  # a bound Variable (its value at the binding)
            value = cls(fill_value, device=dev, dtype=_dt(dtype) or dtypes.default_int).uop
        else:
            value = const_uop(fill_value, _dt(dtype) or dtypes.from_py(fill_value), dev)
        return cls(value.reshape((1,) * len(shp)).expand(shp), **kwargs)

    @classmethod
    def zeros(
        cls: type[Tensor], *shape: Any, dtype: DType | str | None = None, device: str | None = None, **kw: Any
    ) -> Tensor:
        """Zeros of the given shape (`Tensor.zeros(2, 3)` or `Tensor.zeros((2, 3))`)."""
        return cls.full(varargs_shape(shape), 0.0, _dt(dtype) or dtypes.default_float, device, **kw)

    @classmethod
    def ones(
        cls: type[Tensor], *shape: Any, dtype: DType | str | None = None, device: str | None = None, **kw: Any
    ) -> Tensor:
        """Ones of the given shape."""
        return cls.full(varargs_shape(shape), 1.0, _dt(dtype) or dtypes.default_float, device, **kw)

    @classmethod
    def empty(
        cls: type[Tensor], *shape: Any, dtype: DType | str | None = None, device: str | None = None, **kw: Any
    ) -> Tensor:
        """An uninitialized tensor with its own buffer (allocated when first used)."""
        shp = norm_shape(varargs_shape(shape))
        dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
        dt = _dt(dtype) or dtypes.default_float
        if isinstance(dev, DeviceSet):  # a buffer of its own on each device
            return cls(multi_node([UOp.new_buffer(d, int(prod(shp)), dt).reshape(shp) for d in dev.devices], None, dev))
        return cls(UOp.new_buffer(dev, int(prod(shp)), dt).reshape(shp), **kw)

    # ---- existing memory ----
    @classmethod
    def from_buffer(cls: type[Tensor], buf: Buffer, shape: tuple[int, ...] | None = None) -> Tensor:
        """A realized tensor whose values are the existing runtime Buffer `buf` (no copy), row-major at `shape`
        (default: one axis of `buf.size` elements).

        >>> from tg_tensor import Tensor
        >>> from tg_runtime import Buffer
        >>> from tg_uop import dtypes
        >>> b = Buffer("PYTHON", 2, dtypes.int32).copyin(memoryview(bytes([1, 0, 0, 0, 2, 0, 0, 0])))
        >>> Tensor.from_buffer(b, (2, 1)).tolist()
        [[1], [2]]
        """
        shp = (buf.size,) if shape is None else tuple(shape)
        if prod(shp) != buf.size:
            raise ValueError(f"from_buffer: shape {shp} does not hold the buffer's {buf.size} x {buf.dtype}")
        return cls(current().register(buf).reshape(shp))

    @classmethod
    def from_shards(cls: type[Tensor], shards: Sequence[Tensor], axis: int | None = None) -> Tensor:
        """One tensor on the devices of `shards` (one tensor per device, in order): joined along `axis`, or each a
        full copy when `axis` is None. The inverse of `shard`, without copying the shards.

        >>> from tg_tensor import Tensor
        >>> Tensor.from_shards([Tensor([1.0], device="CPU:0"), Tensor([2.0], device="CPU:1")], axis=0).tolist()
        [1.0, 2.0]
        """
        devices = DeviceSet(tuple(str(s.device) for s in shards))
        return cls(multi_node([s.uop for s in shards], axis, devices))

    @classmethod
    def from_file(
        cls: type[Tensor],
        path: str | os.PathLike[str],
        dtype: DType | str = dtypes.uint8,
        offset: int = 0,
        shape: tuple[int, ...] | None = None,
    ) -> Tensor:
        """The file's bytes from byte `offset` as a read-only tensor on the `DISK:<path>` device: memory-mapped,
        nothing read until its values are asked for or moved with `.to(device)`. `shape` defaults to one axis
        holding the rest of the file.

        >>> import os, tempfile
        >>> from tg_tensor import Tensor
        >>> path = os.path.join(tempfile.mkdtemp(), "f.bin")
        >>> _ = open(path, "wb").write(bytes([0, 1, 2, 3]))
        >>> Tensor.from_file(path, offset=1).to("CPU").tolist()
        [1, 2, 3]
        """
        dt = to_dtype(dtype)
        shp = ((os.path.getsize(path) - offset) // dt.itemsize,) if shape is None else tuple(shape)
        [buf] = disk_buffers(path, [(offset, prod(shp), dt)])
        return cls.from_buffer(buf, shp)

    def full_like(self: Tensor, fill_value: ConstType, dtype: DType | str | None = None, **kw: Any) -> Tensor:
        """`fill_value` everywhere, with this tensor's shape, dtype (or `dtype`) and device.

        >>> from tg_tensor import Tensor
        >>> Tensor([1, 2]).full_like(7).tolist()
        [7, 7]
        """
        if (split := split_of(self.uop)) is not None and split.axis is not None:  # split like self
            one = type(self).full(self.shape, fill_value, _dt(dtype) or self.dtype, split.devices.devices[0])
            return type(self)(shard_uop(one.uop, split.devices, split.axis), **kw)
        return type(self).full(self.shape, fill_value, _dt(dtype) or self.dtype, self.device, **kw)

    def zeros_like(self: Tensor, dtype: DType | str | None = None, **kw: Any) -> Tensor:
        """Zeros of this tensor's shape, dtype (or `dtype`) and device.

        >>> from tg_tensor import Tensor
        >>> Tensor([1, 2]).zeros_like().tolist()
        [0, 0]
        """
        return self.full_like(0, dtype, **kw)

    def ones_like(self: Tensor, dtype: DType | str | None = None, **kw: Any) -> Tensor:
        """Ones of this tensor's shape, dtype (or `dtype`) and device.

        >>> from tg_tensor import Tensor
        >>> Tensor([1, 2]).ones_like().tolist()
        [1, 1]
        """
        return self.full_like(1, dtype, **kw)

    def empty_like(self: Tensor, dtype: DType | str | None = None, **kw: Any) -> Tensor:
        """An uninitialized tensor of this tensor's shape, dtype (or `dtype`) and device.

        >>> from tg_tensor import Tensor
        >>> Tensor([1, 2]).empty_like().shape
        (2,)
        """
        if (split := split_of(self.uop)) is not None and split.axis is not None:  # split like self: a buffer each
            dt = _dt(dtype) or self.dtype
            shards = [type(self).empty(s.shape, dtype=dt, device=str(s.device)).uop for s in split.uops]
            return type(self)(multi_node(shards, split.axis, split.devices), **kw)
        return type(self).empty(self.shape, dtype=_dt(dtype) or self.dtype, device=self.device, **kw)

    def rand_like(self: Tensor, dtype: DType | str | None = None, **kw: Any) -> Tensor:
        """Uniform random numbers in [0, 1) of this tensor's shape (a float dtype) and device.

        >>> from tg_tensor import Tensor
        >>> Tensor([1.0, 2.0]).rand_like().shape
        (2,)
        """
        return type(self).rand(self.shape, dtype=_dt(dtype) or _float_or_default(self.dtype), device=self.device, **kw)

    def randn_like(self: Tensor, dtype: DType | str | None = None, **kw: Any) -> Tensor:
        """Standard normal random numbers of this tensor's shape (a float dtype) and device.

        >>> from tg_tensor import Tensor
        >>> Tensor([1.0, 2.0]).randn_like().shape
        (2,)
        """
        return type(self).randn(self.shape, dtype=_dt(dtype) or _float_or_default(self.dtype), device=self.device, **kw)

    # ---- ranges ----
    @classmethod
    def arange(
        cls: type[Tensor],
        start: int | float,
        stop: int | float | None = None,
        step: int | float = 1,
        dtype: DType | str | None = None,
        device: str | None = None,
        **kw: Any,
    ) -> Tensor:
        """Evenly spaced values in [start, stop). One argument means [0, start).

        >>> from tg_tensor import Tensor
        >>> Tensor.arange(1, 7, 2).tolist()
        [1, 3, 5]
        """
        import numpy as np

        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise ValueError("arange: step must not be zero")
        n = max(0, math.ceil((stop - start) / step))
        is_float = any(isinstance(v, float) for v in (start, stop, step))
        ends = (start, start + (n - 1) * step) if n else ()
        dt = _dt(dtype) or (dtypes.default_float if is_float else dtypes.default_int)
        if dtype is None and not is_float and any(not dtypes.min(dt) <= v <= dtypes.max(dt) for v in ends):
            dt = dtypes.int64  # an int range past the default int widens, as in tinygrad
        if dtypes.is_int(dt) and any(not dtypes.min(dt) <= v <= dtypes.max(dt) for v in ends):
            raise OverflowError(f"arange: values from {start} to {ends[1]} do not fit {dt}")
        values = np.array([start + i * step for i in range(n)], dtype=np.float64 if is_float else np.int64)
        return cls(values.astype(np_dtype(dt)), device=device, dtype=dt, **kw)

    @classmethod
    def linspace(
        cls: type[Tensor],
        start: float,
        stop: float,
        steps: int,
        dtype: DType | str | None = None,
        device: str | None = None,
        **kw: Any,
    ) -> Tensor:
        """`steps` evenly spaced values from start to stop inclusive.

        >>> from tg_tensor import Tensor
        >>> Tensor.linspace(0, 1, 3).tolist()
        [0.0, 0.5, 1.0]
        """
        import numpy as np

        if not isinstance(steps, int) or steps < 0:
            raise ValueError(f"linspace: steps must be a non-negative int, got {steps!r}")
        dt = _dt(dtype) or dtypes.default_float
        if dt == dtypes.bool:
            raise ValueError("linspace: a bool dtype is not supported (as in PyTorch and tinygrad)")
        values = np.linspace(start, stop, steps, dtype=np.float64)
        return cls(values.astype(np_dtype(dt)), device=device, dtype=dt, **kw)

    @classmethod
    def eye(
        cls: type[Tensor],
        n: int,
        m: int | None = None,
        dtype: DType | str | None = None,
        device: str | None = None,
        **kw: Any,
    ) -> Tensor:
        """The identity matrix (n x m).

        >>> from tg_tensor import Tensor
        >>> Tensor.eye(2).tolist()
        [[1.0, 0.0], [0.0, 1.0]]
        """
        m = n if m is None else m
        if n < 0 or m < 0:
            raise ValueError(f"eye: sizes must be non-negative, got n={n}, m={m}")
        rows = cls.arange(n, device=device).reshape(n, 1)
        cols = cls.arange(m, device=device).reshape(1, m)
        return cls((rows == cols).cast(_dt(dtype) or dtypes.default_float).uop, **kw)

    # ---- random ----
    @staticmethod
    def manual_seed(seed: int = 0) -> None:
        """Restart the random stream: the same seed gives the same numbers on every device.

        The device state is rewritten in place, so a TinyJit recording that draws numbers restarts too.
        """
        _default_state().reseed(seed)

    @classmethod
    def _random(cls: type[Tensor], values: UOp, dtype: DType | str | None, default: DType, **kw: Any) -> Tensor:
        dt = _dt(dtype) or default
        kw.pop("contiguous", None)  # tinygrad's layout hint: tg's random tensors are always laid out in order
        return cls(values if values.dtype == dt else values.cast(dt), **kw)

    @classmethod
    def _bits(cls: type[Tensor], shape: tuple[Any, ...], device: str | None) -> tuple[tuple[int, ...], str, UOp, UOp]:
        shp = norm_shape(varargs_shape(shape))
        if not all_int(shp):
            raise ValueError(f"random: shape {shp} must be made of ints")
        dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
        return (shp, dev, *_default_state().bits(shp, dev))

    @classmethod
    def rand(
        cls: type[Tensor], *shape: Any, dtype: DType | str | None = None, device: str | None = None, **kw: Any
    ) -> Tensor:
        """Uniform random numbers in [0, 1), made on the device (Threefry-2x32 of a seed and a counter).

        >>> from tg_tensor import Tensor
        >>> Tensor.manual_seed(1)
        >>> x = Tensor.rand(2, 3)
        >>> x.shape, bool(((x >= 0) & (x < 1)).all().item())
        ((2, 3), True)
        """
        shp, dev, bits, _ = cls._bits(shape, device)
        return cls._random(to_unit_float(bits, shp, dev), dtype, dtypes.default_float, **kw)

    @classmethod
    def randn(
        cls: type[Tensor], *shape: Any, dtype: DType | str | None = None, device: str | None = None, **kw: Any
    ) -> Tensor:
        """Standard normal random numbers (Box-Muller of the two uniform outputs of one draw)."""
        shp, dev, bits0, bits1 = cls._bits(shape, device)
        u1 = 1 - cls(to_unit_float(bits0, shp, dev))  # in (0, 1]: its log is finite
        u2 = cls(to_unit_float(bits1, shp, dev))
        z = (u1.log() * -2).sqrt() * (u2 * (2 * math.pi)).cos()
        return cls._random(z.uop, dtype, dtypes.default_float, **kw)

    @classmethod
    def randint(
        cls: type[Tensor], *shape: Any, low: int = 0, high: int = 10, dtype: DType | str = dtypes.int32, **kw: Any
    ) -> Tensor:
        """Random integers in [low, high) (the bits modulo the range: bias below range / 2**32)."""
        if not isinstance(low, int) or not isinstance(high, int) or low >= high:
            raise ValueError(f"randint: need ints with low < high, got low={low!r}, high={high!r}")
        if high - low > 2**32:
            raise ValueError(f"randint: the range high - low = {high - low} is larger than 2**32")
        _, _, bits, _ = cls._bits(shape, kw.pop("device", None))
        dt = _dt(dtype) or dtypes.int32
        values = cls(bits) % (high - low) if high - low < 2**32 else cls(bits)
        return cls._random((values.cast(dtypes.int64) + low).cast(dt).uop, dt, dt, **kw)

    @classmethod
    def normal(cls: type[Tensor], *shape: Any, mean: float = 0.0, std: float = 1.0, **kw: Any) -> Tensor:
        """Normal random numbers with the given mean and standard deviation."""
        rg = kw.pop("requires_grad", None)
        out = (cls.randn(*shape, **kw) * std + mean).cast(kw.get("dtype") or dtypes.default_float)
        return cls(out.uop, requires_grad=rg)

    @classmethod
    def uniform(
        cls: type[Tensor],
        *shape: Any,
        low: float = 0.0,
        high: float = 1.0,
        dtype: DType | str | None = None,
        **kw: Any,
    ) -> Tensor:
        """Uniform random numbers in [low, high), drawn in float and then cast to `dtype` (as tinygrad).

        >>> from tg_tensor import Tensor
        >>> x = Tensor.uniform(100, low=2, high=5, dtype="int32")
        >>> x.dtype.name, 2 <= x.min().item() and x.max().item() < 5
        ('int', True)
        """
        rg = kw.pop("requires_grad", None)
        out = (cls.rand(*shape, **kw) * (high - low)).cast(_dt(dtype) or dtypes.default_float) + low
        return cls(out.uop, requires_grad=rg)

    @classmethod
    def scaled_uniform(cls: type[Tensor], *shape: Any, **kw: Any) -> Tensor:
        """Uniform in [-1, 1) scaled by 1/sqrt(numel)."""
        shp = varargs_shape(shape)
        bound = max(prod(shp), 1) ** -0.5
        return cls.uniform(*shp, low=-bound, high=bound, **kw)

    @classmethod
    def glorot_uniform(cls: type[Tensor], *shape: Any, **kw: Any) -> Tensor:
        """Glorot/Xavier uniform: bound sqrt(6 / (fan_in + fan_out))."""
        shp = varargs_shape(shape)
        bound = math.sqrt(6 / (shp[0] + prod(shp[1:]))) if shp else 1.0
        return cls.uniform(*shp, low=-bound, high=bound, **kw)

    @classmethod
    def kaiming_uniform(cls: type[Tensor], *shape: Any, a: float = 0.01, **kw: Any) -> Tensor:
        """He/Kaiming uniform: bound sqrt(3) * gain / sqrt(fan_in), gain = sqrt(2 / (1 + a^2))."""
        shp = varargs_shape(shape)
        bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a**2)) / math.sqrt(max(prod(shp[1:]), 1))
        return cls.uniform(*shp, low=-bound, high=bound, **kw)

    @classmethod
    def kaiming_normal(cls: type[Tensor], *shape: Any, a: float = 0.01, **kw: Any) -> Tensor:
        """He/Kaiming normal: std gain / sqrt(fan_in)."""
        shp = varargs_shape(shape)
        std = math.sqrt(2.0 / (1 + a**2)) / math.sqrt(max(prod(shp[1:]), 1))
        return cls.normal(*shp, mean=0.0, std=std, **kw)


def _float_or_default(dt: DType) -> DType:
    return dt if dtypes.is_float(dt) else dtypes.default_float
