# mypy: disable-error-code="misc"
# (mixin methods annotate `self: Tensor`, the class they are mixed into; mypy flags that as "misc")
"""Indexing: basic (ints, slices, None, Ellipsis) as movement ops; advanced (lists, tensors) as one-hot masks.

>>> from tg_tensor import Tensor
>>> t = Tensor.arange(12).reshape(3, 4)
>>> t[1, ::-2].tolist()
[7, 5]
>>> t[[0, 2], 1].tolist()
[1, 9]

Out-of-range indices in a tensor (`t[Tensor([5])]`, `gather`, `scatter`, `one_hot`) select nothing by
default, as in tinygrad: the result holds 0 there (checking would read the indices back from the device).
`CHECK_INDEX=1` (or `Context(CHECK_INDEX=1)`) reads them and raises IndexError naming the first bad index,
as PyTorch does; it cannot be used inside TinyJit (a host read). Python ints and lists are always checked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tg_tensor.engine.inplace import view_chain
from tg_tensor.engine.symbolic import show_size
from tg_tensor.engine.util import DTypeError, ShapeError, broadcast_shape
from tg_tensor.take_rows import take_rows
from tg_uop import Ops, UOp, dtypes
from tg_uop.helpers import ContextVar

if TYPE_CHECKING:
    from tg_tensor.tensor import Tensor

Index = Any
CHECK_INDEX = ContextVar("CHECK_INDEX", 0)  # 1: tensor indices are read back and checked (IndexError)


def check_index(idx: Tensor, lo: int, hi: int, what: str) -> None:
    """Under CHECK_INDEX=1: raise IndexError naming the first element of `idx` outside [lo, hi)."""
    if not CHECK_INDEX:
        return
    values = idx.numpy().reshape(-1)
    bad = values[(values < lo) | (values >= hi)]
    if bad.size:
        raise IndexError(f"{what}: index {int(bad[0])} is out of range [{lo}, {hi}) (CHECK_INDEX=1)")


class IndexingMixin:
    """__getitem__, __setitem__, gather, scatter, masked_fill, one_hot, triu, tril."""

    __slots__ = ()

    def __getitem__(self: Tensor, index: Index) -> Tensor:
        """Basic and advanced indexing as numpy; a bool mask selects elements (see `_mask_to_indices`)."""
        if hasattr(index, "uop") and (rows := take_rows(self, index)) is not None:
            return rows  # x[idx]: the same graph as below, built without the Tensor steps (take_rows.py)
        items = _normalize_index(self._masks_to_indices(_sequences_as_lists(index)), self.ndim)
        x, dims, advanced = self, 0, []  # dims: position in x of the next remaining source dim
        for item in items:
            if item is None:
                x, dims = x.unsqueeze(dims), dims + 1
            elif isinstance(item, int):
                x = x._index_int(dims, item)
            elif isinstance(item, slice):
                x, dims = x._index_slice(dims, item), dims + 1
            else:
                advanced.append((dims, x._index_tensor(item, dims)))
                dims += 1
        return x._apply_advanced(advanced) if advanced else x

    def _masks_to_indices(self: Tensor, index: Index) -> Index:
        """Each bool mask in `index` as the integer index tensors of its True positions (PyTorch semantics).

        `x[mask]` with a mask of x's leading k dims selects the elements (or the rows) where it is
        True, as a 1-D list in row-major order. The result's shape depends on the mask's values, so
        the mask is realized and read to the host here (not allowed inside TinyJit); x stays lazy.

        >>> from tg_tensor import Tensor
        >>> x = Tensor([[1, 2], [3, 4]])
        >>> x[x > 1].tolist(), x[Tensor([False, True])].tolist()
        ([2, 3, 4], [[3, 4]])
        """
        import numpy as np

        items = list(index) if isinstance(index, tuple) else [index]
        if not any(_is_mask(it) for it in items):
            return index
        out: list[Any] = []
        dim = 0
        for it in items:
            if not _is_mask(it):
                out.append(it)
                dim += 0 if it is None else self.ndim - _dims_used(items) if it is Ellipsis else 1
                continue
            mask = it.numpy() if hasattr(it, "uop") else np.asarray(it)
            if mask.ndim == 0:
                raise IndexError("a 0-d boolean mask is not supported as an index; use a mask of at least 1 dim")
            covered = tuple(int(s) for s in self.shape[dim : dim + mask.ndim])
            if mask.shape != covered:
                raise IndexError(
                    f"boolean mask of shape {mask.shape} does not match the indexed dims {covered} "
                    f"(dims {dim}..{dim + mask.ndim - 1} of shape {self.shape})"
                )
            out.extend(type(self)(p.astype(np.int32), device=self.device) for p in mask.nonzero())
            dim += mask.ndim
        return tuple(out)

    def _index_int(self: Tensor, dim: int, i: int) -> Tensor:
        n = int(self.shape[dim])
        if not -n <= i < n:
            raise IndexError(f"index {i} is out of bounds for dim {dim} of size {n} (shape {self.shape})")
        i %= n
        return self._slice(dim, i, i + 1).reshape(self.shape[:dim] + self.shape[dim + 1 :])

    def _index_slice(self: Tensor, dim: int, s: slice) -> Tensor:
        if any(isinstance(x, UOp) for x in (s.start, s.stop, s.step, self.shape[dim])):
            return self._index_symbolic_slice(dim, s)
        n = int(self.shape[dim])
        start, stop, step = s.indices(n)
        x = self
        if step < 0:
            x = x.flip(dim)
            start, stop, step = n - 1 - start, n - 1 - stop, -step
        count = max(0, -(-(stop - start) // step))
        if step == 1 or count <= 1:
            return x._slice(dim, start, start + count)
        end = start + count * step
        if end > n:  # pad so the strided reshape fits; the padding is never read
            x = x.pad(tuple((0, end - n) if i == dim else (0, 0) for i in range(x.ndim)))
        x = x._slice(dim, start, end)
        shape = x.shape[:dim] + (count, step) + x.shape[dim + 1 :]
        x = x.reshape(shape)._slice(dim + 1, 0, 1)
        return x.reshape(shape[: dim + 1] + shape[dim + 2 :])

    def _index_symbolic_slice(self: Tensor, dim: int, s: slice) -> Tensor:
        """`x[:, :pos]`, `x[pos:pos + 1]` with a bound Variable (or a symbolic dim): a shrink with symbolic bounds.

        Only step 1 and bounds that count from the start (no negative ints) are symbolic-friendly.
        """
        n = self.shape[dim]
        start = 0 if s.start is None else s.start
        stop = n if s.stop is None else s.stop
        if s.step not in (None, 1) or any(isinstance(x, int) and x < 0 for x in (start, stop)):
            raise IndexError(
                f"slice {s} of dim {dim} (size {show_size(n)}): with a symbolic bound or size only step 1 and "
                "non-negative bounds are supported"
            )
        return self._slice(dim, start, stop)

    def _index_tensor(self: Tensor, item: Any, dim: int) -> Tensor:
        n = int(self.shape[dim])
        if isinstance(item, type(self)):
            idx = item
        else:
            flat = _flatten_list(item)
            # bools next to ints are the ints 0 and 1 (PyTorch); a list of bools only is a mask (_masks_to_indices)
            bad = [i for i in flat if not isinstance(i, int) or not -n <= i < n]
            if bad:
                raise IndexError(f"index {bad[0]!r} is out of bounds for dim {dim} of size {n} (shape {self.shape})")
            idx = type(self)(item, device=self.device, dtype=dtypes.int32)
        if not dtypes.is_int(idx.dtype):
            raise IndexError(f"tensor indices must be integers, got dtype {idx.dtype}")
        if isinstance(item, type(self)):
            check_index(idx, -n, n, f"indexing dim {dim} of size {n} (shape {self.shape})")
        return (idx < 0).where(idx + n, idx)

    def _positions(self: Tensor, n: int) -> Tensor:
        """0..n-1 computed from the loop index (no buffer): a compare with it is folded into an indexed load."""
        return type(self)(UOp(Ops.ARANGE, dtypes.int32, (UOp(Ops.DEVICE, arg=self.device),), n))

    def _apply_advanced(self: Tensor, advanced: list[tuple[int, Tensor]]) -> Tensor:
        """Gather with broadcast index tensors on dims `d` through a one-hot mask and a sum."""
        adv_dims = [d for d, _ in advanced]
        bshape = broadcast_shape(*(t.shape for _, t in advanced))
        rest = [i for i in range(self.ndim) if i not in adv_dims]
        x = self.permute(tuple(adv_dims + rest))
        nb, k = len(bshape), len(adv_dims)
        mask = None
        for j, (d, idx) in enumerate(advanced):
            n = int(self.shape[d])
            ar = self._positions(n).reshape((1,) * nb + (1,) * j + (n,) + (1,) * (k - j - 1))
            hit = idx.reshape(idx.shape + (1,) * k)._broadcast_to(bshape + (1,) * k) == ar
            mask = hit if mask is None else mask & hit
        assert mask is not None
        rest_shape = tuple(x.shape[k:])
        mask = mask.reshape(mask.shape + (1,) * len(rest_shape))
        vals = x.reshape((1,) * nb + tuple(x.shape))
        picked = mask.where(vals, 0).sum(tuple(range(nb, nb + k)), dtype=_sum_dtype(self.dtype)).cast(self.dtype)
        adjacent = adv_dims == list(range(adv_dims[0], adv_dims[0] + k))
        if not adjacent or adv_dims[0] == 0:
            return picked
        first = adv_dims[0]  # numpy puts the broadcast dims where the adjacent advanced indices were
        order = list(range(nb, nb + first)) + list(range(nb)) + list(range(nb + first, picked.ndim))
        return picked.permute(tuple(order))

    def __setitem__(self: Tensor, index: Index, value: Any) -> None:
        """Write `value` into the selected elements of a realized tensor (one-hot scatter, then assign)."""
        if self.requires_grad:
            raise RuntimeError("__setitem__ on a tensor that requires grad is not supported")
        if self.device.startswith("DISK") and not hasattr(value, "uop"):  # not a DISK buffer of its own:
            value = type(self)(value, dtype=self.dtype)  # that would map (and write) the file's first bytes
        if _is_mask(index) and hasattr(index, "uop") and _is_scalar(value):
            self._set_masked(index, value)  # a mask and one value: a lazy where, nothing read to the host
            return
        if _is_basic(index) and self._set_view(index, value):
            return
        positions = type(self).arange(int(self.numel()), device=self.device).reshape(self.shape)[index]
        val = self._to_tensor(value).cast(self.dtype)._broadcast_to(positions.shape)
        flat_pos, flat_val = positions.flatten(), val.flatten()
        n = int(self.numel())
        onehot = flat_pos.reshape(-1, 1) == self._positions(n).reshape(1, n)
        hit = onehot.any(0)
        onehot = _last_hits(onehot, 0)  # a position selected twice gets the last value, as in numpy and torch
        written = onehot.where(flat_val.reshape(-1, 1), 0).sum(0, dtype=_sum_dtype(self.dtype)).cast(self.dtype)
        new = hit.reshape(self.shape).where(written.reshape(self.shape), self)
        self.assign(new.contiguous())

    def _set_view(self: Tensor, index: Index, value: Any) -> bool:
        """Write through the view `self[index]` of a buffer (O(selected), no scatter); False if it is not one."""
        if view_chain(self.uop, resolve=False) is None:
            return False
        view = self[index]
        val = self._to_tensor(value).cast(self.dtype)._broadcast_to(view.shape)
        try:
            view.assign(val)
        except ValueError:
            return False  # not one strided window (a strided slice padded past the end, say)
        view.kernelize()  # runs at the next realize; self, a view of the old version, is re-pointed to the new
        return True

    def _set_masked(self: Tensor, mask: Tensor, value: Any) -> None:
        k = mask.ndim
        if tuple(mask.shape) != tuple(self.shape[:k]):
            raise IndexError(f"boolean mask of shape {mask.shape} does not match the indexed dims {self.shape[:k]}")
        wide = mask.reshape(tuple(mask.shape) + (1,) * (self.ndim - k))
        self.assign(wide.where(value, self).cast(self.dtype))

    # ---- gather / scatter ----
    def gather(self: Tensor, dim: int, index: Tensor) -> Tensor:
        """out[i][j] = self[index[i][j]][j] for dim 0 (and likewise for other dims)."""
        d = self._axis(dim)
        if index.ndim != self.ndim or any(index.shape[i] > self.shape[i] for i in range(self.ndim) if i != d):
            raise ShapeError(f"gather: index shape {index.shape} does not fit self shape {self.shape} on dim {d}")
        n = int(self.shape[d])
        check_index(index, 0, n, f"gather on dim {d} of size {n}")
        x = self.shrink(tuple(None if i == d else (0, index.shape[i]) for i in range(self.ndim)))
        x = x.transpose(d, -1).unsqueeze(-2)  # (..., 1, n)
        idx = index.transpose(d, -1).unsqueeze(-1)  # (..., m, 1)
        hit = idx == self._positions(n)
        out = hit.where(x, 0).sum(-1, dtype=_sum_dtype(self.dtype)).cast(self.dtype)
        return out.transpose(d, -1)

    def scatter(self: Tensor, dim: int, index: Tensor, src: Any, reduce: str | None = None) -> Tensor:
        """Write src[i][j] to out[index[i][j]][j] (dim 0); reduce 'add' or 'multiply' combines instead."""
        d = self._axis(dim)
        if index.ndim != self.ndim or any(index.shape[i] > self.shape[i] for i in range(self.ndim) if i != d):
            raise ShapeError(f"scatter: index shape {index.shape} does not fit self shape {self.shape} on dim {d}")
        if reduce not in (None, "add", "multiply"):
            raise ValueError(f"scatter: reduce must be None, 'add' or 'multiply', got {reduce!r}")
        if isinstance(src, type(self)):
            if src.dtype != self.dtype:  # PyTorch and tinygrad refuse to convert here
                raise DTypeError(f"scatter: src dtype {src.dtype} differs from self dtype {self.dtype}")
            if src.ndim != index.ndim or any(i > s for i, s in zip(index.shape, src.shape)):
                raise ShapeError(f"scatter: index shape {index.shape} is larger than src shape {src.shape}")
        n = int(self.shape[d])
        check_index(index, 0, n, f"scatter on dim {d} of size {n}")
        s = self._to_tensor(src).cast(self.dtype)
        s = s._broadcast_to(index.shape) if s.ndim == 0 else s.shrink(tuple((0, k) for k in index.shape))
        hit = index.transpose(d, -1).unsqueeze(-1) == self._positions(n)  # (..., m, n)
        vals = s.transpose(d, -1).unsqueeze(-1)
        pads = tuple((0, int(a) - int(b)) for a, b in zip(self.transpose(d, -1).shape, hit.shape[:-2] + (n,)))
        any_hit = hit.any(-2).pad(pads).transpose(d, -1)
        if reduce == "multiply":
            prod = hit.where(vals, 1).prod(-2).cast(self.dtype).pad(pads).transpose(d, -1)
            return any_hit.where(self * prod, self)
        if reduce is None:
            hit = _last_hits(hit, -2)  # duplicate indices: the last write wins (tinygrad, torch on the CPU)
        total = hit.where(vals, 0).sum(-2, dtype=_sum_dtype(self.dtype)).cast(self.dtype).pad(pads).transpose(d, -1)
        return any_hit.where(self + total if reduce == "add" else total, self)

    def masked_fill(self: Tensor, mask: Tensor, value: Any) -> Tensor:
        """`value` where `mask` is true, this tensor elsewhere.

        >>> from tg_tensor import Tensor
        >>> Tensor([1, 2, 3]).masked_fill(Tensor([True, False, True]), 0).tolist()
        [0, 2, 0]
        """
        return mask.where(value, self)

    def one_hot(self: Tensor, num_classes: int | None = None) -> Tensor:
        """An int tensor with a trailing axis of size num_classes holding 1 at each index. num_classes must be
        >= 0 (as tinygrad; PyTorch's -1 raises ValueError); None takes max + 1 (reads the indices back).

        >>> from tg_tensor import Tensor
        >>> Tensor([0, 2]).one_hot(3).tolist()
        [[1, 0, 0], [0, 0, 1]]
        """
        if not dtypes.is_int(self.dtype):
            raise DTypeError(f"one_hot needs an integer tensor, got dtype {self.dtype}")
        if num_classes is None:
            num_classes = int(self.max().item()) + 1 if self.numel() else 0
        if not isinstance(num_classes, int) or num_classes < 0:
            raise ValueError(f"one_hot: num_classes must be a non-negative int, got {num_classes!r}")
        check_index(self, 0, num_classes, f"one_hot with {num_classes} classes")
        classes = type(self).arange(num_classes, device=self.device)
        return (self.unsqueeze(-1) == classes).where(1, 0)

    def _tri_mask(self: Tensor, diagonal: int, upper: bool) -> Tensor:
        if self.ndim < 2:
            raise ValueError(f"triu/tril need at least 2 dims, got shape {self.shape}")
        r, c = int(self.shape[-2]), int(self.shape[-1])
        rows = type(self).arange(r, device=self.device).reshape(r, 1)
        cols = type(self).arange(c, device=self.device).reshape(1, c)
        return (cols - rows >= diagonal) if upper else (cols - rows <= diagonal)

    def triu(self: Tensor, diagonal: int = 0) -> Tensor:
        """Zero the elements below the `diagonal`-th diagonal."""
        return self._tri_mask(diagonal, True).where(self, self.zeros_like())

    def tril(self: Tensor, diagonal: int = 0) -> Tensor:
        """Zero the elements above the `diagonal`-th diagonal."""
        return self._tri_mask(diagonal, False).where(self, self.zeros_like())


def _last_hits(hit: Tensor, axis: int) -> Tensor:
    """Of the True entries along `axis` (the writers of one position), keep only the last."""
    m = int(hit.shape[axis])
    order = hit._positions(m).reshape((m,) + (1,) * (hit.ndim - (axis % hit.ndim) - 1))
    last = hit.where(order, -1).max(axis, keepdim=True)
    return hit & (order == last)


def _sum_dtype(dt: Any) -> Any:
    return dt if dtypes.is_float(dt) else None


def _sequences_as_lists(index: Index) -> Index:
    """Tuples inside an index tuple are sequence indices, as lists are (numpy, PyTorch): x[(0, (1, 1))]
    is x[0, [1, 1]]; the outer tuple alone separates dims."""

    def as_list(it: Any) -> Any:
        return [as_list(v) for v in it] if isinstance(it, (tuple, list)) else it

    if not isinstance(index, tuple) or not any(isinstance(it, tuple) for it in index):
        return index
    return tuple(as_list(it) if isinstance(it, tuple) else it for it in index)


def _flatten_list(x: Any) -> list[Any]:
    if isinstance(x, (list, tuple)):
        return [v for item in x for v in _flatten_list(item)]
    return [x]


def _is_mask(it: Any) -> bool:
    """A bool Tensor, numpy array or (nested) list of bools used as an index."""
    import numpy as np

    if hasattr(it, "uop"):
        return bool(it.dtype == dtypes.bool)
    if isinstance(it, list):
        flat = _flatten_list(it)
        return bool(flat) and all(isinstance(v, (bool, np.bool_)) for v in flat)
    return isinstance(it, np.ndarray) and it.dtype == np.bool_


def _is_basic(index: Index) -> bool:
    """Ints, slices, None and Ellipsis only: the selection is a view."""
    items = index if isinstance(index, tuple) else (index,)
    return all(it is None or it is Ellipsis or isinstance(it, (int, slice)) for it in items)


def _is_scalar(v: Any) -> bool:
    return isinstance(v, (int, float, bool)) or (hasattr(v, "uop") and v.ndim == 0)


def _dims_used(items: list[Any]) -> int:
    """How many dims of the indexed tensor the items other than None and Ellipsis consume."""
    return sum(it.ndim if _is_mask(it) else 1 for it in items if it is not None and it is not Ellipsis)


def _normalize_index(index: Index, ndim: int) -> list[Any]:
    """The index as a list of per-dim items with Ellipsis expanded; too many indices raise."""
    items = list(index) if isinstance(index, tuple) else [index]
    for it in items:
        allowed = it is None or it is Ellipsis or isinstance(it, (int, slice, list)) or hasattr(it, "uop")
        if isinstance(it, bool) or not allowed:
            raise TypeError(f"index {it!r}: expected int, slice, None, Ellipsis, list or Tensor")
    if sum(1 for it in items if it is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(1 for it in items if it is not None and it is not Ellipsis)
    if used > ndim:
        raise IndexError(f"too many indices: {used} for a tensor of {ndim} dims")
    at = next((i for i, it in enumerate(items) if it is Ellipsis), None)
    if at is not None:
        return items[:at] + [slice(None)] * (ndim - used) + items[at + 1 :]
    return items + [slice(None)] * (ndim - used)
