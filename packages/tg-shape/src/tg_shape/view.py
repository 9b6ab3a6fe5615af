"""View: one strided window onto a flat buffer (shape, strides, offset, validity mask).

>>> from tg_shape.view import View
>>> v = View.create((2, 3)).permute((1, 0))
>>> v.shape, v.strides
((3, 2), (1, 3))
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from tg_uop import DType, UOp, dtypes
from tg_uop.helpers import all_int, prod
from tg_uop.shapes import ssimplify
from tg_uop.uop import sint

Mask = tuple[tuple[sint, sint], ...]


def strides_for_shape(shape: tuple[sint, ...]) -> tuple[sint, ...]:
    """Row-major strides; size-1 dims get stride 0 (so equal views compare equal)."""
    if not shape:
        return ()
    strides: list[sint] = [1]
    for s in reversed(shape[1:]):
        strides.insert(0, strides[0] * s)
    return tuple(0 if s == 1 else st for s, st in zip(shape, strides))


def unravel(shape: tuple[sint, ...], flat: UOp) -> list[UOp]:
    """The row-major position in `shape` of the flat index `flat` (size-1 dims give 0)."""
    out: list[UOp] = []
    acc: sint = 1
    for s in reversed(shape):
        if isinstance(s, int) and s == 1:
            out.append(UOp.const(flat.dtype, 0))
        else:
            out.append((flat // _const_index(acc, flat.dtype)) % _const_index(s, flat.dtype))
        acc = acc * s
    return out[::-1]


def _const_index(x: sint, dtype: DType = dtypes.int32) -> UOp:
    if isinstance(x, UOp):
        return x if x.dtype == dtype else x.cast(dtype)
    return UOp.const(dtype, x)


def index_dtype_for(views: tuple[View, ...] | list[View]) -> DType:
    """int64 when index maths over these views can pass 2^31 (so int32 constants would wrap), else int32."""
    return dtypes.int64 if max((v.extent() for v in views), default=0) >= 2**31 - 1 else dtypes.int32


def _index_positions(idxs: list[UOp]) -> tuple[list[UOp], DType]:
    """The positions in one index dtype: int64 when any of them is (a kernel with 64-bit indexing), else int32."""
    dt = dtypes.int64 if any(i.dtype == dtypes.int64 for i in idxs) else dtypes.int32
    return [i if i.dtype == dt else i.cast(dt) for i in idxs], dt


@dataclass(frozen=True)
class View:
    """A strided view: element i of the view is buffer[offset + sum(i_k * strides_k)] where the mask holds."""

    shape: tuple[sint, ...]
    strides: tuple[sint, ...]
    offset: sint
    mask: Mask | None
    contiguous: bool

    @staticmethod
    @functools.cache
    def create(
        shape: tuple[sint, ...], strides: tuple[sint, ...] | None = None, offset: sint = 0, mask: Mask | None = None
    ) -> View:
        """A canonical view: size-1 dims have stride 0, an all-true mask is dropped, an empty one zeroes strides."""
        if strides is None:
            strides = strides_for_shape(shape)
        strides = tuple(0 if s == 1 else st for s, st in zip(shape, strides))
        if mask is not None:
            if all(b == 0 and e == s for (b, e), s in zip(mask, shape)):
                mask = None
            elif any(all_int((b, e)) and b >= e for b, e in mask):
                mask, strides, offset = ((0, 0),) * len(shape), (0,) * len(shape), 0
        contiguous = offset == 0 and mask is None and strides == strides_for_shape(shape)
        return View(tuple(shape), tuple(strides), offset, mask, contiguous)

    @property
    def size(self) -> sint:
        return prod(self.shape)

    def extent(self) -> int:
        """The element count, or the largest address the view spans, whichever is larger (int dims only)."""
        ext = int(prod(s for s in self.shape if isinstance(s, int)))
        return ext if (span := self.span()) is None else max(ext, span - 1)

    def span(self) -> int | None:
        """|offset| + sum((size - 1) x |stride|) + 1: every partial sum of offset + sum(index x stride) over the view
        is smaller in magnitude (None where a size, stride or the offset is symbolic).

        >>> View.create((3, 4)).span()
        12
        """
        if not (isinstance(self.offset, int) and all(isinstance(x, int) for x in (*self.shape, *self.strides))):
            return None
        return abs(self.offset) + sum((int(s) - 1) * abs(int(st)) for s, st in zip(self.shape, self.strides)) + 1

    # ---- movement ----
    def permute(self, order: tuple[int, ...]) -> View:
        if sorted(order) != list(range(len(self.shape))):
            raise ValueError(f"permute: {order} is not a permutation of the axes of shape {self.shape}")
        mask = tuple(self.mask[i] for i in order) if self.mask is not None else None
        return View.create(
            tuple(self.shape[i] for i in order), tuple(self.strides[i] for i in order), self.offset, mask
        )

    def expand(self, new_shape: tuple[sint, ...]) -> View:
        if len(new_shape) != len(self.shape) or any(s != n and s != 1 for s, n in zip(self.shape, new_shape)):
            raise ValueError(f"expand: cannot expand shape {self.shape} to {new_shape} (only size-1 dims expand)")
        if 0 in self.shape:
            return View.create(new_shape)
        mask = None
        if self.mask is not None:
            mask = tuple(
                (m if s == n else ((0, n) if m != (0, 0) else (0, 0)))
                for m, s, n in zip(self.mask, self.shape, new_shape)
            )
        strides = tuple(st if s == n else 0 for st, s, n in zip(self.strides, self.shape, new_shape))
        return View.create(new_shape, strides, self.offset, mask)

    def shrink(self, arg: tuple[tuple[sint, sint], ...]) -> View:
        if len(arg) != len(self.shape) or any(
            all_int((b, e, s)) and not 0 <= b <= e <= s for (b, e), s in zip(arg, self.shape)
        ):
            raise ValueError(f"shrink: {arg} is out of bounds for shape {self.shape}")
        offset = self.offset + sum(b * st for (b, _), st in zip(arg, self.strides))
        mask = None
        if self.mask is not None:
            mask = tuple(
                (max(mb, b) - b, min(me, e) - b) if all_int((mb, me, b, e)) else (mb - b, me - b)
                for (mb, me), (b, e) in zip(self.mask, arg)
            )
            mask = tuple((b, max(b, e)) if all_int((b, e)) else (b, e) for b, e in mask)
        return View.create(tuple(e if _is_zero(b) else ssimplify(e - b) for b, e in arg), self.strides, offset, mask)

    def pad(self, arg: tuple[tuple[sint, sint], ...]) -> View:
        if len(arg) != len(self.shape) or any(not isinstance(x, UOp) and x < 0 for p in arg for x in p):
            raise ValueError(
                f"pad: {arg} must give a (before, after) pair of non-negative ints for each dim of {self.shape}"
            )
        if all(b == 0 and a == 0 for b, a in arg):
            return self
        # pad is a shrink with negative bounds plus a mask that hides the new elements
        old_mask = self.mask if self.mask is not None else tuple((0, s) for s in self.shape)
        mask = tuple((mb + b, me + b) for (mb, me), (b, _) in zip(old_mask, arg))
        offset = self.offset - sum(b * st for (b, _), st in zip(arg, self.strides))
        shape = tuple(ssimplify(s + b + a) for s, (b, a) in zip(self.shape, arg))
        return View.create(shape, self.strides, offset, mask)

    def flip(self, axes: tuple[bool, ...]) -> View:
        if len(axes) != len(self.shape):
            raise ValueError(f"flip: need one flag per dim of {self.shape}, got {axes}")
        offset = self.offset + sum((s - 1) * st for s, st, f in zip(self.shape, self.strides, axes) if f)
        strides = tuple(-st if f else st for st, f in zip(self.strides, axes))
        mask = None
        if self.mask is not None:
            mask = tuple(((s - e, s - b) if f else (b, e)) for (b, e), s, f in zip(self.mask, self.shape, axes))
        return View.create(self.shape, strides, offset, mask)

    def stride(self, mul: tuple[int, ...]) -> View:
        """Take every mul-th element along each axis (negative flips); tinygrad's `stride`."""
        if len(mul) != len(self.shape) or 0 in mul:
            raise ValueError(f"stride: need one non-zero step per dim of {self.shape}, got {mul}")
        v = self.flip(tuple(m < 0 for m in mul))
        mul = tuple(abs(m) for m in mul)
        shape = tuple((s + m - 1) // m for s, m in zip(v.shape, mul))
        strides = tuple(st * m for st, m in zip(v.strides, mul))
        mask = None
        if v.mask is not None:
            mask = tuple(((b + m - 1) // m, (e + m - 1) // m) for (b, e), m in zip(v.mask, mul))
        return View.create(shape, strides, v.offset, mask)

    def reshape(self, new_shape: tuple[sint, ...]) -> View | None:
        """This view in a new shape of the same size, or None when one view cannot express it."""
        if self.shape == new_shape:
            return self
        if all_int(self.shape) and all_int(new_shape) and prod(self.shape) != prod(new_shape):
            raise ValueError(
                f"reshape: cannot reshape {self.shape} (size {prod(self.shape)}) to {new_shape} "
                f"(size {prod(new_shape)})"
            )
        if 0 in self.shape:
            return View.create(new_shape)
        if self.contiguous:
            return View.create(new_shape)
        if not (all_int(self.shape) and all_int(new_shape)):
            return self._reshape_ones(new_shape)
        if self.mask is None and (strides := _reshape_strides(self.shape, self.strides, new_shape)) is not None:
            return View.create(new_shape, strides, self.offset)
        if self.mask is not None and (masked := self._reshape_ones(new_shape)) is not None:
            return masked
        from tg_shape.merge import merge_views  # the general case, by symbolic algebra

        return merge_views(self, View.create(new_shape))

    def _reshape_ones(self, new_shape: tuple[sint, ...]) -> View | None:
        """Reshapes that only add or remove size-1 dims keep strides and mask (symbolic dims too)."""
        mask = self.mask if self.mask is not None else tuple((0, s) for s in self.shape)
        old = [(s, st, m) for s, st, m in zip(self.shape, self.strides, mask) if not _is_one(s) or m != (0, 1)]
        if any(_is_one(s) for s, _, _ in old):
            return None  # a masked-out size-1 dim: let a second view handle it
        kept = [s for s in new_shape if not _is_one(s)]
        if len(kept) != len(old) or any(a is not b and a != b for (a, _, _), b in zip(old, kept)):
            return None
        it = iter(old)
        strides: list[sint] = []
        new_mask: list[tuple[sint, sint]] = []
        for s in new_shape:
            if _is_one(s):
                strides.append(0)
                new_mask.append((0, 1))
            else:
                _, st, m = next(it)
                strides.append(st)
                new_mask.append(m)
        return View.create(new_shape, tuple(strides), self.offset, tuple(new_mask) if self.mask else None)

    # ---- indexing ----
    def to_indexed_uops(self, idxs: list[UOp], valid: UOp | None = None) -> tuple[UOp, UOp]:
        """(index into the buffer, validity) for the view position `idxs` (index in the positions' dtype)."""
        idxs, dt = _index_positions(idxs)
        index = _const_index(self.offset, dt)
        for i, st in zip(idxs, self.strides):
            if not (isinstance(st, int) and st == 0):
                index = index + i * _const_index(st, dt)
        ok = valid if valid is not None else UOp.const(dtypes.bool, True)
        if self.mask is not None:
            for i, (b, e), s in zip(idxs, self.mask, self.shape):
                if not (isinstance(b, int) and b == 0):
                    ok = ok & (i >= _const_index(b, dt))
                if not (isinstance(e, int) and isinstance(s, int) and e == s):
                    ok = ok & (i < _const_index(e, dt))
        return index, ok

    def substitute(self, mapping: dict[UOp, UOp]) -> View:
        """This view with symbolic nodes replaced (e.g. bound variables by their variables)."""

        def sub(x: sint) -> sint:
            return x.substitute(mapping) if isinstance(x, UOp) else x

        mask = tuple((sub(b), sub(e)) for b, e in self.mask) if self.mask is not None else None
        return View.create(
            tuple(sub(s) for s in self.shape), tuple(sub(st) for st in self.strides), sub(self.offset), mask
        )

def _is_zero(s: sint) -> bool:
    return isinstance(s, int) and s == 0


def _is_one(s: sint) -> bool:
    return isinstance(s, int) and s == 1


def _reshape_strides(
    old_shape: tuple[int, ...], old_strides: tuple[int, ...], new_shape: tuple[int, ...]
) -> tuple[int, ...] | None:
    """Strides for `new_shape` reading the same elements in the same order, or None if impossible."""
    runs: list[list[int]] = []  # [size, stride of the innermost element]
    for s, st in zip(old_shape, old_strides):
        if s == 1:
            continue
        if runs and runs[-1][1] == st * s:
            runs[-1] = [runs[-1][0] * s, st]
        else:
            runs.append([s, st])
    new_strides: list[int] = []
    ri = 0
    remaining = runs[0][0] if runs else 1
    for ns in new_shape:
        if ns == 1:
            new_strides.append(0)
            continue
        if ri >= len(runs) or remaining % ns != 0:
            return None
        remaining //= ns
        new_strides.append(runs[ri][1] * remaining)
        if remaining == 1:
            ri += 1
            remaining = runs[ri][0] if ri < len(runs) else 1
    return tuple(new_strides) if ri == len(runs) else None
