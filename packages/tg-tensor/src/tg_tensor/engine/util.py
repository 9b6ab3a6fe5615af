"""Small helpers shared by the Tensor modules: shapes, broadcasting, dtypes, constants.

>>> from tg_tensor.engine.util import broadcast_shape
>>> broadcast_shape((2, 1), (3,))
(2, 3)
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tg_uop import ConstType, DType, Ops, UOp, dtypes
from tg_uop.uop import sint

if TYPE_CHECKING:
    import numpy as np


class ShapeError(RuntimeError, ValueError):
    """Operands whose shapes do not fit (matmul, permute, reshape with two -1s).

    tinygrad and PyTorch raise RuntimeError for these; tg raised ValueError before: it is both.
    """


class DTypeError(RuntimeError, TypeError):
    """An operand of the wrong dtype where tinygrad and PyTorch raise RuntimeError (assign); also a TypeError."""


class ArgumentError(RuntimeError, ValueError):
    """A bad argument value (an unknown rounding mode, clip without bounds, repeated flip dims) where tinygrad
    and PyTorch raise RuntimeError; also a ValueError, as tg raised before."""


class ShapeEntryError(TypeError, ValueError):
    """A shape entry that is not an int (`Tensor.zeros((2, 3), 4)`): tinygrad raises ValueError; also a TypeError."""


class ModeError(NotImplementedError, ValueError):
    """An unknown mode (`pad(mode="typo")`): tinygrad and PyTorch raise NotImplementedError; also a ValueError."""


class DTypeNameError(AttributeError, TypeError):
    """An unknown dtype name (`x.cast("")`): tinygrad raises AttributeError (a `dtypes` lookup); also a TypeError."""


@functools.cache  # (every read of a tensor's values asks)
def np_dtype(dt: DType) -> np.dtype[Any]:
    """The numpy dtype matching a tg dtype (float32 for bfloat16, which numpy does not have: its values are carried
    as float32 on the host)."""
    import numpy as np

    return np.dtype(dtypes.to_np_name(dt))


def const_uop(value: ConstType, dtype: DType, device: str) -> UOp:
    """A 0-d tensor-level constant on `device`."""
    return UOp(Ops.CONST, dtype, (UOp(Ops.DEVICE, arg=device),), dtypes.as_const(value, dtype))


def scalar_dtype(tensor_dtype: DType, value: ConstType) -> DType:
    """The dtype a Python scalar takes next to a tensor (tinygrad's rule: the tensor's, unless it must widen)."""
    if isinstance(value, float) and not dtypes.is_float(tensor_dtype):
        return dtypes.default_float
    if isinstance(value, int) and not isinstance(value, bool) and tensor_dtype == dtypes.bool:
        return dtypes.default_int
    return tensor_dtype


@functools.cache  # (a pure function of a few dtypes)
def sum_acc_dtype(dt: DType) -> DType:
    """The dtype a sum accumulates in: int32 at least for ints and bools, float32 at least for floats."""
    if dtypes.is_unsigned(dt):
        return dtypes.least_upper(dt, dtypes.uint32)
    if dtypes.is_int(dt) or dt == dtypes.bool:
        return dtypes.least_upper(dt, dtypes.int32)
    return dtypes.least_upper(dt, dtypes.float32)


def broadcast_shape(*shapes: tuple[sint, ...]) -> tuple[sint, ...]:
    """numpy's broadcasting rule; raises ValueError naming the shapes when they do not fit."""
    n = max((len(s) for s in shapes), default=0)
    padded = [(1,) * (n - len(s)) + tuple(s) for s in shapes]
    out: list[sint] = []
    for dims in zip(*padded):
        big = [d for d in dims if d != 1]
        if any(d != big[0] for d in big):
            raise ValueError(f"shapes {' and '.join(str(tuple(s)) for s in shapes)} cannot be broadcast together")
        out.append(big[0] if big else 1)
    return tuple(out)


def varargs_shape(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """`f(2, 3)` and `f((2, 3))` both mean the shape (2, 3)."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    if not all(isinstance(a, (int, UOp)) and not isinstance(a, bool) for a in args):
        raise ShapeEntryError(f"shape entries must be ints, got {args}")
    return tuple(args)


def norm_shape(shape: tuple[sint, ...] | int) -> tuple[sint, ...]:
    """A shape tuple from an int or a sequence; negative sizes raise."""
    shp = (shape,) if isinstance(shape, int) else tuple(shape)
    if any(not isinstance(s, (int, UOp)) or isinstance(s, bool) for s in shp):
        raise ShapeEntryError(f"shape entries must be ints, got {shp}")
    if any(isinstance(s, int) and s < 0 for s in shp):
        raise ValueError(f"negative dimension in shape {shp}")
    return shp


def is_contiguous_buffer(u: UOp) -> bool:
    """A realized BUFFER (maybe reshaped): its bytes are the tensor's values in order."""
    return u.op is Ops.BUFFER or (u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER)


def shape_of_list(data: Any) -> tuple[int, ...]:
    """The shape of nested lists; ragged nesting raises ValueError."""
    if not isinstance(data, (list, tuple)):
        return ()
    if not data:
        return (0,)
    sub = [shape_of_list(d) for d in data]
    if any(s != sub[0] for s in sub):
        raise ValueError(f"Tensor: ragged nested sequence, sub-shapes {sorted(set(sub))} differ")
    return (len(data), *sub[0])


def resolve_axes(axis: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    """Axes as non-negative ints; None means all. Out-of-range axes raise IndexError."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    return tuple(normalize_axis(a, ndim) for a in axes)


def normalize_axis(axis: int, ndim: int) -> int:
    """A possibly negative axis as a non-negative one (0-d tensors accept 0 and -1)."""
    n = max(ndim, 1)
    if not isinstance(axis, int) or isinstance(axis, bool) or not -n <= axis < n:
        raise IndexError(f"axis {axis!r} is out of range for a tensor of {ndim} dims")
    return axis % n


def to_dtype(dtype: DType | str) -> DType:
    """A DType from a DType or its name ("float32", "int", "uint8", "half", "bfloat16"...), as tinygrad accepts.

    >>> to_dtype("int") == dtypes.int32
    True
    """
    if isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, str):
        fields = dtypes.fields()
        if dtype in fields:
            return fields[dtype]
        raise DTypeNameError(f"unknown dtype name {dtype!r}; expected one of {sorted(fields)}")
    raise TypeError(f"expected a tg DType or a dtype name, got {dtype!r}")
