# mypy: disable-error-code="misc"
# (mixin methods annotate `self: Tensor`, the class they are mixed into; mypy flags that as "misc")
"""Selections whose output depends on the data: masked_select, nonzero, scatter_reduce, max_unpool2d,
multinomial, randperm, and the losses and helpers that pick by index (nll_loss).

An element is placed at its output slot through a comparison with the slot number (one-hot, then a
sum), so each runs as ordinary kernels on every device. With `size=None`, masked_select and nonzero
read the count back to the host first (their output shape depends on it), as in tinygrad.

>>> from tg_tensor import Tensor
>>> Tensor([1, 2, 3]).masked_select(Tensor([True, False, True])).tolist()
[1, 3]
>>> Tensor([[0, 1], [2, 0]]).nonzero().tolist()
[[0, 1], [1, 0]]
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from tg_tensor.conv import _tuple
from tg_tensor.engine.util import DTypeError, broadcast_shape, normalize_axis, to_dtype
from tg_uop import ConstType, DType, dtypes

if TYPE_CHECKING:
    from tg_tensor.tensor import Tensor

REDUCES = ("sum", "prod", "mean", "amax", "amin")
RANDPERM_HOST_ABOVE = 2048  # longer permutations argsort their device-drawn keys on the host (device sort: O(n^2))


def _place(values: Tensor, keep: Tensor, size: int, fill: ConstType) -> Tensor:
    """values[j] for the kept j, in order, in `size` slots (missing slots `fill`); values (n, ...), keep (n,)."""
    n = int(keep.shape[0])
    slot = keep.cast(dtypes.int32).cumsum(0) - 1  # the output slot of each kept element
    k = type(values).arange(size, device=values.device, dtype=dtypes.int32)
    hit = keep.reshape(n, 1) & slot.reshape(n, 1).eq(k.reshape(1, size))  # (n, size)
    hit = hit.reshape(n, size, *([1] * (values.ndim - 1)))
    acc = dtypes.int32 if values.dtype == dtypes.bool else values.dtype
    picked = hit.where(values.cast(acc).unsqueeze(1), 0).sum(0, dtype=acc).cast(values.dtype)
    filled = (k < keep.cast(dtypes.int32).sum()).reshape(size, *([1] * (values.ndim - 1)))
    return filled.where(picked, fill).cast(values.dtype)


def _check_size(size: int | None, what: str) -> None:
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        raise ValueError(f"{what}: size must be an int >= 0 or None, got {size!r}")


class SelectionMixin:
    """Data-dependent selections, index-picking losses, and random permutations."""

    __slots__ = ()

    def masked_select(self: Tensor, mask: Tensor, size: int | None = None, fill_value: ConstType = 0) -> Tensor:
        """The elements where `mask` (broadcast to self) is True, as a 1-D tensor in row-major order.

        `size` fixes the output length (padded with `fill_value` or cut), so no value is read back.

        >>> from tg_tensor import Tensor
        >>> Tensor([[1, 2], [3, 4]]).masked_select(Tensor([False, True]), size=3, fill_value=-1).tolist()
        [2, 4, -1]
        """
        if not isinstance(mask, type(self)) or mask.dtype != dtypes.bool:
            got = mask.dtype if isinstance(mask, type(self)) else type(mask).__name__
            raise RuntimeError(f"masked_select: expected a bool mask tensor, got {got}")
        _check_size(size, "masked_select")
        shape = broadcast_shape(self.shape, mask.shape)
        x, keep = self._broadcast_to(shape), mask._broadcast_to(shape).flatten()
        n_out = int(keep.cast(dtypes.int32).sum().item()) if size is None else size
        if n_out == 0 or keep.numel() == 0:
            return type(self).full((n_out,), fill_value, self.dtype, self.device)
        return _place(x.flatten(), keep, n_out, fill_value)

    def nonzero(self: Tensor, size: int | None = None, fill_value: ConstType = 0) -> Tensor:
        """The indices (int32, shape (count, ndim)) of the non-zero elements in row-major order.

        >>> from tg_tensor import Tensor
        >>> Tensor([1, 0, 2]).nonzero().tolist()
        [[0], [2]]
        """
        _check_size(size, "nonzero")
        keep = self.ne(0).flatten() if self.ndim else self.ne(0).reshape(1)
        n_out = int(keep.cast(dtypes.int32).sum().item()) if size is None else size
        if n_out == 0 or self.numel() == 0 or self.ndim == 0:
            return type(self).full((n_out, self.ndim), fill_value, dtypes.int32, self.device)
        ranges = [type(self).arange(int(s), device=self.device, dtype=dtypes.int32) for s in self.shape]
        coords = [c.flatten() for c in ranges[0].meshgrid(*ranges[1:])]  # each element's index along each dim
        return _place(type(self).stack(*coords, dim=1), keep, n_out, fill_value)

    def scatter_reduce(
        self: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, include_self: bool = True
    ) -> Tensor:
        """Reduce `src` into self along `dim` at `index` ("sum", "prod", "mean", "amax", "amin"), as torch.

        For dim 0: out[index[i][j]][j] = reduce(out[index[i][j]][j], src[i][j]).

        >>> from tg_tensor import Tensor
        >>> Tensor([0.0, 0.0]).scatter_reduce(0, Tensor([0, 0, 1]), Tensor([1.0, 2.0, 3.0]), "sum").tolist()
        [3.0, 3.0]
        """
        d = self._check_scatter(dim, index, src, reduce)
        if reduce == "mean" and not dtypes.is_float(self.dtype):  # a mean of ints is a float, as tinygrad
            return self._float().scatter_reduce(dim, index, src._float(), reduce, include_self)
        n = int(self.shape[d]) if self.ndim else 1
        x, idx, s = (self, index, src) if self.ndim else (self.reshape(1), index.reshape(1), src.reshape(1))
        s = s.shrink(tuple((0, int(i)) for i in idx.shape)).cast(self.dtype)
        # hit[..., i, ..., k]: element i along dim goes to slot k
        hit = idx.unsqueeze(-1).eq(type(self).arange(n, device=self.device, dtype=idx.dtype))
        wide = s.unsqueeze(-1)
        count = hit.cast(dtypes.int32).sum(d).unsqueeze(d).transpose(d, -1).squeeze(-1)
        if reduce in ("sum", "mean"):
            part = hit.where(wide, 0).sum(d, dtype=_acc(self.dtype))
        elif reduce == "prod":
            part = hit.where(wide, 1).prod(d, dtype=_acc(self.dtype))
        else:
            lowest = -math.inf if dtypes.is_float(self.dtype) else dtypes.min(self.dtype)
            key = wide if reduce == "amax" else wide._inverted()
            part = hit.where(key, lowest).max(d)
            part = part if reduce == "amax" else part._inverted()
        part = part.unsqueeze(d).transpose(d, -1).squeeze(-1)  # the slot axis back at dim
        pads = tuple((0, int(a) - int(b)) for a, b in zip(x.shape, part.shape))
        part, count = part.pad(pads), count.pad(pads)
        ret = _combine(x, part.cast(_acc(self.dtype)), count, reduce, include_self).cast(self.dtype)
        return ret if self.ndim else ret.reshape(())

    def _check_scatter(self: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str) -> int:
        if reduce not in REDUCES:
            raise RuntimeError(f"scatter_reduce: reduce must be one of {REDUCES}, got {reduce!r}")
        if not isinstance(index, type(self)) or not dtypes.is_int(index.dtype):
            raise RuntimeError(f"scatter_reduce: index must be an integer tensor, got {getattr(index, 'dtype', index)}")
        if not isinstance(src, type(self)):
            raise TypeError(f"scatter_reduce: src must be a Tensor, got {type(src).__name__}")
        d = normalize_axis(dim, self.ndim)
        if src.dtype != self.dtype:  # PyTorch and tinygrad refuse to convert here
            raise DTypeError(f"scatter_reduce: src dtype {src.dtype} differs from self dtype {self.dtype}")
        if not (index.ndim == self.ndim == src.ndim):
            raise RuntimeError(
                f"scatter_reduce: index {index.shape}, self {self.shape} and src {src.shape} need the same ndim"
            )
        for i, (a, b, c) in enumerate(zip(index.shape, self.shape, src.shape)):
            if a > c or (i != d and a > b):
                raise RuntimeError(
                    f"scatter_reduce: index {index.shape} does not fit src {src.shape} / self {self.shape} at dim {i}"
                )
        return d

    def max_unpool2d(
        self: Tensor,
        indices: Tensor,
        kernel_size: Any = (2, 2),
        stride: Any = None,
        dilation: Any = 1,
        padding: Any = 0,
        output_size: Any = None,
    ) -> Tensor:
        """The partial inverse of max_pool2d(return_indices=True): each value back at its flat spatial index.

        >>> from tg_tensor import Tensor
        >>> x = Tensor([[[[1.0, 2.0], [3.0, 4.0]]]])
        >>> v, i = x.max_pool2d(return_indices=True)
        >>> v.max_unpool2d(i).tolist()
        [[[[0.0, 0.0], [0.0, 4.0]]]]
        """
        if indices.shape != self.shape:
            raise ValueError(f"max_unpool2d: indices {indices.shape} must have the shape of the input {self.shape}")
        if not dtypes.is_int(indices.dtype):
            raise TypeError(f"max_unpool2d: indices must be an integer tensor, got {indices.dtype}")
        if self.ndim < 3:
            raise ValueError(f"max_unpool2d: expected (N, C, *spatial), got shape {self.shape}")
        spatial = [int(s) for s in self.shape[2:]]
        out = _unpool_size(spatial, kernel_size, stride, dilation, padding, output_size)
        total = math.prod(out)
        lead = tuple(self.shape[:2])
        flat_v, flat_i = self.reshape(*lead, -1), indices.reshape(*lead, -1)
        slots = type(self).arange(total, device=self.device, dtype=indices.dtype)
        hit = flat_i.unsqueeze(-1).eq(slots)  # (N, C, pooled, total)
        acc = _acc(self.dtype)
        ret = hit.where(flat_v.unsqueeze(-1).cast(acc), 0).sum(2, dtype=acc).cast(self.dtype)
        return ret.reshape(*lead, *out)

    def _max_pool_indices(
        self: Tensor, padded: Tensor, k: tuple[int, ...], s: tuple[int, ...], d: tuple[int, ...], pads: Any
    ) -> Tensor:
        """For max_pool2d(return_indices=True): the flat spatial index (int32) of each window's first maximum."""
        nd = len(k)
        spatial = [int(v) for v in self.shape[self.ndim - nd :]]
        flat = type(self).arange(math.prod(spatial), device=self.device, dtype=dtypes.int32).reshape(*spatial)
        where = flat.pad(tuple(pads), value=-1)._pool(k, s, d).flatten(-nd)  # (*out, window)
        windows = padded._pool(k, s, d).flatten(-nd)  # (..., *out, window)
        first = windows.argmax(-1).unsqueeze(-1)
        pick = first.eq(type(self).arange(int(windows.shape[-1]), device=self.device, dtype=dtypes.int32))
        return pick.where(where, 0).sum(-1, dtype=dtypes.int32)

    # ---- losses ----
    def nll_loss(
        self: Tensor, Y: Tensor, weight: Tensor | None = None, ignore_index: int | None = None, reduction: str = "mean"
    ) -> Tensor:
        """Negative log likelihood of log-probabilities (N, C, ...) at class indices Y (N, ...), as torch.

        >>> from tg_tensor import Tensor
        >>> Tensor([[-1.0, -2.0], [-3.0, -4.0]]).nll_loss(Tensor([1, 0])).item()
        2.5
        """
        if reduction not in ("none", "sum", "mean"):
            raise ValueError(f"nll_loss: reduction must be 'none', 'sum' or 'mean', got {reduction!r}")
        if not isinstance(Y, type(self)) or not dtypes.is_int(Y.dtype):
            raise RuntimeError(f"nll_loss: target must be an integer tensor, got {getattr(Y, 'dtype', Y)}")
        x = self.unsqueeze(0) if self.ndim == 1 else self
        y = Y.unsqueeze(0) if self.ndim == 1 else Y
        if x.ndim < 2 or y.shape != (x.shape[0], *x.shape[2:]):
            raise ValueError(f"nll_loss: input {self.shape} and target {Y.shape} do not match (N, C, ...) and (N, ...)")
        n_cls = int(x.shape[1])
        if weight is not None and weight.shape != (n_cls,):
            raise ValueError(f"nll_loss: weight must have shape ({n_cls},), got {weight.shape}")
        along_cls = (n_cls, *([1] * (y.ndim - 1)))  # (the class axis of x, before y's other dims)
        hit = y.unsqueeze(1).eq(type(self).arange(n_cls, device=self.device, dtype=y.dtype).reshape(along_cls))
        picked = hit.where(x, 0).sum(1)
        if weight is not None:
            w = hit.where(weight.reshape(along_cls), 0).sum(1)
        else:
            w = type(self).ones(*y.shape, dtype=picked.dtype, device=self.device)
        if ignore_index is not None:
            w = y.ne(ignore_index).where(w, 0)
        loss = -picked * w
        if self.ndim == 1:
            loss, w = loss.reshape(()), w.reshape(())
        if reduction == "mean":
            return loss.sum() / w.sum()
        return loss.sum() if reduction == "sum" else loss

    # ---- random ----
    def multinomial(self: Tensor, num_samples: int = 1, replacement: bool = False) -> Tensor:
        """`num_samples` class indices (int32) drawn with probabilities proportional to self (1-D or 2-D rows).

        >>> from tg_tensor import Tensor
        >>> Tensor([0.0, 1.0, 0.0]).multinomial(2, replacement=True).tolist()
        [1, 1]
        """
        if not 1 <= self.ndim <= 2:
            raise RuntimeError(f"multinomial: weights must be 1-D or 2-D, got shape {self.shape}")
        if not isinstance(num_samples, int) or num_samples <= 0:
            raise RuntimeError(f"multinomial: num_samples must be a positive int, got {num_samples!r}")
        w = (self.unsqueeze(0) if self.ndim == 1 else self)._float()
        rows, n = int(w.shape[0]), int(w.shape[1])
        if not replacement and num_samples > n:
            raise RuntimeError(
                f"multinomial: cannot draw {num_samples} samples without replacement from {n} categories"
            )
        if replacement:
            cdf = w.cumsum(1)
            cdf = cdf / cdf[:, -1:]
            u = type(self).rand(rows, num_samples, 1, device=self.device)
            idx = (u >= cdf.unsqueeze(1)).cast(dtypes.int32).sum(2).minimum(n - 1)
        else:  # Efraimidis-Spirakis: the num_samples largest log(u) / w
            u = type(self).rand(rows, n, device=self.device)
            idx = (u.log() / w).topk(num_samples, dim=1)[1]
        idx = idx.cast(dtypes.int32)
        return idx.squeeze(0) if self.ndim == 1 else idx

    @classmethod
    def randperm(
        cls: type[Tensor], n: int, device: str | None = None, dtype: DType | str = dtypes.int32, **kwargs: Any
    ) -> Tensor:
        """A random permutation of 0..n-1: the argsort of n uniform keys drawn on the device.

        Above 2048 elements the keys are read back and argsorted on the host (the device sort is O(n^2)).

        >>> from tg_tensor import Tensor
        >>> sorted(Tensor.randperm(4).tolist())
        [0, 1, 2, 3]
        """
        import numpy as np

        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"randperm: n must be an int >= 0, got {n!r}")
        dt = to_dtype(dtype)
        keys = cls.rand(n, device=device)
        if n <= RANDPERM_HOST_ABOVE:
            return cls(keys.argsort().cast(dt).uop, **kwargs)
        order = np.argsort(keys.numpy(), kind="stable").astype(np.int64)
        return cls(order, device=keys.device, **kwargs).cast(dt)  # (a cast to int64 itself returns it as it is)


def _acc(dt: DType) -> DType:
    return dtypes.int32 if dt == dtypes.bool else dt


def _combine(x: Tensor, part: Tensor, count: Tensor, reduce: str, include_self: bool) -> Tensor:
    """Merge the reduction of the scattered values with self, where anything was scattered."""
    xa = x.cast(part.dtype)
    if reduce == "mean":
        total = xa + part if include_self else part
        denom = count + 1 if include_self else count.maximum(1)
        merged = total / denom if dtypes.is_float(part.dtype) else total.div(denom, rounding_mode="floor")
    elif include_self:
        merged = {"sum": xa.add, "prod": xa.mul, "amax": xa.maximum, "amin": xa.minimum}[reduce](part)
    else:
        merged = part
    return (count > 0).where(merged.cast(part.dtype), xa)


def _unpool_size(
    spatial: list[int], kernel: Any, stride: Any, dilation: Any, padding: Any, output_size: Any
) -> list[int]:
    n = len(spatial)
    if output_size is not None:
        return [int(s) for s in tuple(output_size)[-n:]]
    k = _tuple(kernel, n, "max_unpool2d: kernel_size")
    s = k if stride is None else _tuple(stride, n, "max_unpool2d: stride")
    d, p = _tuple(dilation, n, "max_unpool2d: dilation"), _tuple(padding, n, "max_unpool2d: padding")
    return [(i - 1) * s_ - 2 * p_ + d_ * (k_ - 1) + 1 for i, k_, s_, d_, p_ in zip(spatial, k, s, d, p)]
