"""ShapeTracker: a stack of Views; every movement op is index maths, never a copy.

>>> from tg_shape import ShapeTracker
>>> st = ShapeTracker.from_shape((4, 6)).permute((1, 0)).reshape((24,))
>>> len(st.views), st.shape
(2, (24,))
"""

from __future__ import annotations

from dataclasses import dataclass

from tg_shape.view import View, strides_for_shape
from tg_uop import UOp, dtypes
from tg_uop.helpers import prod
from tg_uop.uop import sint


@dataclass(frozen=True)
class ShapeTracker:
    """Views applied in order: views[0] reads the buffer, views[-1] has the shape the user sees."""

    views: tuple[View, ...]

    @staticmethod
    def from_shape(shape: tuple[sint, ...]) -> ShapeTracker:
        return ShapeTracker((View.create(tuple(shape)),))

    @property
    def shape(self) -> tuple[sint, ...]:
        return self.views[-1].shape

    @property
    def size(self) -> sint:
        return prod(self.shape)

    @property
    def contiguous(self) -> bool:
        return len(self.views) == 1 and self.views[0].contiguous

    @property
    def consecutive(self) -> bool:
        """Contiguous up to a constant offset."""
        v = self.views[-1]
        return len(self.views) == 1 and v.mask is None and v.strides == strides_for_shape(v.shape)

    def __add__(self, other: ShapeTracker) -> ShapeTracker:
        """Compose: `other` applied on top of this tracker's shape."""
        ret = self
        for v in other.views:
            ret = ShapeTracker(ret.views + (v,)).simplify()
        return ret

    def simplify(self) -> ShapeTracker:
        """Drop views made redundant by the one after them."""
        views = list(self.views)
        changed = True
        while changed and len(views) >= 2:
            changed = False
            inner, outer = views[-2], views[-1]
            if inner.contiguous:
                # the inner view maps its flat index straight to the buffer
                views[-2:] = [outer]
                changed = True
            elif outer.contiguous and (merged := inner.reshape(outer.shape)) is not None:
                views[-2:] = [merged]
                changed = True
        return ShapeTracker(tuple(views))

    # ---- movement ops ----
    def _replace_last(self, v: View) -> ShapeTracker:
        return ShapeTracker(self.views[:-1] + (v,))

    def reshape(self, new_shape: tuple[sint, ...]) -> ShapeTracker:
        v = self.views[-1].reshape(tuple(new_shape))
        if v is not None:
            return self._replace_last(v)
        return ShapeTracker(self.views + (View.create(tuple(new_shape)),))

    def permute(self, order: tuple[int, ...]) -> ShapeTracker:
        return self._replace_last(self.views[-1].permute(tuple(order)))

    def expand(self, new_shape: tuple[sint, ...]) -> ShapeTracker:
        return self._replace_last(self.views[-1].expand(tuple(new_shape)))

    def pad(self, arg: tuple[tuple[sint, sint], ...]) -> ShapeTracker:
        return self._replace_last(self.views[-1].pad(tuple(arg)))

    def shrink(self, arg: tuple[tuple[sint, sint], ...]) -> ShapeTracker:
        return self._replace_last(self.views[-1].shrink(tuple(arg)))

    def flip(self, axes: tuple[bool, ...]) -> ShapeTracker:
        return self._replace_last(self.views[-1].flip(tuple(axes)))

    def stride(self, mul: tuple[int, ...]) -> ShapeTracker:
        return self._replace_last(self.views[-1].stride(tuple(mul)))

    # ---- indexing ----
    def to_indexed_uops(self, idxs: list[UOp] | None = None) -> tuple[UOp, UOp]:
        """(index, valid) UOps for position `idxs` (default: one variable per dim)."""
        if idxs is None:
            idxs = [UOp.variable(f"idx{i}", 0, max(int(s) - 1, 0)) for i, s in enumerate(self.shape)]
        index, valid = self.views[-1].to_indexed_uops(list(idxs))
        for view in reversed(self.views[:-1]):
            flat = index
            unraveled: list[UOp] = []
            acc: sint = 1
            for s in reversed(view.shape):
                unraveled.insert(0, (flat // acc) % s if s != 1 else UOp.const(dtypes.int32, 0))
                acc = acc * s
            index, valid = view.to_indexed_uops(unraveled, valid)
        return index, valid

    def real_strides(self, ignore_valid: bool = False) -> tuple[sint | None, ...]:
        """Per dim: the stride in the buffer, or None when it is not a plain stride."""
        if len(self.views) == 1 and (self.views[-1].mask is None or ignore_valid):
            return self.views[-1].strides
        idxs = [UOp.variable(f"idx{i}", 0, max(int(s) - 1, 0)) for i, s in enumerate(self.shape)]
        index, _ = self.to_indexed_uops(idxs)
        index = index.simplify()
        from tg_uop.symbolic import split_add

        ret: list[sint | None] = [None] * len(self.shape)
        for term in split_add(index):
            if term.op.name == "DEFINE_VAR" and term in idxs:
                ret[idxs.index(term)] = 1
            elif term.op.name == "MUL" and term.src[0] in idxs and term.src[1].op.name == "CONST":
                ret[idxs.index(term.src[0])] = term.src[1].arg
        for i, s in enumerate(self.shape):
            if s == 1 or idxs[i] not in index.toposort:
                ret[i] = 0
        return tuple(ret)

    def unit_stride_axes(self, ignore_valid: bool = False) -> list[int]:
        return [i for i, st in enumerate(self.real_strides(ignore_valid)) if st == 1]
