# mypy: disable-error-code="misc"
# (mixin methods annotate `self: Tensor`, the class they are mixed into; mypy flags that as "misc")
"""Reductions: sum, prod, max, min, mean, var, std, arg-reductions, softmax family, cumulative ops.

`axis` may be an int, a tuple, None (all axes) or negative; `keepdim` keeps reduced axes as size 1.

>>> from tg_tensor import Tensor
>>> Tensor([[1, 2], [3, 4]]).sum(axis=0).tolist()
[4, 6]
>>> Tensor([3.0, 1.0, 2.0]).argmax().item()
0
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from tg_tensor.engine.util import resolve_axes, sum_acc_dtype, to_dtype
from tg_uop import DType, Ops, dtypes
from tg_uop.alu import cast_const, exec_alu
from tg_uop.dtype import ConstType
from tg_uop.helpers import prod

if TYPE_CHECKING:
    from tg_tensor.tensor import Tensor

Axis = int | Sequence[int] | None
_UNIFORM_VIEWS = (Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.SHRINK, Ops.FLIP)  # PAD adds other values


def _uniform_value(t: Tensor, axes: tuple[int, ...], op: Ops) -> ConstType | None:
    """The reduction of a tensor whose elements are all one constant (Tensor.full/ones seen through views).

    A sum of n copies of c is c * n, computed once in the tensor's dtype (exact, and wrapping as the loop
    would for ints); a max is c. None when the tensor is not such a constant.
    """
    if not all(isinstance(s, int) for s in t.shape):
        return None  # symbolic shapes keep their kernels
    u, casts = t.uop, []
    while u.op in _UNIFORM_VIEWS or u.op is Ops.CAST:
        if u.op is Ops.CAST:
            casts.append(u.dtype)
        u = u.src[0]
    if u.op is not Ops.CONST or u.src[1:]:
        return None
    c: ConstType = u.arg
    for dt in reversed(casts):  # innermost cast first
        c = cast_const(c, dt)
    if op is Ops.MAX:
        return c
    n = int(prod(t.shape[a] for a in axes))
    if dtypes.is_float(t.dtype):  # a sum starts from +0.0 (numpy): n times -0.0 sums to 0.0
        return exec_alu(Ops.ADD, t.dtype, (exec_alu(Ops.MUL, t.dtype, (c, float(n))), 0.0))
    return exec_alu(Ops.MUL, t.dtype, (c, n))


class ReduceMixin:
    """Reductions over axes."""

    __slots__ = ()

    def _reduce(self: Tensor, op: Ops, axis: Axis, keepdim: bool) -> Tensor:
        axes = resolve_axes(axis, self.ndim)
        if self.ndim == 0:
            return self
        if any(self.shape[a] == 0 for a in axes):  # an empty reduction is its identity (max has none)
            if op is Ops.MAX:
                raise ValueError(f"max/min: cannot reduce over a size-0 axis of shape {self.shape}")
            # the identity, as a pad of the empty axes to size 1: the graph still reads self, so its
            # gradient is a zero-size tensor of zeros (not a target missing from the graph)
            pads = tuple((0, 1) if s == 0 and i in axes else (0, 0) for i, s in enumerate(self.shape))
            ret = type(self)(self.pad(pads, value=0 if op is Ops.ADD else 1).uop.r(op, axes))
        elif op in (Ops.ADD, Ops.MAX) and (value := _uniform_value(self, axes, op)) is not None:
            kept = tuple(1 if i in axes else s for i, s in enumerate(self.shape))
            ret = type(self).full(kept, value, self.dtype, self.device)  # no loop over a constant
        else:
            red = self.uop.r(op, axes)
            if red is self.uop and op is Ops.ADD and dtypes.is_float(self.dtype):
                red = (self + 0.0).uop  # only size-1 axes: still a sum from +0.0 (sum([-0.0]) is 0.0, as numpy)
            ret = type(self)(red)
        return self._drop_axes(ret, axes, keepdim)

    def _drop_axes(self: Tensor, ret: Tensor, axes: tuple[int, ...], keepdim: bool) -> Tensor:
        """`ret`, a reduction of this tensor over `axes` with the axes kept (size 1), without them unless keepdim."""
        out_shape = tuple([s for i, s in enumerate(self.shape) if i not in axes])  # (valid by construction)
        return ret if keepdim else type(self)(ret.uop.reshape(out_shape))

    def sum(self: Tensor, axis: Axis = None, keepdim: bool = False, dtype: DType | str | None = None) -> Tensor:
        """Sum over `axis`. Small ints and bools accumulate in int32, halfs in float32 (and come back as half).

        >>> from tg_tensor import Tensor
        >>> Tensor([[1.0, 2.0]]).sum(-1, keepdim=True).tolist()
        [[3.0]]
        """
        acc = sum_acc_dtype(self.dtype) if dtype is None else to_dtype(dtype)
        ret = self.cast(acc)._reduce(Ops.ADD, axis, keepdim)
        return ret.cast(self.dtype) if dtype is None and self.dtype in (dtypes.float16, dtypes.bfloat16) else ret

    def prod(self: Tensor, axis: Axis = None, keepdim: bool = False, dtype: DType | str | None = None) -> Tensor:
        """Product over `axis` (ints and bools in int32 at least, floats in float32 at least, or `dtype`).

        >>> from tg_tensor import Tensor
        >>> Tensor([[1, 2], [3, 4]]).prod(axis=1).tolist()
        [2, 12]
        """
        acc = sum_acc_dtype(self.dtype) if dtype is None else to_dtype(dtype)
        return self.cast(acc)._reduce(Ops.MUL, axis, keepdim)

    def max(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
        """The largest value over `axis` (all axes when None).

        >>> from tg_tensor import Tensor
        >>> Tensor([[1, 5], [7, 2]]).max(axis=1).tolist()
        [5, 7]
        """
        return self._reduce(Ops.MAX, axis, keepdim)

    def min(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
        """The smallest value over `axis` (all axes when None).

        >>> from tg_tensor import Tensor
        >>> Tensor([[1, 5], [7, 2]]).min(axis=1).tolist()
        [1, 2]
        """
        return self._inverted()._reduce(Ops.MAX, axis, keepdim)._inverted()

    def _inverted(self: Tensor) -> Tensor:
        """An order-reversing bijection: -x for floats, ~x for ints, not x for bools."""
        return -self if dtypes.is_float(self.dtype) else self.bitwise_not()

    def mean(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
        """The average over `axis` (ints give floats; an empty axis gives NaN).

        The division happens before the axes are dropped, so `x.mean()` and the mean inside `x.std()`
        are one node (one kernel).
        """
        axes = resolve_axes(axis, self.ndim)
        x = self._float()
        count = prod(self.shape[a] for a in axes)
        total = x.sum(axes, keepdim=True)
        ret = total / count if count else total * math.nan
        return self._drop_axes(ret.cast(x.dtype), axes, keepdim)

    def var(self: Tensor, axis: Axis = None, keepdim: bool = False, correction: int | float = 1) -> Tensor:
        """Variance with `correction` subtracted from the count (1: sample variance, 0: population)."""
        axes = resolve_axes(axis, self.ndim)
        x = self._float()
        dev = x - x.mean(axes, keepdim=True)
        n = prod(self.shape[a] for a in axes)
        return (dev * dev).sum(axes, keepdim=keepdim).div(max(0, n - correction))

    def std(self: Tensor, axis: Axis = None, keepdim: bool = False, correction: int | float = 1) -> Tensor:
        """The standard deviation over `axis` (Bessel's correction by default).

        >>> from tg_tensor import Tensor
        >>> Tensor([1.0, 3.0]).std().item()
        1.4142135381698608
        """
        return self.var(axis, keepdim, correction).sqrt()

    def var_mean(
        self: Tensor, axis: Axis = None, keepdim: bool = False, correction: int | float = 1
    ) -> tuple[Tensor, Tensor]:
        """(variance, mean) over `axis`.

        >>> from tg_tensor import Tensor
        >>> [t.item() for t in Tensor([1.0, 3.0]).var_mean()]
        [2.0, 2.0]
        """
        return self.var(axis, keepdim, correction), self.mean(axis, keepdim)

    def std_mean(
        self: Tensor, axis: Axis = None, keepdim: bool = False, correction: int | float = 1
    ) -> tuple[Tensor, Tensor]:
        """(standard deviation, mean) over `axis`.

        >>> from tg_tensor import Tensor
        >>> [round(t.item(), 4) for t in Tensor([1.0, 3.0]).std_mean()]
        [1.4142, 2.0]
        """
        return self.std(axis, keepdim, correction), self.mean(axis, keepdim)

    def any(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
        """True where any element along `axis` is nonzero.

        >>> from tg_tensor import Tensor
        >>> Tensor([[0, 1], [0, 0]]).any(axis=1).tolist()
        [True, False]
        """
        if not self.numel():  # False, in the shape the reduction over `axis` has
            axes = resolve_axes(axis, self.ndim)
            shape = tuple(1 if i in axes else s for i, s in enumerate(self.shape) if keepdim or i not in axes)
            return type(self).full(shape, False, dtypes.bool, self.device)
        return self.cast(dtypes.bool)._reduce(Ops.MAX, axis, keepdim)

    def all(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
        """True where every element along `axis` is nonzero.

        >>> from tg_tensor import Tensor
        >>> Tensor([[1, 1], [0, 1]]).all(axis=1).tolist()
        [True, False]
        """
        return self.logical_not().any(axis, keepdim).logical_not()

    # ---- arg reductions ----
    def argmax(self: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor:
        """The index of the first maximum along `axis` (of the flattened tensor when None).

        >>> from tg_tensor import Tensor
        >>> Tensor([[1, 5], [7, 2]]).argmax(axis=1).tolist()
        [1, 0]
        """
        if axis is None:
            return self.flatten().argmax(0, keepdim=False)
        ax = resolve_axes(axis, self.ndim)[0]
        n = int(self.shape[ax]) if self.ndim else 1
        if n == 0:
            raise ValueError(f"argmax/argmin: axis {axis} of shape {self.shape} is empty")
        is_max = self.eq(self.max(ax, keepdim=True))
        along_ax = tuple(n if i == ax else 1 for i in range(self.ndim))
        countdown = type(self).arange(n, 0, -1, device=self.device).reshape(along_ax)
        first = (is_max.where(countdown, 0)).max(ax, keepdim=keepdim)
        return (n - first).cast(dtypes.int32)

    def argmin(self: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor:
        """The index of the smallest value along `axis` (the first one on ties).

        >>> from tg_tensor import Tensor
        >>> Tensor([3, 1, 2]).argmin().item()
        1
        """
        return self._inverted().argmax(axis, keepdim)

    # ---- softmax family ----
    def logsumexp(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
        """log(sum(exp(x))) computed stably by shifting by the maximum."""
        m = self.max(axis, keepdim=True).detach()
        m = m.isinf().where(0.0, m)
        ret = (self - m).exp().sum(axis, keepdim=True).log() + m
        return self._drop_axes(ret, resolve_axes(axis, self.ndim), keepdim)

    def softmax(self: Tensor, axis: int = -1, dtype: DType | str | None = None) -> Tensor:
        """exp(x) / sum(exp(x)) along `axis` (shifted by the maximum for stability); `dtype` casts the input first."""
        x = (self.cast(dtype) if dtype is not None else self)._float()
        if x.numel() == 0:  # nothing to normalize (and no max of an empty axis)
            return x
        e = (x - x.max(axis, keepdim=True).detach()).exp()
        return e / e.sum(axis, keepdim=True)

    def log_softmax(self: Tensor, axis: int = -1, dtype: DType | str | None = None) -> Tensor:
        """x - logsumexp(x) along `axis`; `dtype` casts the input first."""
        x = (self.cast(dtype) if dtype is not None else self)._float()
        if x.numel() == 0:
            return x
        shifted = x - x.max(axis, keepdim=True).detach()
        return shifted - shifted.exp().sum(axis, keepdim=True).log()

    # ---- cumulative ----
    def _prefix(self: Tensor, axis: int, fill: ConstType, reduce: Callable[[Tensor], Tensor]) -> Tensor:
        """out[..., i] = reduce over j <= i of x[..., j] along `axis` (O(n^2)): `reduce` reduces the last axis of
        (..., i, j), which holds x_j where j <= i and `fill` elsewhere."""
        ax = resolve_axes(axis, self.ndim)[0]
        x = self.transpose(ax, -1) if self.ndim else self.reshape(1)
        n = int(x.shape[-1])
        # j <= i; by tril, as `arange(n) >= arange(n)` compares one node with itself when n == 1 (a fold that loses it)
        mask = type(self).ones(n, n, dtype=dtypes.bool, device=self.device).tril()
        ret = reduce(mask.where(x.unsqueeze(-2).expand(*x.shape[:-1], n, n), fill))
        return ret.transpose(ax, -1) if self.ndim else ret.reshape(())

    def cumsum(self: Tensor, axis: int = 0) -> Tensor:
        """Running sum along `axis`.

        >>> from tg_tensor import Tensor
        >>> Tensor([1, 2, 3]).cumsum().tolist()
        [1, 3, 6]
        """
        return self._prefix(axis, 0, lambda w: w.sum(-1, dtype=w.dtype if dtypes.is_float(w.dtype) else None))
