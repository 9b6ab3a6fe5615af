"""`x[idx]` with one integer index tensor, built as UOps directly: the commonest tensor index, made cheap.

Picking rows of a table by a tensor of indices (a batch of dataset rows, `X_train[samples]`) goes
through the general advanced-indexing path in indexing.py: a one-hot compare-and-sum built from about
25 Tensor ops, which tg_codegen/gather.py folds back into one gated load per element. Building that
graph through Tensors costs more than the kernel. `take_rows` builds the very same graph, node for
node, straight from UOp constructors (every shape is known here, so no step is checked or inferred
again): hash-consing makes the two one graph (`x[idx].uop is x._index_general(idx).uop`),
so schedules, kernels, gradients and every semantic (negative indices wrap once, out-of-range ones
give 0, CHECK_INDEX) are the general path's. The nodes that read neither x nor idx (the arange and
the broadcast constants) are kept alive between calls, so their structure (the scheduler's cache key)
is not recomputed either: a repeated gather builds only the dozen nodes that read x and idx.

Where the general path would build anything else (a multi-device or symbolic shape, a dim of size 0
or 1, `Tensor.no_grad`, which wraps each step in DETACH, an index on another device), `take_rows`
returns None and the general path runs.

>>> from tg_tensor import Tensor
>>> x, i = Tensor([[1, 2], [3, 4], [5, 6]]), Tensor([2, -3])
>>> take_rows(x, i).uop is x[(i,)].uop, x[i].tolist()
(True, [[5, 6], [1, 2]])
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from tg_runtime.device import DeviceSet
from tg_tensor.engine.realizer import current
from tg_tensor.engine.util import const_uop, scalar_dtype, sum_acc_dtype
from tg_uop import DType, Ops, UOp, dtypes
from tg_uop.helpers import all_int

if TYPE_CHECKING:
    from tg_tensor.tensor import Tensor

Shape = tuple[int, ...]


def take_rows(x: Tensor, idx: Tensor) -> Tensor | None:
    """`x[idx]` for an integer tensor `idx` (rows of x along dim 0), or None where the general path must build it.

    Every step below is the one indexing.py's `_index_tensor` and `_apply_advanced` take through Tensor
    ops (broadcasts, casts to a common dtype, the sum's accumulator), in the same order.
    """
    from tg_tensor.indexing import check_index

    u, iu = x.uop, idx.uop
    xs, ishape, dev = u.shape, iu.shape, u.device
    if not _simple(x, idx) or xs is None or ishape is None or not all_int(xs) or not all_int(ishape):
        return None
    n = int(xs[0])
    if n < 2 or not isinstance(dev, str) or isinstance(dev, DeviceSet) or iu.device != dev:
        return None
    check_index(idx, -n, n, f"indexing dim 0 of size {n} (shape {x.shape})")
    it, xt = iu.dtype, u.dtype
    zero_dt = scalar_dtype(xt, 0)  # `where(vals, 0)`: the 0's dtype, and the common one with the table's
    common = dtypes.least_upper(xt, zero_dt) if zero_dt != xt else xt
    consts = small, big, arange, true, zero = _constants(dev, it, common, zero_dt, n, ishape, xs)
    if (rz := current()).realized:  # (a realized equal constant would stop the fold: Realizer.forget_constants)
        rz.forget_constants(*consts)
    nb, rest, full = len(ishape), xs[1:], ishape + xs
    hit_shape = ishape + (n,)
    # _index_tensor: (idx < 0).where(idx + n, idx)
    wrapped = _node(Ops.WHERE, it, _node(Ops.CMPLT, dtypes.bool, iu, small), _node(Ops.ADD, it, iu, big), iu)
    # _apply_advanced: the one-hot mask idx[..., None] == arange(n), written ne(ne(a, b), True)
    at = _view(Ops.RESHAPE, wrapped, ishape, ishape + (1,)).cast(_index_dtype(it))
    ne = _node(Ops.CMPNE, dtypes.bool, _view(Ops.EXPAND, at, ishape + (1,), hit_shape), arange)
    mask = _view(Ops.RESHAPE, _node(Ops.CMPNE, dtypes.bool, ne, true), hit_shape, hit_shape + (1,) * len(rest))
    mask = _view(Ops.EXPAND, mask, hit_shape + (1,) * len(rest), full)
    vals = _view(Ops.RESHAPE, u, xs, (1,) * nb + xs).cast(common)
    vals = _view(Ops.EXPAND, vals, (1,) * nb + xs, full)
    picked = _node(Ops.WHERE, common, mask, vals, zero)
    acc = xt if dtypes.is_float(xt) else sum_acc_dtype(common)  # (indexing.py's _sum_dtype, then sum's default)
    summed = UOp(Ops.REDUCE_AXIS, acc, (picked.cast(acc),), (Ops.ADD, (nb,)))  # (n > 1: never a no-op)
    return type(x)(_view(Ops.RESHAPE, summed, ishape + (1,) + rest, ishape + rest).cast(xt))


def _node(op: Ops, dt: DType, *src: UOp) -> UOp:
    """An elementwise node; what UOp.alu would build, without its checks (the operands are built to fit)."""
    return UOp(op, dt, src)


def _view(op: Ops, u: UOp, cur: Shape, shape: Shape) -> UOp:
    """RESHAPE or EXPAND of `u` (of shape `cur`) to `shape`, or `u` when that changes nothing (as UOp.reshape)."""
    return u if shape == cur else UOp(op, u.dtype, (u,), shape)


def _simple(x: Tensor, idx: Tensor) -> bool:
    return type(idx) is type(x) and not type(x).no_grad and dtypes.is_int(idx.dtype) and x.ndim >= 1


def _index_dtype(it: DType) -> DType:
    """The dtype the index and the int32 arange are compared in."""
    return dtypes.least_upper(it, dtypes.int32) if it != dtypes.int32 else it


@functools.lru_cache(maxsize=64)
def _constants(
    dev: str, it: DType, common: DType, zero_dt: DType, n: int, ishape: Shape, xs: Shape
) -> tuple[UOp, UOp, UOp, UOp, UOp]:
    """The nodes of `x[idx]` that read neither x nor idx, kept alive (and so hash-consed) between calls:
    0 and n at idx's shape, the arange at the mask's, True at the mask's, the 0 of `where` at the output's."""
    nb, cmp_shape, full = len(ishape), ishape + (n,), ishape + xs

    def const_at(value: int | bool, dt: DType, shape: Shape) -> UOp:
        c = const_uop(value, dt, dev)
        return c.reshape((1,) * len(shape)).expand(shape) if shape else c

    arange = UOp(Ops.ARANGE, dtypes.int32, (UOp(Ops.DEVICE, arg=dev),), n)
    arange = arange.reshape((1,) * nb + (n,)).cast(_index_dtype(it)).expand(cmp_shape)
    vals_shape = (1,) * nb + xs
    zero = const_uop(0, zero_dt, dev).cast(common).reshape((1,) * len(vals_shape)).expand(vals_shape).expand(full)
    return const_at(0, it, ishape), const_at(n, it, ishape), arange, const_at(True, dtypes.bool, cmp_shape), zero
