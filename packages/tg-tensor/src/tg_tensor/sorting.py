# mypy: disable-error-code="misc"
# (mixin methods annotate `self: Tensor`, the class they are mixed into; mypy flags that as "misc")
"""Sorting and running reductions with indices: sort, argsort, topk, cummax, cummin, cumprod, logcumsumexp.

A sort ranks every element by counting the elements that come before it (smaller, or equal with a
smaller index), then places each at its rank: O(n^2) work per sorted row, in two kernels, on every
device. Ties keep their original order (a stable sort, as tinygrad's results); NaN sorts last.

>>> from tg_tensor import Tensor
>>> values, indices = Tensor([3.0, 1.0, 2.0]).sort()
>>> values.tolist(), indices.tolist()
([1.0, 2.0, 3.0], [1, 2, 0])
>>> Tensor([1, 3, 2]).topk(2)[0].tolist()
[3, 2]
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tg_tensor.engine.util import normalize_axis, sum_acc_dtype
from tg_uop import dtypes

if TYPE_CHECKING:
    from tg_tensor.tensor import Tensor


def _before(a: Tensor, b: Tensor, descending: bool) -> Tensor:
    """Does value `b` sort strictly before value `a` (NaN counts as the largest value)?"""
    first, second = (a, b) if descending else (b, a)  # ascending: b < a
    less = first < second
    return less | (second.isnan() & first.isnan().logical_not()) if dtypes.is_float(a.dtype) else less


def _same(a: Tensor, b: Tensor) -> Tensor:
    eq = a.eq(b)
    return eq | (a.isnan() & b.isnan()) if dtypes.is_float(a.dtype) else eq


def _lower(like: Tensor, n: int, strict: bool) -> Tensor:
    """The (n, n) bool mask of j < i (strict) or j <= i, built by tril (never by comparing a node with itself)."""
    ones = type(like).ones(n, n, dtype=dtypes.bool, device=like.device)
    return ones.tril(-1 if strict else 0)


class SortingMixin:
    """sort, argsort, topk and the cumulative reductions."""

    __slots__ = ()

    def _rank_last(self: Tensor, descending: bool) -> Tensor:
        """For x of shape (..., n): the position (int32) each element takes when its last axis is sorted."""
        n = int(self.shape[-1])
        a, b = self.unsqueeze(-1), self.unsqueeze(-2)  # a: element i (rows), b: element j (columns)
        earlier = _lower(self, n, strict=True)  # (i, j): j < i
        comes_first = _before(a, b, descending) | (_same(a, b) & earlier)
        return comes_first.cast(dtypes.int32).sum(-1)

    def sort(self: Tensor, dim: int = -1, descending: bool = False) -> tuple[Tensor, Tensor]:
        """The values sorted along `dim` and the indices (int32) they came from; ties keep their order.

        >>> from tg_tensor import Tensor
        >>> Tensor([[2, 1], [0, 5]]).sort(dim=0, descending=True)[1].tolist()
        [[0, 1], [1, 0]]
        """
        d = normalize_axis(dim, self.ndim)
        if self.ndim == 0:
            return self, type(self).full((), 0, dtypes.int32, self.device)
        x = self.transpose(d, -1)
        n = int(x.shape[-1])
        rank = x._rank_last(descending).unsqueeze(-1)  # (..., n_i, 1)
        slot = type(self).arange(n, device=self.device, dtype=dtypes.int32)  # (n_k,)
        placed = rank.eq(slot)  # (..., n_i, n_k): element i goes to slot k
        src = type(self).arange(n, device=self.device, dtype=dtypes.int32).reshape(n, 1)
        indices = placed.where(src, 0).sum(-2, dtype=dtypes.int32)
        acc = dtypes.int32 if x.dtype == dtypes.bool else x.dtype
        values = placed.where(x.unsqueeze(-1).cast(acc), 0).sum(-2, dtype=acc).cast(x.dtype)
        return values.transpose(d, -1), indices.transpose(d, -1)

    def argsort(self: Tensor, dim: int = -1, descending: bool = False) -> Tensor:
        """The indices that sort the tensor along `dim` (stable).

        >>> from tg_tensor import Tensor
        >>> Tensor([3, 1, 2]).argsort().tolist()
        [1, 2, 0]
        """
        return self.sort(dim, descending)[1]

    def topk(self: Tensor, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True) -> tuple[Tensor, Tensor]:
        """The `k` largest (or smallest) values along `dim` and their indices, in sorted order.

        >>> from tg_tensor import Tensor
        >>> Tensor([1, 3, 2]).topk(1, largest=False)[1].tolist()
        [0]
        """
        d = normalize_axis(dim, self.ndim)
        n = int(self.shape[d]) if self.ndim else 1
        if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= n:
            raise RuntimeError(f"topk: k={k!r} is out of range for dim {dim} of size {n} (shape {self.shape})")
        values, indices = self.sort(d, descending=largest)
        if self.ndim == 0:
            return values, indices
        return values._slice(d, 0, k), indices._slice(d, 0, k)

    # ---- running reductions ----
    def _running_arg(self: Tensor, axis: int, largest: bool) -> tuple[Tensor, Tensor]:
        """Running max/min with the index of its first occurrence (as tinygrad)."""
        ax = normalize_axis(axis, self.ndim)
        if self.ndim == 0 or self.numel() == 0:
            return self, type(self).full(self.shape, 0, dtypes.int32, self.device)
        x = self.transpose(ax, -1)
        n = int(x.shape[-1])
        key = x if largest else x._inverted()
        lowest = -math.inf if dtypes.is_float(key.dtype) else dtypes.min(key.dtype)
        values = key._prefix(-1, lowest, lambda w: w.max(-1))
        idx = type(self).arange(n, device=self.device, dtype=dtypes.int32)
        mask = _lower(self, n, strict=False)  # (i, j): j <= i
        hit = mask & key.unsqueeze(-2).eq(values.unsqueeze(-1))  # (..., i, j): x_j equals the running value at i
        first = hit.where(n - idx.reshape(1, n), 0).max(-1)
        indices = (n - first).cast(dtypes.int32)
        values = values if largest else values._inverted()
        return values.transpose(ax, -1), indices.transpose(ax, -1)

    def cummax(self: Tensor, axis: int = 0) -> tuple[Tensor, Tensor]:
        """The running maximum along `axis` and the index where it first occurred (as tinygrad).

        >>> from tg_tensor import Tensor
        >>> values, indices = Tensor([1, 3, 2, 3]).cummax()
        >>> values.tolist(), indices.tolist()
        ([1, 3, 3, 3], [0, 1, 1, 1])
        """
        return self._running_arg(axis, True)

    def cummin(self: Tensor, axis: int = 0) -> tuple[Tensor, Tensor]:
        """The running minimum along `axis` and the index where it first occurred.

        >>> from tg_tensor import Tensor
        >>> Tensor([3, 1, 2]).cummin()[0].tolist()
        [3, 1, 1]
        """
        return self._running_arg(axis, False)

    def cumprod(self: Tensor, axis: int) -> Tensor:
        """The running product along `axis`, in the tensor's dtype (as tinygrad; ints wrap on overflow).

        >>> from tg_tensor import Tensor
        >>> Tensor([1, 2, 3]).cumprod(0).tolist()
        [1, 2, 6]
        """
        normalize_axis(axis, self.ndim)  # (checked before the shortcut)
        if self.ndim == 0 or self.numel() == 0:
            return self
        acc = self.dtype if dtypes.is_float(self.dtype) else sum_acc_dtype(self.dtype)
        # keeps the dtype (ints wrap), as tinygrad
        return self._prefix(axis, 1, lambda w: w.prod(-1, dtype=acc).cast(self.dtype))

    def logcumsumexp(self: Tensor, axis: int = 0) -> Tensor:
        """log(cumsum(exp(x))) along `axis`, computed stably (each prefix is shifted by its own maximum).

        >>> from tg_tensor import Tensor
        >>> round(Tensor([0.0, 0.0]).logcumsumexp().tolist()[1], 4)
        0.6931
        """
        x = self._float()
        normalize_axis(axis, self.ndim)  # (checked before the shortcut)
        if self.ndim == 0 or self.numel() == 0:  # (and an empty axis has no maximum to shift by)
            return x
        return x._prefix(axis, -math.inf, lambda w: w.logsumexp(-1))
