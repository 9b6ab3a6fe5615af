# mypy: disable-error-code="misc"
# (mixin methods annotate `self: Tensor`, the class they are mixed into; mypy flags that as "misc")
"""Movement ops: views that change shape or order without computing (they fuse into loads).

>>> from tg_tensor import Tensor
>>> Tensor([[1, 2], [3, 4]]).T.flatten().tolist()
[1, 3, 2, 4]
>>> Tensor([1, 2]).cat(Tensor([3]), dim=0).tolist()
[1, 2, 3]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tg_tensor.engine.util import ArgumentError, ModeError, ShapeError, normalize_axis, varargs_shape
from tg_uop import UOp, dtypes
from tg_uop.helpers import prod
from tg_uop.uop import sint

if TYPE_CHECKING:
    from tg_tensor.tensor import Tensor

Padding = Any  # ((before, after), ...) per dim, or torch's flat (left, right, top, bottom, ...) from the last dim


class MovementMixin:
    """reshape, permute, expand, pad, shrink, flip and everything built from them."""

    __slots__ = ()

    def _axis(self: Tensor, axis: int) -> int:
        return normalize_axis(axis, self.ndim)

    def reshape(self: Tensor, shape: Any, *args: Any) -> Tensor:
        """Same data, new shape; one dim may be -1.

        >>> from tg_tensor import Tensor
        >>> Tensor.arange(6).reshape(2, -1).shape
        (2, 3)
        """
        entries = tuple(shape) if isinstance(shape, (tuple, list)) and not args else (shape, *args)
        if len(entries) == self.ndim:  # None keeps that dim's size, as tinygrad
            entries = tuple(self.shape[i] if e is None else e for i, e in enumerate(entries))
        new = varargs_shape(entries)
        if sum(1 for s in new if s == -1) > 1:
            raise ShapeError(f"reshape: only one dimension can be -1, got {new}")
        if -1 in new:
            known = prod(s for s in new if s != -1)
            if known == 0 or self.numel() % known != 0:
                raise ValueError(f"reshape: cannot reshape {self.shape} (size {self.numel()}) to {new}")
            new = tuple(self.numel() // known if s == -1 else s for s in new)
        if any(isinstance(s, int) and s < 0 for s in new):
            raise ValueError(f"reshape: negative dimension in {new}")
        if not same_size(prod(new), self.numel()):
            raise ValueError(f"reshape: cannot reshape {self.shape} (size {self.numel()}) to {new} (size {prod(new)})")
        return type(self)(self.uop.reshape(new))

    def view(self: Tensor, shape: Any, *args: Any) -> Tensor:
        """The same as `reshape` (tg views never need a copy to be made first).

        >>> from tg_tensor import Tensor
        >>> Tensor([1, 2, 3, 4]).view(2, 2).tolist()
        [[1, 2], [3, 4]]
        """
        return self.reshape(shape, *args)

    def permute(self: Tensor, order: Any, *args: Any) -> Tensor:
        """The axes reordered: axis i of the result is axis order[i] of this tensor.

        >>> from tg_tensor import Tensor
        >>> Tensor.ones(2, 3, 4).permute(2, 0, 1).shape
        (4, 2, 3)
        """
        axes = tuple(self._axis(a) for a in varargs_shape((order, *args)))
        if sorted(axes) != list(range(self.ndim)):
            raise ShapeError(f"permute: {axes} is not a permutation of the axes of shape {self.shape}")
        return type(self)(self.uop.permute(axes))

    def expand(self: Tensor, shape: Any, *args: Any) -> Tensor:
        """Broadcast size-1 dims to `shape` (-1 keeps a dim); new leading dims are added."""
        new = varargs_shape((shape, *args))
        if len(new) < self.ndim:
            raise ValueError(f"expand: cannot expand shape {self.shape} to fewer dims {new}")
        cur = (1,) * (len(new) - self.ndim) + self.shape
        new = tuple(c if s == -1 else s for c, s in zip(cur, new))
        if any(c != s and c != 1 for c, s in zip(cur, new)):
            raise ValueError(f"expand: cannot expand shape {self.shape} to {new} (only size-1 dims expand)")
        return type(self)(self.uop.reshape(cur).expand(new))

    def transpose(self: Tensor, dim0: int = 1, dim1: int = 0) -> Tensor:
        """Axes dim0 and dim1 swapped.

        >>> from tg_tensor import Tensor
        >>> Tensor([[1, 2, 3]]).transpose(0, 1).shape
        (3, 1)
        """
        order = list(range(self.ndim))
        a, b = self._axis(dim0), self._axis(dim1)
        order[a], order[b] = order[b], order[a]
        return self.permute(tuple(order)) if self.ndim else self

    @property
    def T(self: Tensor) -> Tensor:  # noqa: N802
        """All axes reversed (the matrix transpose for 2-d).

        >>> from tg_tensor import Tensor
        >>> Tensor([[1, 2], [3, 4]]).T.tolist()
        [[1, 3], [2, 4]]
        """
        return self.permute(tuple(reversed(range(self.ndim))))

    def flatten(self: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """Axes start_dim..end_dim merged into one.

        >>> from tg_tensor import Tensor
        >>> Tensor.ones(2, 3, 4).flatten(1).shape
        (2, 12)
        """
        if self.ndim == 0:
            return self.reshape((1,))
        s, e = self._axis(start_dim), self._axis(end_dim)
        return self.reshape(self.shape[:s] + (prod(self.shape[s : e + 1]),) + self.shape[e + 1 :])

    def unflatten(self: Tensor, dim: int, sizes: tuple[int, ...]) -> Tensor:
        """Axis `dim` split into `sizes`.

        >>> from tg_tensor import Tensor
        >>> Tensor.ones(2, 12).unflatten(1, (3, 4)).shape
        (2, 3, 4)
        """
        d = self._axis(dim)
        return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d + 1 :])

    def squeeze(self: Tensor, dim: int | None = None) -> Tensor:
        """Axes of size 1 removed (all of them, or only `dim`).

        >>> from tg_tensor import Tensor
        >>> Tensor.ones(1, 3, 1).squeeze().shape
        (3,)
        """
        if dim is None:
            return self.reshape(tuple(s for s in self.shape if s != 1))
        d = self._axis(dim)
        return self if not self.ndim or self.shape[d] != 1 else self.reshape(self.shape[:d] + self.shape[d + 1 :])

    def unsqueeze(self: Tensor, dim: int) -> Tensor:
        """A new axis of size 1 at `dim`.

        >>> from tg_tensor import Tensor
        >>> Tensor([1, 2]).unsqueeze(0).shape
        (1, 2)
        """
        d = normalize_axis(dim, self.ndim + 1)
        return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

    # ---- pad, shrink, flip ----
    def _pad_pairs(self: Tensor, padding: Padding) -> tuple[tuple[int, int], ...]:
        if all(isinstance(p, (tuple, list)) or p is None for p in padding):
            if len(padding) != self.ndim:
                raise ValueError(f"pad: {len(padding)} (before, after) pairs for a tensor of {self.ndim} dims")
            return tuple((0, 0) if p is None else (int(p[0]), int(p[1])) for p in padding)
        if len(padding) % 2 or len(padding) // 2 > self.ndim:
            raise ValueError(f"pad: flat padding {padding} needs an even length <= 2 * ndim ({2 * self.ndim})")
        pairs = [(int(padding[i]), int(padding[i + 1])) for i in range(0, len(padding), 2)][::-1]
        return ((0, 0),) * (self.ndim - len(pairs)) + tuple(pairs)

    def pad(self: Tensor, padding: Padding, mode: str = "constant", value: float = 0.0) -> Tensor:
        """Pad with `value` ("constant"), mirrored ("reflect"), edge ("replicate") or wrapped ("circular") values.

        Negative padding removes elements.
        >>> from tg_tensor import Tensor
        >>> Tensor([1, 2]).pad(((1, 2),)).tolist()
        [0, 1, 2, 0, 0]
        """
        if mode not in ("constant", "reflect", "replicate", "circular"):
            raise ModeError(f"pad: mode must be 'constant', 'reflect', 'replicate' or 'circular', got {mode!r}")
        pairs = self._pad_pairs(padding)
        if mode in ("reflect", "replicate"):  # positions count from the input's own edges, as in PyTorch
            x = self
            for ax, (b, a) in enumerate(pairs):
                x = x._pad_mirror(ax, b, a, mode)
            return x
        shrink = tuple((-min(b, 0), int(s) + min(a, 0)) for (b, a), s in zip(pairs, self.shape))
        x = self.shrink(shrink) if any(b < 0 or a < 0 for b, a in pairs) else self
        pos = tuple((max(b, 0), max(a, 0)) for b, a in pairs)
        if mode == "constant":
            ret = type(self)(x.uop.pad(pos))
            if value == 0 or all(p == (0, 0) for p in pos):
                return ret
            inside = type(self)(x.ones_like(dtypes.bool).uop.pad(pos))  # (True where x's own values are)
            return inside.where(ret, value)
        for ax, (b, a) in enumerate(pos):
            x = x._pad_circular(ax, b, a)
        return x

    def _pad_circular(self: Tensor, ax: int, before: int, after: int) -> Tensor:
        n = int(self.shape[ax])
        if before > n or after > n:
            raise ShapeError(f"pad: circular padding ({before}, {after}) is larger than dim {ax} of {self.shape}")
        if not before and not after:
            return self
        parts = [self._slice(ax, n - before, n), self, self._slice(ax, 0, after)]
        return parts[0].cat(*parts[1:], dim=ax)

    def _pad_mirror(self: Tensor, ax: int, before: int, after: int, mode: str) -> Tensor:
        """Reflect or replicate padding of dim `ax`; a negative amount crops. Output position j reads input
        position j - before, mirrored (reflect) or clamped (replicate) at the input's own edges (PyTorch)."""
        n = int(self.shape[ax])
        if before == 0 and after == 0:
            return self
        out = n + before + after
        if out < 0:
            raise ShapeError(f"pad: padding ({before}, {after}) leaves a negative size for dim {ax} of {self.shape}")
        if mode == "reflect" and (before >= n or after >= n):
            raise ShapeError(f"pad: reflect padding ({before}, {after}) must be smaller than dim {ax} of {self.shape}")
        if mode == "replicate" and n == 0 and out:
            raise ShapeError(f"pad: cannot replicate-pad the empty dim {ax} of {self.shape}")
        src = [j - before for j in range(out)]
        src = [abs(k) if k < 0 else 2 * (n - 1) - k if k >= n else k for k in src] if mode == "reflect" else src
        src = [min(max(k, 0), n - 1) for k in src]
        return self._take_runs(ax, src)

    def _take_runs(self: Tensor, ax: int, src: list[int]) -> Tensor:
        """Dim `ax` rebuilt from the (static) source positions `src`: each run of +1, -1 or equal steps is one
        slice (flipped or expanded), and the runs are concatenated."""
        if not src:
            return self._slice(ax, 0, 0)
        parts, i = [], 0
        while i < len(src):
            j, step = i + 1, (src[i + 1] - src[i] if i + 1 < len(src) else 1)
            step = step if step in (-1, 0, 1) else 1
            while j < len(src) and src[j] - src[j - 1] == step:
                j += 1
            lo, hi = min(src[i], src[j - 1]), max(src[i], src[j - 1]) + 1
            piece = self._slice(ax, lo, hi)
            parts.append(piece.flip(ax) if step == -1 else piece._expand_axis(ax, j - i) if step == 0 else piece)
            i = j
        return parts[0].cat(*parts[1:], dim=ax) if len(parts) > 1 else parts[0]

    def _expand_axis(self: Tensor, ax: int, times: int) -> Tensor:
        """Expand a size-1 axis `ax` to `times`."""
        return self.expand(tuple(times if i == ax else s for i, s in enumerate(self.shape)))

    def _slice(self: Tensor, ax: int, start: int, stop: int) -> Tensor:
        arg = tuple((start, stop) if i == ax else (0, s) for i, s in enumerate(self.shape))
        return self.shrink(arg)

    def shrink(self: Tensor, arg: tuple[tuple[sint, sint] | None, ...]) -> Tensor:
        """Keep [begin, end) of each dim (None keeps the dim whole)."""
        if len(arg) != self.ndim:
            raise ValueError(f"shrink: {len(arg)} ranges for a tensor of {self.ndim} dims (shape {self.shape})")
        full = tuple((0, s) if a is None else (a[0], a[1]) for a, s in zip(arg, self.shape))
        return type(self)(self.uop.shrink(full))

    def flip(self: Tensor, axis: int | tuple[int, ...], *args: int) -> Tensor:
        """The order of elements reversed along the given axes.

        >>> from tg_tensor import Tensor
        >>> Tensor([1, 2, 3]).flip(0).tolist()
        [3, 2, 1]
        """
        listed = [self._axis(a) for a in ((axis,) if isinstance(axis, int) else tuple(axis)) + args]
        if len(set(listed)) != len(listed):
            raise ArgumentError(f"flip: dim repeated in {((axis,) if isinstance(axis, int) else tuple(axis)) + args}")
        axes = set(listed)
        return type(self)(self.uop.flip(tuple(i in axes for i in range(self.ndim))))

    # ---- repetition and joining ----
    def repeat(self: Tensor, repeats: Any, *args: Any) -> Tensor:
        """Tile the tensor `repeats[i]` times along each dim (like torch.Tensor.repeat)."""
        reps = varargs_shape((repeats, *args))
        if len(reps) < self.ndim:
            raise ValueError(f"repeat: {len(reps)} repeats for a tensor of {self.ndim} dims")
        base = (1,) * (len(reps) - self.ndim) + self.shape
        x = self.reshape(tuple(d for s in base for d in (1, s)))
        x = x.expand(tuple(d for r, s in zip(reps, base) for d in (r, s)))
        return x.reshape(tuple(r * s for r, s in zip(reps, base)))

    def repeat_interleave(self: Tensor, repeats: int, dim: int | None = None) -> Tensor:
        """Repeat each element `repeats` times along `dim` (the flattened tensor when None)."""
        x = self.flatten() if dim is None else self
        d = 0 if dim is None else x._axis(dim)
        return x.unsqueeze(d + 1)._expand_axis(d + 1, repeats).flatten(d, d + 1)

    def cat(self: Tensor, *others: Tensor, dim: int = 0) -> Tensor:
        """Join tensors along `dim`; the other dims must match. `Tensor.cat([a, b])` takes a list too."""
        if isinstance(self, (list, tuple)):
            return self[0].cat(*self[1:], *others, dim=dim)
        tensors = [self, *others]
        d = self._axis(dim)
        for t in others:
            if t.ndim != self.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, self.shape)) if i != d):
                raise ValueError(f"cat: shapes {[x.shape for x in tensors]} do not match outside dim {d}")
        out_dt = dtypes.least_upper(*(t.dtype for t in tensors))
        total = sum(int(t.shape[d]) for t in tensors)
        offset, ret = 0, None
        for t in tensors:
            pads = tuple((offset, total - offset - int(t.shape[d])) if i == d else (0, 0) for i in range(self.ndim))
            part = type(self)(t.cast(out_dt).uop.pad(pads))
            ret = part if ret is None else ret + part
            offset += int(t.shape[d])
        assert ret is not None
        return ret

    def stack(self: Tensor, *others: Tensor, dim: int = 0) -> Tensor:
        """Join tensors along a new dim: `Tensor.stack(a, b)`, `Tensor.stack([a, b])` or `a.stack(b)`."""
        if isinstance(self, (list, tuple)):
            if others:
                raise ValueError("stack: give the tensors either as one list or as separate arguments, not both")
            return self[0].stack(*self[1:], dim=dim)
        tensors = (self, *others)
        d = normalize_axis(dim, self.ndim + 1)
        for t in others:
            if t.shape != self.shape:
                raise ValueError(f"stack: shapes {[x.shape for x in tensors]} differ")
        return self.unsqueeze(d).cat(*(t.unsqueeze(d) for t in others), dim=d)

    def split(self: Tensor, sizes: int | list[int] | tuple[int, ...], dim: int = 0) -> list[Tensor]:
        """Pieces of `sizes` along `dim` (an int: equal pieces, the last maybe smaller)."""
        d = self._axis(dim)
        n = int(self.shape[d])
        if isinstance(sizes, int):
            if sizes <= 0:
                raise ValueError(f"split: size must be positive, got {sizes}")
            sizes = [min(sizes, n - i) for i in range(0, n, sizes)] or [0]
        if sum(sizes) != n:
            raise ValueError(f"split: sizes {list(sizes)} do not add up to dim {d} of shape {self.shape}")
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        return [self._slice(d, s, s + k) for s, k in zip(starts, sizes)]

    def chunk(self: Tensor, chunks: int, dim: int = 0) -> list[Tensor]:
        """`chunks` nearly equal pieces along `dim`."""
        if chunks <= 0:
            raise ValueError(f"chunk: chunks must be positive, got {chunks}")
        n = int(self.shape[self._axis(dim)])
        return self.split(max(1, -(-n // chunks)), dim)

    def roll(self: Tensor, shifts: int | tuple[int, ...], dims: int | tuple[int, ...] | None = None) -> Tensor:
        """Rotate elements along dims (the flattened tensor when dims is None)."""
        sh = (shifts,) if isinstance(shifts, int) else tuple(shifts)
        if dims is None:
            if len(sh) != 1:
                raise ArgumentError(f"roll: {len(sh)} shifts need as many dims (dims=None rolls the flattened tensor)")
            return self.flatten().roll(sh[0], 0).reshape(self.shape)
        ds = (dims,) if isinstance(dims, int) else tuple(dims)
        if len(sh) != len(ds):
            raise ArgumentError(f"roll: {len(sh)} shifts for {len(ds)} dims")
        x = self
        for s, dim in zip(sh, ds):
            d = x._axis(dim)
            n = int(x.shape[d])
            if n and (k := s % n):  # (an empty dim, or a whole turn: nothing moves)
                x = x._slice(d, n - k, n).cat(x._slice(d, 0, n - k), dim=d)
        return x


def same_size(a: sint, b: sint) -> bool:
    """Equal sizes, also when symbolic (`n*1` and `1*n` of one Variable are the same size)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    ua = a if isinstance(a, UOp) else UOp.const(dtypes.int32, a)
    ub = b if isinstance(b, UOp) else UOp.const(dtypes.int32, b)
    return ua.simplify() is ub.simplify()
