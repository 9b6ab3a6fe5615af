# mypy: disable-error-code="misc"
# (mixin methods annotate `self: Tensor`, the class they are mixed into; mypy flags that as "misc")
"""More elementwise maths and casts: copysign, fmod, log10, logaddexp, isclose/allclose, softmin, normalize.

>>> from tg_tensor import Tensor
>>> Tensor([-3.0, 3.0]).fmod(2).tolist()
[-1.0, 1.0]
>>> Tensor([1.0, 2.0]).isclose(Tensor([1.0, 2.1])).tolist()
[True, False]
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tg_uop import ConstType, DType, Ops, dtypes

if TYPE_CHECKING:
    from tg_tensor.tensor import Tensor, TensorLike


class MathOpsMixin:
    """Elementwise functions tinygrad and PyTorch users expect beyond the primitives."""

    __slots__ = ()

    def copysign(self: Tensor, other: TensorLike) -> Tensor:
        """The magnitude of `self` with the sign of `other` (-0.0 counts as negative), by broadcasting rules.

        >>> from tg_tensor import Tensor
        >>> Tensor([1.0, -2.0]).copysign(Tensor([-0.0, 3.0])).tolist()
        [-1.0, 2.0]
        """
        a, b = self._broadcasted(other)
        negative = b < 0
        if dtypes.is_float(b.dtype):
            negative = negative | (b.eq(0) & (b.reciprocal() < 0))
        magnitude = a.abs()
        return negative.where(-magnitude, magnitude)

    def fmod(self: Tensor, x: TensorLike) -> Tensor:
        """C's remainder: the sign follows the dividend (`%` and `mod` follow the divisor, as Python).

        Floats compute r = a - trunc(a / b) * b (16-bit floats in float32), then correct a quotient that
        rounding pushed across an integer (r of the wrong sign, or |r| >= |b|), as numpy's exact fmod.

        >>> from tg_tensor import Tensor
        >>> Tensor([-7, 7]).fmod(3).tolist()
        [-1, 1]
        """
        a, b = self._broadcasted(x)
        if a.dtype == dtypes.bool:
            a, b = a.cast(dtypes.default_int), b.cast(dtypes.default_int)
        if not dtypes.is_float(a.dtype):
            return a - a.div(b, rounding_mode="trunc") * b
        wide = dtypes.float32 if a.dtype.itemsize < 4 else a.dtype
        af, bf = a.cast(wide), b.cast(wide)
        r = af - af.div(bf, rounding_mode="trunc") * bf
        step = a.sign().cast(wide) * bf.abs()  # one multiple of b, toward the dividend's sign
        r = (r.ne(0) & r.sign().ne(a.sign().cast(wide))).where(r + step, r)
        r = (r.abs() >= bf.abs()).where(r - step, r)
        return r.cast(a.dtype)

    def log10(self: Tensor) -> Tensor:
        """Base-10 logarithm.

        >>> from tg_tensor import Tensor
        >>> Tensor([100.0]).log10().tolist()
        [2.0]
        """
        return self.log2() * math.log10(2)

    def logaddexp(self: Tensor, other: TensorLike) -> Tensor:
        """log(exp(self) + exp(other)) without overflow.

        >>> from tg_tensor import Tensor
        >>> round(Tensor([1000.0]).logaddexp(1000.0).item(), 3)
        1000.693
        """
        a, b = self._float()._broadcasted(other)  # (both float: a float's common dtype with anything is a float)
        m = a.maximum(b).detach()
        m = m.isinf().where(0.0, m)
        return ((a - m).exp() + (b - m).exp()).log() + m

    def isclose(
        self: Tensor, other: TensorLike, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False
    ) -> Tensor:
        """|self - other| <= atol + rtol * |other|, elementwise (infinities are close to themselves).

        >>> from tg_tensor import Tensor
        >>> Tensor([float("nan")]).isclose(float("nan"), equal_nan=True).tolist()
        [True]
        """
        a, b = self._broadcasted(other)
        if not dtypes.is_float(a.dtype):  # (ints and bools compare as floats)
            a, b = a.cast(dtypes.default_float), b.cast(dtypes.default_float)
        finite = a.isfinite() & b.isfinite()
        close = finite & ((a - b).abs() <= atol + rtol * b.abs())
        close = close | ((a.isinf() | b.isinf()) & a.eq(b))
        return close | (a.isnan() & b.isnan()) if equal_nan else close

    def allclose(
        self: Tensor, other: TensorLike, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False
    ) -> Tensor:
        """Whether every element is close (a 0-d bool tensor, as tinygrad).

        >>> from tg_tensor import Tensor
        >>> Tensor([1.0, 2.0]).allclose(Tensor([1.0, 2.0])).item()
        True
        """
        return self.isclose(other, rtol, atol, equal_nan).all()

    def softmin(self: Tensor, axis: int = -1, dtype: DType | str | None = None) -> Tensor:
        """softmax of -x along `axis`.

        >>> from tg_tensor import Tensor
        >>> Tensor([0.0, 0.0]).softmin().tolist()
        [0.5, 0.5]
        """
        return (-self).softmax(axis, dtype)

    def normalize(self: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
        """x / max(||x||_p, eps) along `dim` (p=0 divides by the count of non-zeros).

        >>> from tg_tensor import Tensor
        >>> [round(v, 5) for v in Tensor([[3.0, 4.0]]).normalize().tolist()[0]]
        [0.6, 0.8]
        """
        x = self._float()
        if p == 0:
            norm = x.ne(0).sum(dim, keepdim=True).cast(x.dtype)
        elif p == math.inf:
            norm = x.abs().max(dim, keepdim=True)
        elif p == -math.inf:
            norm = x.abs().min(dim, keepdim=True)
        else:
            norm = x.abs().pow(p).sum(dim, keepdim=True).pow(1 / p)
        return x / norm.maximum(eps)

    # ---- casts and constants ----
    def short(self: Tensor) -> Tensor:
        """Cast to int16."""
        return self.cast(dtypes.int16)

    def bfloat16(self: Tensor) -> Tensor:
        """Cast to bfloat16."""
        return self.cast(dtypes.bfloat16)

    def const_like(self: Tensor, b: ConstType, dtype: DType | str | None = None) -> Tensor:
        """A tensor of this one's shape and device filled with `b` (lazy: a broadcast constant).

        >>> from tg_tensor import Tensor
        >>> Tensor([1, 2]).const_like(7).tolist()
        [7, 7]
        """
        return type(self).full(self.shape, b, self.dtype if dtype is None else dtype, self.device)

    @classmethod
    def const(cls: type[Tensor], b: ConstType, dtype: DType | str | None = None) -> Tensor:
        """A 0-d constant tensor on the default device.

        >>> from tg_tensor import Tensor
        >>> Tensor.const(3).item()
        3
        """
        return cls.full((), b, dtype)

    def contiguous_backward(self: Tensor) -> Tensor:
        """The same tensor; in tinygrad a hint to make the gradient contiguous, which tg's scheduler decides itself."""
        return self

    def alu(self: Tensor, op: Ops, *src: Tensor) -> Tensor:
        """Apply the UOp `op` elementwise to this tensor and `src` (same shapes and dtypes; no broadcasting).

        >>> from tg_tensor import Tensor
        >>> from tg_uop import Ops
        >>> Tensor([1, 2]).alu(Ops.ADD, Tensor([3, 4])).tolist()
        [4, 6]
        """
        for s in src:
            if s.shape != self.shape:
                raise ValueError(f"alu: operand shapes {self.shape} and {s.shape} differ (alu does not broadcast)")
        return type(self)(self.uop.alu(op, *(s.uop for s in src)))
