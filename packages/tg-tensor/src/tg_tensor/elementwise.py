# mypy: disable-error-code="misc"
# (mixin methods annotate `self: Tensor`, the class they are mixed into; mypy flags that as "misc")
"""Elementwise maths: arithmetic with broadcasting and dtype promotion, comparisons, bit ops, casts.

>>> from tg_tensor import Tensor
>>> (Tensor([7, -7]) // 2).tolist()
[3, -4]
>>> (2 ** Tensor([1.0, 3.0])).tolist()
[2.0, 8.0]
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tg_tensor.engine.realizer import current
from tg_tensor.engine.util import ArgumentError, DTypeError, broadcast_shape, const_uop, scalar_dtype, to_dtype
from tg_tensor.front import front
from tg_tensor.gradient import custom_gradient
from tg_uop import ConstType, DType, Ops, UOp, dtypes
from tg_uop.uop import sint

if TYPE_CHECKING:
    from tg_tensor.tensor import Tensor

TensorLike = Any
INV_LN2 = 1 / math.log(2)
SCALAR_VIEWS_MAX = 256  # cached constant views (`_scalar_view`): the cache is emptied when it reaches this
LN2 = math.log(2)


def _same_device(x: Tensor, y: Tensor) -> None:
    """Operands of one op must live on one device (nothing moves data implicitly)."""
    if x.device != y.device:
        raise ValueError(
            f"operands are on different devices: {x.device} (shape {x.shape}) and {y.device} (shape {y.shape}); "
            f"move one with .to({x.device!r}) or .to({y.device!r}) first"
        )


def _reflected(op: Callable[[Tensor, TensorLike, bool], Tensor]) -> Callable[[Tensor, TensorLike], Tensor]:
    """The reflected operator of a binary op (`2 - t` calls `t.__rsub__(2)`): `op(t, x, reverse=True)`."""

    def reflected(self: Tensor, x: TensorLike) -> Tensor:
        return op(self, x, True)

    return reflected


class ElementwiseMixin:
    """Binary and unary elementwise ops. Every binary op broadcasts by numpy's rules."""

    __slots__ = ()

    # ---- operands ----
    def _to_tensor(self: Tensor, other: TensorLike) -> Tensor:
        if isinstance(other, type(self)):
            return other
        if isinstance(other, (bool, int, float)):
            return type(self)(const_uop(other, scalar_dtype(self.dtype, other), self.device))
        if isinstance(other, UOp) and other.device is None:  # a bound Variable: an int scalar, as a Python int is
            return type(self)(other, device=self.device, dtype=scalar_dtype(self.dtype, 0))
        return type(self)(other, device=self.device)

    def _scalar_view(self: Tensor, value: ConstType) -> UOp | None:
        """A Python scalar that keeps this tensor's dtype, as a constant viewed at its shape (`t * 2.5`); None when
        it must widen the dtype. The view nodes are kept in a small cache, so a loop of `t * 2.5` over new tensors
        builds none of them again (nor their structure ids). The key has the value's type and, for a float,
        its sign (-0.0 == 0.0 in Python, not as a constant); a NaN never equals itself, so it only misses."""
        u = self._uop
        dtype, dev, shape = u.dtype, u.device, u.shape
        if type(dev) is not str:  # (a DeviceSet, a str subclass: the tensor lives on several devices)
            return None
        sign = math.copysign(1.0, value) if type(value) is float else 0.0
        key = (value, type(value), sign, dtype, dev, shape)
        rz = current()
        views = (rz.front or front(rz)).scalar_views
        if (hit := views.get(key)) is None:  # (only views that passed the checks below are kept)
            if shape is None or scalar_dtype(dtype, value) != dtype:
                return None
            c = const_uop(value, dtype, dev)
            hit = c.reshape((1,) * len(shape)).expand(shape) if shape else c
            _ = hit.toposort  # (walked once: every `t * value` walks its graph through this cached order)
            if len(views) >= SCALAR_VIEWS_MAX:
                views.clear()
            views[key] = hit
        if rz.realized.data:  # a realize of an equal constant (Tensor.full) must not stand for it: that buffer may be
            rz.forget_constants(hit)  # assigned to later (its old version stale), and loading it costs a read
        return hit

    def _operands(self: Tensor, other: TensorLike, reverse: bool = False) -> tuple[UOp, UOp]:
        """The nodes of a binary op's operands, broadcast and promoted (as `_broadcasted`); a Python scalar that
        keeps this tensor's dtype needs no Tensor of its own."""
        if type(other) in (float, int, bool) and (view := self._scalar_view(other)) is not None:
            return (view, self._uop) if reverse else (self._uop, view)
        x, y = self._broadcasted(other, reverse)
        return x.uop, y.uop

    def _broadcasted(self: Tensor, other: TensorLike, reverse: bool = False) -> tuple[Tensor, Tensor]:
        if type(other) in (float, int, bool) and (view := self._scalar_view(other)) is not None:  # (`t * 2.5`)
            y = type(self)(view)  # the constant, viewed at self's shape: one tensor built, not three
            return (y, self) if reverse else (self, y)
        x, y = self, self._to_tensor(other)
        if x.uop.shape == y.uop.shape and x.dtype == y.dtype and x.device == y.device:
            return (y, x) if reverse else (x, y)  # (nothing to broadcast or cast)
        _same_device(x, y)
        if x.dtype != y.dtype:
            out = dtypes.least_upper(x.dtype, y.dtype)
            x, y = x.cast(out), y.cast(out)
        shape = broadcast_shape(x.shape, y.shape)
        x, y = x._broadcast_to(shape), y._broadcast_to(shape)
        return (y, x) if reverse else (x, y)

    def _broadcast_to(self: Tensor, shape: tuple[sint, ...]) -> Tensor:
        if self.shape == shape:
            return self
        padded = (1,) * (len(shape) - self.ndim) + self.shape
        return type(self)(self.uop.reshape(padded).expand(shape))

    def _binop(self: Tensor, op: Ops, other: TensorLike, reverse: bool = False) -> Tensor:
        x, y = self._operands(other, reverse)
        return type(self)(x.alu(op, y))

    def _unop(self: Tensor, op: Ops) -> Tensor:
        return type(self)(self.uop.alu(op))

    def _float(self: Tensor) -> Tensor:
        return self if dtypes.is_float(self.dtype) else self.cast(dtypes.default_float)

    def _require_int(self: Tensor, what: str) -> None:
        """A float tensor raises DTypeError: a RuntimeError as in PyTorch and tinygrad, and a TypeError."""
        if not (dtypes.is_int(self.dtype) or self.dtype == dtypes.bool):
            raise DTypeError(f"{what} needs an integer or bool tensor, got dtype {self.dtype}")

    # ---- arithmetic ----
    def add(self: Tensor, x: TensorLike, reverse: bool = False) -> Tensor:
        """self + x (bools add as logical or)."""
        a, b = self._operands(x, reverse)
        return type(self)(a.alu(Ops.OR if a.dtype == dtypes.bool else Ops.ADD, b))

    def sub(self: Tensor, x: TensorLike, reverse: bool = False) -> Tensor:
        """x - other (broadcast); `reverse` computes other - x.

        >>> from tg_tensor import Tensor
        >>> Tensor([5, 7]).sub(2).tolist()
        [3, 5]
        """
        a, b = self._operands(x, reverse)
        if a.dtype == dtypes.bool:
            raise TypeError("sub: subtracting bool tensors is not supported; use logical_xor")
        return type(self)(a.alu(Ops.SUB, b))

    def mul(self: Tensor, x: TensorLike, reverse: bool = False) -> Tensor:
        """self * x (bools multiply as logical and)."""
        a, b = self._operands(x, reverse)
        return type(self)(a.alu(Ops.AND if a.dtype == dtypes.bool else Ops.MUL, b))

    def div(self: Tensor, x: TensorLike, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
        """True division (ints give the default float); rounding_mode "trunc" or "floor" rounds the result."""
        a, b = self._broadcasted(x, reverse)
        if rounding_mode is not None and rounding_mode not in ("trunc", "floor"):
            raise ArgumentError(f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
        if rounding_mode is not None and dtypes.is_int(a.dtype):
            q = type(self)(a.uop.alu(Ops.IDIV, b.uop))
            return q if rounding_mode == "trunc" else q._floor_fix(a, b)
        ft = dtypes.least_upper_float(a.dtype)
        ret = type(self)(a.cast(ft).uop.alu(Ops.FDIV, b.cast(ft).uop))
        if rounding_mode is None:
            return ret
        return ret.trunc() if rounding_mode == "trunc" else ret.floor()

    def _floor_fix(self: Tensor, a: Tensor, b: Tensor) -> Tensor:
        """Turn C's truncating integer quotient into a floor quotient (x // 0 stays 0, as in numpy)."""
        inexact = (a - self * b).ne(0) & b.ne(0)
        signs_differ = (a < 0).ne(b < 0)
        return (inexact & signs_differ).where(self - 1, self)

    def idiv(self: Tensor, x: TensorLike, reverse: bool = False) -> Tensor:
        """Floor division, like Python's // (floats give floor(a / b))."""
        a, b = self._broadcasted(x, reverse)
        if a.dtype == dtypes.bool:
            a, b = a.cast(dtypes.default_int), b.cast(dtypes.default_int)
        return a.div(b, rounding_mode="floor")

    def mod(self: Tensor, x: TensorLike, reverse: bool = False) -> Tensor:
        """Remainder with the sign of the divisor, like Python's % and numpy's mod."""
        a, b = self._broadcasted(x, reverse)
        if dtypes.is_float(a.dtype):
            return a - b * (a / b).floor()
        if a.dtype == dtypes.bool:
            a, b = a.cast(dtypes.default_int), b.cast(dtypes.default_int)
        r = type(self)(a.uop.alu(Ops.MOD, b.uop))
        return (r.ne(0) & (r < 0).ne(b < 0)).where(r + b, r)

    def pow(self: Tensor, x: TensorLike, reverse: bool = False) -> Tensor:
        """self ** x. An integer scalar exponent multiplies (exact); otherwise exp2(x * log2(self))."""
        if not reverse and isinstance(x, int) and not isinstance(x, bool) and abs(x) <= 64:
            return self._int_pow(x)
        base, expo = self._broadcasted(x, reverse)
        if dtypes.is_int(base.dtype) or base.dtype == dtypes.bool:
            return base._float().pow(expo._float()).round().cast(base.dtype)
        if not reverse and isinstance(x, float) and math.isfinite(x):
            return base._scalar_pow(x)
        return base._float_pow(expo)

    def _scalar_pow(self: Tensor, e: float) -> Tensor:
        """b ** e for a finite Python float exponent: the value from detached b, PyTorch's gradient."""
        if e == 0:
            return self.ones_like() + self * 0  # 1, also for NaN (numpy); d/db = 0
        return custom_gradient(_pow_value(self.detach(), e), (self,), functools.partial(_scalar_pow_grad, e))

    def _float_pow(self: Tensor, expo: Tensor) -> Tensor:
        """b ** e for float tensors: the value as C's pow (and PyTorch) gives it, from detached b and e,
        with PyTorch's gradients, NaN and inf included: d/db = e * b ** (e - 1) (0 where e == 0),
        d/de = b ** e * ln(b) (0 where b == 0 and e >= 0); so a negative base with a fractional exponent has
        a NaN gradient, and 0 ** 0.3 an infinite one, as in PyTorch.
        """
        return custom_gradient(_pow_value(self.detach(), expo.detach()), (self, expo), _pow_grad)

    def _int_pow(self: Tensor, n: int) -> Tensor:
        if n < 0:
            if not dtypes.is_float(self.dtype):  # PyTorch and tinygrad refuse (RuntimeError)
                raise ArgumentError(f"pow: an integer tensor ({self.dtype}) to the negative power {n}; cast to float")
            return self._int_pow(-n).reciprocal()
        ret: Tensor | None = None
        base = self
        while n:
            if n & 1:
                ret = base if ret is None else ret * base
            n >>= 1
            if n:
                base = base * base
        return self.ones_like() if ret is None else ret

    def neg(self: Tensor) -> Tensor:
        """-x (logical not for bool).

        >>> from tg_tensor import Tensor
        >>> Tensor([1, -2]).neg().tolist()
        [-1, 2]
        """
        return self.logical_not() if self.dtype == dtypes.bool else self._unop(Ops.NEG)

    def abs(self: Tensor) -> Tensor:
        """|x| (unsigned and bool tensors are returned as they are).

        >>> from tg_tensor import Tensor
        >>> Tensor([-1.5, 2.0]).abs().tolist()
        [1.5, 2.0]
        """
        if self.dtype == dtypes.bool or dtypes.is_unsigned(self.dtype):
            return self
        # |x| with PyTorch's gradient sign(x): 0 at x == 0 (x - x keeps NaN and gives +0 for -0)
        return (self > 0).where(self, (self < 0).where(-self, self - self))

    def sign(self: Tensor) -> Tensor:
        """-1, 0 or 1 by the sign (0 stays 0; NaN stays NaN)."""
        one = self.ones_like()
        return self.ne(0).where((self < 0).where(-one, one), self * 0)

    def reciprocal(self: Tensor) -> Tensor:
        """1 / x, as a float.

        >>> from tg_tensor import Tensor
        >>> Tensor([2.0, 4.0]).reciprocal().tolist()
        [0.5, 0.25]
        """
        return self._float()._unop(Ops.RECIP)

    def maximum(self: Tensor, x: TensorLike) -> Tensor:
        """The elementwise maximum of this tensor and `x` (broadcast).

        >>> from tg_tensor import Tensor
        >>> Tensor([1, 5]).maximum(3).tolist()
        [3, 5]
        """
        return self._binop(Ops.MAX, x)

    def minimum(self: Tensor, x: TensorLike) -> Tensor:
        """The elementwise minimum of this tensor and `x` (broadcast; NaN wins for floats).

        >>> from tg_tensor import Tensor
        >>> Tensor([1, 5]).minimum(3).tolist()
        [1, 3]
        """
        a, b = self._broadcasted(x)
        if dtypes.is_float(a.dtype):
            return -((-a).maximum(-b))
        return (a < b).where(a, b)

    def clip(self: Tensor, min_: TensorLike = None, max_: TensorLike = None) -> Tensor:
        """Limit values to [min_, max_] (either may be None)."""
        if min_ is None and max_ is None:
            raise ArgumentError("clip: at least one of min_ and max_ must be given")
        # compare-and-select, not maximum/minimum: at a bound the gradient is 1 (PyTorch, tinygrad), not a tie's 0.5
        ret = self if min_ is None else self._select_bound(min_, lower=True)
        return ret if max_ is None else ret._select_bound(max_, lower=False)

    def _select_bound(self: Tensor, bound: TensorLike, lower: bool) -> Tensor:
        a, b = self._broadcasted(bound)
        return (((a < b) if lower else (a > b)) | b.ne(b)).where(b, a)  # a NaN bound gives NaN (numpy, torch)

    def clamp(self: Tensor, min_: TensorLike = None, max_: TensorLike = None) -> Tensor:
        """The same as `clip`: values limited to [min_, max_].

        >>> from tg_tensor import Tensor
        >>> Tensor([-1, 5]).clamp(0, 3).tolist()
        [0, 3]
        """
        return self.clip(min_, max_)

    def where(self: Tensor, x: TensorLike, y: TensorLike) -> Tensor:
        """Elementwise `x if self else y` (self is the condition).

        >>> from tg_tensor import Tensor
        >>> Tensor([True, False]).where(1, 2).tolist()
        [1, 2]
        """
        cond = self if self.dtype == dtypes.bool else self.ne(0)
        a = x if isinstance(x, type(self)) else None
        b = y if isinstance(y, type(self)) else None
        if a is None and b is None:
            sym = isinstance(x, UOp)  # a bound Variable: an int scalar
            a = type(self)(x, device=self.device) if sym else type(self)(const_uop(x, dtypes.from_py(x), self.device))
        a = a if a is not None else b._to_tensor(x)  # type: ignore[union-attr]
        b = b if b is not None else a._to_tensor(y)
        a, b = a._broadcasted(b)
        _same_device(cond, a)
        shape = broadcast_shape(cond.shape, a.shape)
        c, a, b = cond._broadcast_to(shape), a._broadcast_to(shape), b._broadcast_to(shape)
        return type(self)(c.uop.alu(Ops.WHERE, a.uop, b.uop))

    def lerp(self: Tensor, end: TensorLike, weight: TensorLike) -> Tensor:
        """self + (end - self) * weight. A uint8 tensor with a tensor weight stays uint8, computed in 7-bit fixed
        point and rounded as tinygrad (and PyTorch's uint8 resize) do: a + floor(((b - a) * w128 + 64) / 128).

        >>> from tg_tensor import Tensor
        >>> Tensor([1.0, 2.0]).lerp(Tensor([3.0, 6.0]), 0.5).tolist()
        [2.0, 4.0]
        """
        if self.dtype == dtypes.uint8 and isinstance(weight, type(self)):
            w = (weight._float() * 128 + 0.5).cast(dtypes.int32)
            a, b = self.cast(dtypes.int32), self._to_tensor(end).cast(dtypes.int32)
            return (a + ((b - a) * w + 64).div(128, rounding_mode="floor")).cast(dtypes.uint8)
        return self.add(self._to_tensor(end).sub(self).mul(weight))

    # ---- exp, log, roots ----
    def exp(self: Tensor) -> Tensor:
        """e**x, as a float.

        >>> from tg_tensor import Tensor
        >>> Tensor([0.0]).exp().tolist()
        [1.0]
        """
        return (self._float() * INV_LN2)._unop(Ops.EXP2)

    def exp2(self: Tensor) -> Tensor:
        """2**x, as a float.

        >>> from tg_tensor import Tensor
        >>> Tensor([3.0]).exp2().tolist()
        [8.0]
        """
        return self._float()._unop(Ops.EXP2)

    def log(self: Tensor) -> Tensor:
        """The natural logarithm, as a float.

        >>> from tg_tensor import Tensor
        >>> Tensor([1.0]).log().tolist()
        [0.0]
        """
        return self._float()._unop(Ops.LOG2) * LN2

    def log2(self: Tensor) -> Tensor:
        """The base-2 logarithm, as a float.

        >>> from tg_tensor import Tensor
        >>> Tensor([8.0]).log2().tolist()
        [3.0]
        """
        return self._float()._unop(Ops.LOG2)

    def sqrt(self: Tensor) -> Tensor:
        """The square root, as a float.

        >>> from tg_tensor import Tensor
        >>> Tensor([4.0, 9.0]).sqrt().tolist()
        [2.0, 3.0]
        """
        return self._float()._unop(Ops.SQRT)

    def rsqrt(self: Tensor) -> Tensor:
        """1 / sqrt(x).

        >>> from tg_tensor import Tensor
        >>> Tensor([4.0]).rsqrt().tolist()
        [0.5]
        """
        return self.sqrt().reciprocal()

    def square(self: Tensor) -> Tensor:
        """x * x.

        >>> from tg_tensor import Tensor
        >>> Tensor([3, -2]).square().tolist()
        [9, 4]
        """
        return self * self

    # ---- rounding ----
    def trunc(self: Tensor) -> Tensor:
        """Rounded toward zero (ints are returned as they are).

        >>> from tg_tensor import Tensor
        >>> Tensor([-1.5, 1.5]).trunc().tolist()
        [-1.0, 1.0]
        """
        return self if not dtypes.is_float(self.dtype) else self._unop(Ops.TRUNC)

    def floor(self: Tensor) -> Tensor:
        """Rounded down (ints are returned as they are).

        >>> from tg_tensor import Tensor
        >>> Tensor([-1.5, 1.5]).floor().tolist()
        [-2.0, 1.0]
        """
        if not dtypes.is_float(self.dtype):
            return self
        t = self.trunc()
        return (t > self).where(t - 1, t)

    def ceil(self: Tensor) -> Tensor:
        """Rounded up (ints are returned as they are).

        >>> from tg_tensor import Tensor
        >>> Tensor([-1.5, 1.5]).ceil().tolist()
        [-1.0, 2.0]
        """
        if not dtypes.is_float(self.dtype):
            return self
        t = self.trunc()
        return (t < self).where(t + 1, t)

    def round(self: Tensor) -> Tensor:
        """Round half to even, like numpy."""
        if not dtypes.is_float(self.dtype):
            return self
        r = (self + 0.5).floor()
        tie = (r - self).eq(0.5)
        odd = (r - (r * 0.5).floor() * 2).ne(0)
        return (tie & odd).where(r - 1, r)

    def isnan(self: Tensor) -> Tensor:
        """True where x is NaN.

        >>> from tg_tensor import Tensor
        >>> Tensor([1.0, float('nan')]).isnan().tolist()
        [False, True]
        """
        return self.ne(self)

    def isinf(self: Tensor, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
        """True where x is +inf (detect_positive) or -inf (detect_negative).

        >>> from tg_tensor import Tensor
        >>> Tensor([1.0, float('inf')]).isinf().tolist()
        [False, True]
        """
        pos = self.eq(math.inf) if detect_positive else self.zeros_like(dtypes.bool)
        neg = self.eq(-math.inf) if detect_negative else self.zeros_like(dtypes.bool)
        return pos | neg

    def isfinite(self: Tensor) -> Tensor:
        """True where x is neither infinite nor NaN.

        >>> from tg_tensor import Tensor
        >>> Tensor([1.0, float('inf')]).isfinite().tolist()
        [True, False]
        """
        return (self.isinf() | self.isnan()).logical_not()

    # ---- comparisons ----
    def __lt__(self: Tensor, x: TensorLike) -> Tensor:
        return self._binop(Ops.CMPLT, x)

    def __gt__(self: Tensor, x: TensorLike) -> Tensor:
        return self._binop(Ops.CMPLT, x, True)

    def __ge__(self: Tensor, x: TensorLike) -> Tensor:
        a, b = self._broadcasted(x)
        return b._less_or_equal(a)

    def __le__(self: Tensor, x: TensorLike) -> Tensor:
        a, b = self._broadcasted(x)
        return a._less_or_equal(b)

    def _less_or_equal(self: Tensor, x: Tensor) -> Tensor:
        """self <= x; for floats not (x < self) would be True where either side is NaN, so: < or ==."""
        if dtypes.is_float(self.dtype):
            return (self < x).bitwise_or(self.eq(x))
        return (x < self).logical_not()

    def ne(self: Tensor, x: TensorLike) -> Tensor:
        """x != other, elementwise (broadcast).

        >>> from tg_tensor import Tensor
        >>> Tensor([1, 2]).ne(2).tolist()
        [True, False]
        """
        return self._binop(Ops.CMPNE, x)

    def eq(self: Tensor, x: TensorLike) -> Tensor:
        """x == other, elementwise (broadcast).

        >>> from tg_tensor import Tensor
        >>> Tensor([1, 2]).eq(2).tolist()
        [False, True]
        """
        return self.ne(x).logical_not()

    __eq__ = eq  # type: ignore[assignment]

    __ne__ = ne  # type: ignore[assignment]

    # ---- logic and bits ----
    def logical_not(self: Tensor) -> Tensor:
        """not x (any nonzero value is true).

        >>> from tg_tensor import Tensor
        >>> Tensor([0, 3]).logical_not().tolist()
        [True, False]
        """
        b = self if self.dtype == dtypes.bool else self.ne(0)
        return b._binop(Ops.CMPNE, True)

    def logical_and(self: Tensor, x: TensorLike) -> Tensor:
        """x and other, as bools.

        >>> from tg_tensor import Tensor
        >>> Tensor([0, 1]).logical_and(Tensor([1, 1])).tolist()
        [False, True]
        """
        return self.cast(dtypes.bool).bitwise_and(self._to_tensor(x).cast(dtypes.bool))

    def logical_or(self: Tensor, x: TensorLike) -> Tensor:
        """x or other, as bools.

        >>> from tg_tensor import Tensor
        >>> Tensor([0, 1]).logical_or(Tensor([0, 0])).tolist()
        [False, True]
        """
        return self.cast(dtypes.bool).bitwise_or(self._to_tensor(x).cast(dtypes.bool))

    def logical_xor(self: Tensor, x: TensorLike) -> Tensor:
        """x xor other, as bools.

        >>> from tg_tensor import Tensor
        >>> Tensor([0, 1]).logical_xor(Tensor([1, 1])).tolist()
        [True, False]
        """
        return self.cast(dtypes.bool).bitwise_xor(self._to_tensor(x).cast(dtypes.bool))

    def bitwise_and(self: Tensor, x: TensorLike, reverse: bool = False) -> Tensor:
        """x & other (ints and bools).

        >>> from tg_tensor import Tensor
        >>> Tensor([6]).bitwise_and(3).tolist()
        [2]
        """
        self._require_int("bitwise_and")
        return self._binop(Ops.AND, x, reverse)

    def bitwise_or(self: Tensor, x: TensorLike, reverse: bool = False) -> Tensor:
        """x | other (ints and bools).

        >>> from tg_tensor import Tensor
        >>> Tensor([6]).bitwise_or(3).tolist()
        [7]
        """
        self._require_int("bitwise_or")
        return self._binop(Ops.OR, x, reverse)

    def bitwise_xor(self: Tensor, x: TensorLike, reverse: bool = False) -> Tensor:
        """x ^ other (ints and bools).

        >>> from tg_tensor import Tensor
        >>> Tensor([6]).bitwise_xor(3).tolist()
        [5]
        """
        self._require_int("bitwise_xor")
        return self._binop(Ops.XOR, x, reverse)

    def bitwise_not(self: Tensor) -> Tensor:
        """~x (ints and bools).

        >>> from tg_tensor import Tensor
        >>> Tensor([0, 5]).bitwise_not().tolist()
        [-1, -6]
        """
        self._require_int("bitwise_not")
        return self.logical_not() if self.dtype == dtypes.bool else self._binop(Ops.XOR, -1)

    def _shift(self: Tensor, op: Ops, x: TensorLike, reverse: bool, what: str) -> Tensor:
        self._require_int(what)
        if isinstance(x, float) or (isinstance(x, type(self)) and dtypes.is_float(x.dtype)):
            raise DTypeError(f"{what}: the shift amount must be an integer, got {x!r}")
        return self._binop(op, x, reverse)

    def lshift(self: Tensor, x: TensorLike, reverse: bool = False) -> Tensor:
        """x << other (ints).

        >>> from tg_tensor import Tensor
        >>> Tensor([1, 3]).lshift(2).tolist()
        [4, 12]
        """
        return self._shift(Ops.SHL, x, reverse, "lshift")

    def rshift(self: Tensor, x: TensorLike, reverse: bool = False) -> Tensor:
        """x >> other (ints).

        >>> from tg_tensor import Tensor
        >>> Tensor([4, 12]).rshift(2).tolist()
        [1, 3]
        """
        return self._shift(Ops.SHR, x, reverse, "rshift")

    # ---- operators (the methods themselves: no extra call on every `a + b`), then the reversed ones ----
    __add__, __sub__, __mul__, __truediv__, __floordiv__, __mod__, __pow__ = add, sub, mul, div, idiv, mod, pow
    __and__, __or__, __xor__, __lshift__, __rshift__ = bitwise_and, bitwise_or, bitwise_xor, lshift, rshift
    __neg__, __abs__, __invert__ = neg, abs, bitwise_not

    __radd__, __rsub__, __rmul__, __rtruediv__ = _reflected(add), _reflected(sub), _reflected(mul), _reflected(div)
    __rfloordiv__, __rmod__, __rpow__ = _reflected(idiv), _reflected(mod), _reflected(pow)
    __rand__, __ror__, __rxor__ = _reflected(bitwise_and), _reflected(bitwise_or), _reflected(bitwise_xor)

    # ---- casts ----
    def cast(self: Tensor, dtype: DType | str) -> Tensor:
        """This tensor as `dtype` (a DType or its name, e.g. "uint8")."""
        dtype = to_dtype(dtype)
        if self.dtype == dtype:
            return self
        if self.uop.op is Ops.EXPAND:  # cast before the broadcast: once per element, and a matmul operand narrowed to
            src = self.uop.src[0]  # 16 bits (the gradient reaching an autocast product) stays a 16-bit read
            return type(self)(src.cast(dtype).expand(self.uop.arg))
        return type(self)(self.uop.cast(dtype))

    def bitcast(self: Tensor, dtype: DType | str) -> Tensor:
        """Reinterpret the bits as `dtype` (same item size)."""
        dtype = to_dtype(dtype)
        return self if self.dtype == dtype else type(self)(self.uop.bitcast(dtype))

    def float(self: Tensor) -> Tensor:
        """Cast to float32.

        >>> from tg_tensor import Tensor
        >>> Tensor([1]).float().dtype
        dtypes.float
        """
        return self.cast(dtypes.float32)

    def half(self: Tensor) -> Tensor:
        """Cast to float16.

        >>> from tg_tensor import Tensor
        >>> Tensor([1]).half().dtype
        dtypes.half
        """
        return self.cast(dtypes.float16)

    def double(self: Tensor) -> Tensor:
        """Cast to float64.

        >>> from tg_tensor import Tensor
        >>> Tensor([1]).double().dtype
        dtypes.double
        """
        return self.cast(dtypes.float64)

    def int(self: Tensor) -> Tensor:
        """Cast to int32 (floats truncate toward zero).

        >>> from tg_tensor import Tensor
        >>> Tensor([1.7, -1.7]).int().tolist()
        [1, -1]
        """
        return self.cast(dtypes.int32)

    def long(self: Tensor) -> Tensor:
        """Cast to int64.

        >>> from tg_tensor import Tensor
        >>> Tensor([1]).long().dtype
        dtypes.int64
        """
        return self.cast(dtypes.int64)

    def bool(self: Tensor) -> Tensor:
        """Cast to bool (nonzero is True).

        >>> from tg_tensor import Tensor
        >>> Tensor([0, 2]).bool().tolist()
        [False, True]
        """
        return self.cast(dtypes.bool)


def _pow_value(b: Tensor, e: Tensor | float) -> Tensor:
    """b ** e as C's pow: exp2(e * log2|b|) with the sign of an odd integer power, NaN for a negative finite
    base and a fractional exponent, 1 for e == 0 (any b), b == 1 (any e) and (-1) ** +-inf."""
    if isinstance(e, float) and e == 0:
        return b.ones_like()
    mag = (b.abs().log2() * e).exp2()  # 0 ** e: exp2(-inf * e) is 0 or inf; inf ** e likewise
    if isinstance(e, float):
        if e.is_integer():
            signed = (b < 0).where(-mag, mag) if int(e) % 2 else mag
        else:  # a negative finite base gives NaN by itself (log2 of a negative); no NaN constant in the graph
            signed = (b < 0).where(b.eq(-math.inf).where(mag, (b.log2() * e).exp2()), mag)
        return b.eq(1).where(1.0, signed)
    is_int = e.eq(e.trunc())
    odd = is_int & (e.abs() % 2).eq(1)
    frac = b.eq(-math.inf).where(mag, (b.log2() * e).exp2())  # NaN from log2 of a negative finite base
    signed = (b < 0).where(is_int.where(odd.where(-mag, mag), frac), mag)
    one = e.eq(0) | b.eq(1) | (b.eq(-1) & e.abs().eq(math.inf))
    return one.where(1.0, signed)


def _pow_grad(ret: Tensor, g: Tensor, b: Tensor, e: Tensor) -> tuple[Tensor, Tensor]:
    """PyTorch's pow_backward_self and pow_backward_exponent (b and e are the broadcast operands)."""
    bd, ed = b.detach(), e.detach()
    gb = ed.eq(0).where(0.0, g * ed * _pow_value(bd, ed - 1))
    ge = (bd.eq(0) & (ed >= 0)).where(0.0, g * ret.detach() * bd.log())
    return gb, ge


def _scalar_pow_grad(e: float, ret: Tensor, g: Tensor, b: Tensor) -> tuple[Tensor]:
    return (g * e * _pow_value(b.detach(), e - 1),)
