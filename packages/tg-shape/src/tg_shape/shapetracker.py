"""ShapeTracker: a stack of Views; every movement op is index maths, never a copy.

>>> from tg_shape import ShapeTracker
>>> st = ShapeTracker.from_shape((4, 6)).permute((1, 0)).reshape((24,))
>>> len(st.views), st.shape
(2, (24,))
>>> index, valid = ShapeTracker.from_shape((2, 3, 4)).reshape((24,)).reshape((2, 3, 4)).to_indexed_uops()
>>> index.render()
'(((idx0*12)+(idx1*4))+idx2)'
"""

from __future__ import annotations

from dataclasses import dataclass

from tg_shape.merge import compose_index, merge_views
from tg_shape.view import View, index_dtype_for, strides_for_shape
from tg_uop import DType, Ops, UOp, dtypes
from tg_uop.helpers import prod
from tg_uop.symbolic import split_add
from tg_uop.uop import sint
from tg_uop.valid import simplify_given_valid


def _index_vars(shape: tuple[sint, ...], dtype: DType = dtypes.int32) -> list[UOp]:
    """The default position variables idx0, idx1, ... (symbolic dims use their largest value)."""
    return [
        UOp.variable(f"idx{i}", 0, max(int(s.vmax if isinstance(s, UOp) else s) - 1, 0), dtype)
        for i, s in enumerate(shape)
    ]


@dataclass(frozen=True)
class ShapeTracker:
    """Views applied in order: views[0] reads the buffer, views[-1] has the shape the user sees.

    >>> ShapeTracker.from_shape((3, 4)).shrink(((1, 3), (0, 4))).views[-1]
    View(shape=(2, 4), strides=(4, 1), offset=4, mask=None, contiguous=False)
    """

    views: tuple[View, ...]

    @staticmethod
    def from_shape(shape: tuple[sint, ...]) -> ShapeTracker:
        """The tracker of a contiguous buffer of `shape`."""
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

    def vars(self) -> set[UOp]:
        """The symbolic variables (DEFINE_VAR, or BIND of one) in the shapes, strides, offsets and masks."""
        found: set[UOp] = set()
        for v in self.views:
            for x in (*v.shape, *v.strides, v.offset, *(b for m in (v.mask or ()) for b in m)):
                if isinstance(x, UOp):
                    found.update(u for u in x.toposort if u.op in (Ops.DEFINE_VAR, Ops.BIND))
        return found

    def unbind(self) -> tuple[ShapeTracker, dict[UOp, int]]:
        """This tracker with bound variables replaced by their variables, and the values they were bound to.

        >>> n = UOp.variable("n", 1, 10)
        >>> st, values = ShapeTracker.from_shape((n.bind(3), 4)).unbind()
        >>> st.shape[0] is n, values[n]
        (True, 3)
        """
        binds = [b for b in self.vars() if b.op is Ops.BIND]
        mapping = {b: b.src[0] for b in binds}
        unbound = ShapeTracker(tuple(v.substitute(mapping) for v in self.views)) if binds else self
        return unbound, {b.src[0]: int(b.src[1].arg) for b in binds}

    def __add__(self, other: ShapeTracker) -> ShapeTracker:
        """Compose: read this tracker through `other` (other's first view has this tracker's size)."""
        ret = self
        for v in other.views:
            ret = ShapeTracker(ret.views + (v,)).simplify()
        return ret

    def simplify(self) -> ShapeTracker:
        """Merge adjacent views wherever one view can express both."""
        views = list(self.views)
        k = len(views) - 1
        while k >= 1:
            merged = merge_views(views[k - 1], views[k])
            if merged is not None:
                views[k - 1 : k + 1] = [merged]
                k = min(k, len(views) - 1)
            else:
                k -= 1
        return ShapeTracker(tuple(views))

    # ---- movement ops ----
    def _replace_last(self, v: View) -> ShapeTracker:
        return ShapeTracker(self.views[:-1] + (v,))

    def reshape(self, new_shape: tuple[sint, ...]) -> ShapeTracker:
        """Reshape, merged into the last view when one view can express it, else as a new view."""
        v = self.views[-1].reshape(tuple(new_shape))
        if v is None:
            return ShapeTracker(self.views + (View.create(tuple(new_shape)),))
        if v.contiguous and len(self.views) > 1 and (merged := merge_views(self.views[-2], v)) is not None:
            return ShapeTracker(self.views[:-2] + (merged,))  # the reshape undid an earlier view's reshape
        return self._replace_last(v)

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
    def to_indexed_uops_raw(self, idxs: list[UOp] | None = None) -> tuple[UOp, UOp]:
        """(index, valid) exactly as the views compose, before any simplification."""
        if idxs is None:
            idxs = _index_vars(self.shape, index_dtype_for(self.views))
        return compose_index(list(self.views), list(idxs))

    def to_indexed_uops(self, idxs: list[UOp] | None = None) -> tuple[UOp, UOp]:
        """(index, valid) for position `idxs` (default: variables idx0, idx1, ...), both simplified.

        The index is simplified for the points where `valid` holds: elsewhere it must not be read.
        """
        index, valid = self.to_indexed_uops_raw(idxs)
        valid = valid.simplify()
        return simplify_given_valid(index, valid), valid

    def real_strides(self, ignore_valid: bool = False) -> tuple[sint | None, ...]:
        """Per dim: its stride in the buffer, or None when moving along it is not a plain stride.

        Dims that take part in the validity mask are None too, unless `ignore_valid`.
        """
        if len(self.views) == 1 and (self.views[-1].mask is None or ignore_valid):
            return self.views[-1].strides
        idxs = _index_vars(self.shape, index_dtype_for(self.views))
        index, valid = self.to_indexed_uops(idxs)
        ret: list[sint | None] = [0] * len(self.shape)
        for term in split_add(index):
            for k, v in enumerate(idxs):
                if term is v:
                    ret[k] = 1 if ret[k] == 0 else None
                elif term.op is Ops.MUL and term.src[0] is v and term.src[1].op is Ops.CONST:
                    ret[k] = term.src[1].arg if ret[k] == 0 else None
                elif v in term.toposort:
                    ret[k] = None
        if not ignore_valid:
            in_valid = valid.toposort
            ret = [None if v in in_valid else st for v, st in zip(idxs, ret)]
        return tuple(ret)

    def unit_stride_axes(self, ignore_valid: bool = False) -> list[int]:
        """The dims along which consecutive positions are consecutive in the buffer."""
        return [i for i, st in enumerate(self.real_strides(ignore_valid)) if st == 1]
