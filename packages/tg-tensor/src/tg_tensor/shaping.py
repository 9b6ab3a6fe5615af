# mypy: disable-error-code="misc"
# (mixin methods annotate `self: Tensor`, the class they are mixed into; mypy flags that as "misc")
"""Views built from movement ops: diag, diagonal, unfold, meshgrid, pad_to, shrink_to, rearrange.

>>> from tg_tensor import Tensor
>>> Tensor.arange(9).reshape(3, 3).diagonal().tolist()
[0, 4, 8]
>>> Tensor.arange(6).reshape(2, 3).rearrange("a b -> b a").tolist()
[[0, 3], [1, 4], [2, 5]]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tg_tensor.engine.util import broadcast_shape, normalize_axis
from tg_uop import ConstType, dtypes
from tg_uop.helpers import prod

if TYPE_CHECKING:
    from tg_tensor.tensor import Tensor


def _shape_args(x: Tensor, shape: Any, args: tuple[Any, ...], what: str) -> tuple[Any, ...]:
    """`f(2, None)` and `f((2, None))` both mean (2, None): one size (or None) per dim of `x`."""
    entries = tuple(shape) if isinstance(shape, (tuple, list)) and not args else (shape, *args)
    for s in entries:
        if s is not None and (not isinstance(s, int) or isinstance(s, bool)):
            raise TypeError(f"shape entries must be ints or None, got {entries}")
    if len(entries) != x.ndim:
        raise ValueError(f"{what}: {len(entries)} sizes for a tensor of {x.ndim} dims (shape {x.shape})")
    return entries


class ShapingMixin:
    """Views and re-layouts that tinygrad builds from pad/shrink/reshape/permute."""

    __slots__ = ()

    def pad_to(self: Tensor, shape: Any, *args: Any, value: ConstType = 0) -> Tensor:
        """Pad at the end of each dim up to `shape` (None keeps a dim).

        >>> from tg_tensor import Tensor
        >>> Tensor([1, 2]).pad_to(4).tolist()
        [1, 2, 0, 0]
        """
        new = _shape_args(self, shape, args, "pad_to")
        if any(n is not None and n < s for n, s in zip(new, self.shape)):
            raise ValueError(f"pad_to: target {new} is smaller than the shape {self.shape}")
        pads = tuple((0, 0 if n is None else n - s) for n, s in zip(new, self.shape))
        fill = dtypes.as_const(value, self.dtype)  # the fill takes the tensor's dtype (2 pads a bool tensor with True)
        return self if all(p == (0, 0) for p in pads) else self.pad(pads, value=fill)

    def shrink_to(self: Tensor, shape: Any, *args: Any) -> Tensor:
        """Keep the first `shape[i]` elements of each dim (None keeps a dim).

        >>> from tg_tensor import Tensor
        >>> Tensor([[1, 2], [3, 4]]).shrink_to(1, None).tolist()
        [[1, 2]]
        """
        new = _shape_args(self, shape, args, "shrink_to")
        if any(n is not None and not 0 <= n <= s for n, s in zip(new, self.shape)):
            raise ValueError(f"shrink_to: target {new} does not fit in the shape {self.shape}")
        return self.shrink(tuple(None if n is None else (0, n) for n in new))

    def diag(self: Tensor) -> Tensor:
        """The square matrix with this 1-D tensor on its diagonal.

        >>> from tg_tensor import Tensor
        >>> Tensor([1, 2]).diag().tolist()
        [[1, 0], [0, 2]]
        """
        if self.ndim != 1:
            raise ValueError(f"diag: expected a 1-D tensor, got shape {self.shape}")
        n = int(self.shape[0])
        # each row holds its value then n zeros; read back with rows of n, the value walks the diagonal
        return self.unsqueeze(-1).pad(((0, 0), (0, n))).flatten()._slice(0, 0, n * n).reshape(n, n)

    def diagonal(self: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
        """The diagonal of the (dim1, dim2) planes as a new last dim (offset > 0: above the main diagonal).

        >>> from tg_tensor import Tensor
        >>> Tensor.arange(6).reshape(2, 3).diagonal(offset=1).tolist()
        [1, 5]
        """
        a, b = normalize_axis(dim1, self.ndim), normalize_axis(dim2, self.ndim)
        if a == b:
            raise RuntimeError(f"diagonal: dim1 and dim2 are both dim {a} of shape {self.shape}")
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise TypeError(f"diagonal: offset must be an int, got {offset!r}")
        rest = [i for i in range(self.ndim) if i not in (a, b)]
        x = self.permute((*rest, a, b))
        rows, cols = int(x.shape[-2]), int(x.shape[-1])
        r0, c0 = (0, offset) if offset >= 0 else (-offset, 0)
        d = max(0, min(rows - r0, cols - c0))
        lead = tuple(x.shape[:-2])
        if d == 0:
            return type(self).zeros(*lead, 0, dtype=self.dtype, device=self.device)
        x = x.shrink(tuple(None for _ in lead) + ((r0, r0 + d), (c0, c0 + d)))
        # in a (d, d) block flattened and padded to d*(d+1), rows of d+1 start on the diagonal
        flat = x.flatten(-2).pad(((0, 0),) * len(lead) + ((0, d),))
        return flat.reshape(*lead, d, d + 1)._slice(len(lead) + 1, 0, 1).squeeze(-1)

    def unfold(self: Tensor, dim: int, size: int, step: int) -> Tensor:
        """Windows of `size` every `step` along `dim`: that dim becomes (n_windows, ...) plus a new last dim of `size`.

        >>> from tg_tensor import Tensor
        >>> Tensor.arange(5).unfold(0, 2, 2).tolist()
        [[0, 1], [2, 3]]
        """
        d = normalize_axis(dim, self.ndim)
        n = int(self.shape[d]) if self.ndim else 1
        if not isinstance(size, int) or size < 0:
            raise RuntimeError(f"unfold: size must be an int >= 0, got {size!r}")
        if not isinstance(step, int) or step <= 0:
            raise RuntimeError(f"unfold: step must be an int > 0, got {step!r}")
        if size > n:
            raise RuntimeError(f"unfold: size {size} is larger than dim {dim} of shape {self.shape}")
        x = self if self.ndim else self.reshape(1)
        windows = (n - size) // step + 1
        others = [i for i in range(x.ndim) if i != d]
        moved = x.permute((*others, d))  # (..., n)
        lead = tuple(moved.shape[:-1])
        # `windows` copies back to back, read in rows of n + step: row r starts at element r * step of copy r
        wide = moved.unsqueeze(-2).expand(*lead, windows, n).flatten(-2)
        wide = wide.pad(((0, 0),) * len(lead) + ((0, windows * step),))
        picked = wide.reshape(*lead, windows, n + step)._slice(len(lead) + 1, 0, size)
        back = list(range(len(lead)))
        back.insert(d, len(lead))
        ret = picked.permute((*back, len(lead) + 1))
        return ret if self.ndim else ret.flatten()

    def meshgrid(self: Tensor, *args: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
        """Coordinate grids from 1-D (or 0-d) tensors; indexing "ij" (matrix) or "xy" (Cartesian).

        >>> from tg_tensor import Tensor
        >>> [g.tolist() for g in Tensor([1, 2]).meshgrid(Tensor([3]))]
        [[[1], [2]], [[3], [3]]]
        """
        if indexing not in ("ij", "xy"):
            raise RuntimeError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
        tensors = (self, *args)
        for t in tensors:
            if t.ndim > 1:
                raise ValueError(f"meshgrid: expected 0-d or 1-D tensors, got shape {t.shape}")
        if len(tensors) == 1:
            return tensors
        n = len(tensors)
        order = list(range(n))
        if indexing == "xy":
            order[0], order[1] = 1, 0
        shaped = [t.reshape(tuple(-1 if i == pos else 1 for i in range(n))) for pos, t in zip(order, tensors)]
        out = broadcast_shape(*(t.shape for t in shaped))
        return tuple(t.expand(out) for t in shaped)

    def rearrange(self: Tensor, formula: str, **sizes: int) -> Tensor:
        """einops-style re-layout: "b (h w) c -> b c h w" with h=..., "..." for untouched leading dims.

        >>> from tg_tensor import Tensor
        >>> Tensor.arange(6).rearrange("(a b) -> b a", a=2).tolist()
        [[0, 3], [1, 4], [2, 5]]
        """
        if not isinstance(formula, str) or formula.count("->") != 1:
            raise ValueError(f"rearrange: the formula needs exactly one '->', got {formula!r}")
        left, right = (_parse_side(side, formula) for side in formula.split("->"))
        lnames = [n for g in left for n in g]
        rnames = [n for g in right for n in g]
        if sorted(lnames) != sorted(rnames):
            raise ValueError(f"rearrange: both sides of {formula!r} must name the same axes")
        for name in sizes:
            if name not in lnames:
                raise ValueError(f"rearrange: axis {name!r} given a size is not in {formula!r}")
        if any("..." in g and len(g) > 1 for g in left):
            raise ValueError(f"rearrange: '...' cannot be grouped on the left of {formula!r}")
        left, right = _expand_ellipsis(left, right, self.ndim, formula)
        known = _axis_sizes(left, self.shape, dict(sizes), formula)
        flat = self.reshape(tuple(known[n] for g in left for n in g))
        order = [n for g in left for n in g]
        flat = flat.permute(tuple(order.index(n) for g in right for n in g))
        return flat.reshape(tuple(prod(known[n] for n in g) for g in right))


def _parse_side(side: str, formula: str) -> list[list[str]]:
    """Groups of axis names: "b (h w) 1" -> [["b"], ["h", "w"], []]."""
    text = side.replace("…", "...").replace("(", " ( ").replace(")", " ) ")
    groups: list[list[str]] = []
    current: list[str] | None = None
    for tok in text.split():
        if tok == "(":
            if current is not None:
                raise ValueError(f"rearrange: nested brackets in {formula!r}")
            current = []
        elif tok == ")":
            if current is None:
                raise ValueError(f"rearrange: unbalanced brackets in {formula!r}")
            groups.append(current)
            current = None
        elif tok == "1":
            if current is None:
                groups.append([])  # a size-1 axis with no name
        elif tok == "..." or tok.isidentifier():
            if current is None:
                groups.append([tok])
            else:
                current.append(tok)
        else:
            raise ValueError(f"rearrange: invalid axis name {tok!r} in {formula!r}")
    if current is not None:
        raise ValueError(f"rearrange: unbalanced brackets in {formula!r}")
    names = [n for g in groups for n in g]
    if len(names) != len(set(names)):
        raise ValueError(f"rearrange: an axis name repeats in {side.strip()!r} of {formula!r}")
    return groups


def _expand_ellipsis(
    left: list[list[str]], right: list[list[str]], ndim: int, formula: str
) -> tuple[list[list[str]], list[list[str]]]:
    """Replace "..." by one name per dim it covers; check the left side has one group per dim."""
    if ["..."] not in left:
        if len(left) != ndim:
            raise ValueError(f"rearrange: {formula!r} has {len(left)} axes on the left, the tensor {ndim} dims")
        return left, right
    count = ndim - (len(left) - 1)
    if count < 0:
        raise ValueError(f"rearrange: {formula!r} has more axes on the left than the tensor's {ndim} dims")
    names = [f"...{i}" for i in range(count)]
    i = left.index(["..."])
    new_left = left[:i] + [[n] for n in names] + left[i + 1 :]
    new_right: list[list[str]] = []
    for g in right:
        if g == ["..."]:
            new_right.extend([n] for n in names)
        else:
            new_right.append([m for n in g for m in (names if n == "..." else [n])])
    return new_left, new_right


def _axis_sizes(left: list[list[str]], shape: tuple[Any, ...], known: dict[str, int], formula: str) -> dict[str, int]:
    """The size of every axis name, inferring at most one unknown per bracket group."""
    for group, dim in zip(left, shape):
        dim = int(dim)
        unknown = [n for n in group if n not in known]
        rest = prod(known[n] for n in group if n in known)
        if len(unknown) > 1:
            raise ValueError(f"rearrange: cannot infer the sizes of {unknown} in {formula!r}: give all but one")
        if unknown:
            if rest == 0 or dim % rest:
                raise ValueError(f"rearrange: dim of size {dim} cannot be split into {group} in {formula!r}")
            known[unknown[0]] = dim // rest
        elif rest != dim:
            raise ValueError(f"rearrange: group {group} has size {rest}, the dim is {dim} in {formula!r}")
    return known
