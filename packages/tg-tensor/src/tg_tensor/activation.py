# mypy: disable-error-code="misc"
# (mixin methods annotate `self: Tensor`, the class they are mixed into; mypy flags that as "misc")
"""Transcendental functions and activations, built from the elementwise primitives.

asin and erf use the Abramowitz & Stegun polynomial approximations (4.4.46 and 7.1.26;
absolute error below 2e-8 and 1.5e-7).

>>> from tg_tensor import Tensor
>>> Tensor([-1.0, 0.0, 2.0]).relu().tolist()
[0.0, 0.0, 2.0]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tg_tensor.tensor import Tensor

ASIN_COEFFS = (-0.0012624911, 0.0066700901, -0.0170881256, 0.0308918810, -0.0501743046, 0.0889789874, -0.2145988016)
ASIN_C0 = 1.5707963050
ERF_P = 0.3275911
ERF_COEFFS = (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)


def _horner(x: Tensor, coeffs: tuple[float, ...], last: float) -> Tensor:
    """coeffs[0]*x^n + ... + last, evaluated by Horner's rule."""
    acc = x * coeffs[0]
    for c in coeffs[1:]:
        acc = (acc + c) * x
    return acc + last


class ActivationMixin:
    """Trigonometry, hyperbolics, erf, and the activation functions of neural networks."""

    __slots__ = ()

    # ---- trigonometry ----
    def sin(self: Tensor) -> Tensor:
        """The sine, elementwise (radians).

        >>> from tg_tensor import Tensor
        >>> Tensor([0.0]).sin().tolist()
        [0.0]
        """
        from tg_uop import Ops

        return self._float()._unop(Ops.SIN)

    def cos(self: Tensor) -> Tensor:
        """The cosine, elementwise (radians).

        >>> from tg_tensor import Tensor
        >>> round(Tensor([0.0]).cos().item(), 5)
        1.0
        """
        return (math.pi / 2 - self._float()).sin()

    def tan(self: Tensor) -> Tensor:
        """The tangent, elementwise (radians).

        >>> from tg_tensor import Tensor
        >>> Tensor([0.0]).tan().tolist()
        [0.0]
        """
        return self.sin() / self.cos()

    def asin(self: Tensor) -> Tensor:
        """arcsin on [-1, 1] (NaN outside)."""
        return self._float()._odd(lambda a: math.pi / 2 - (1 - a).sqrt() * _horner(a, ASIN_COEFFS, ASIN_C0))

    def acos(self: Tensor) -> Tensor:
        """The inverse cosine, in [0, pi].

        >>> from tg_tensor import Tensor
        >>> round(Tensor([1.0]).acos().item(), 5)
        0.0
        """
        return math.pi / 2 - self.asin()

    def atan(self: Tensor) -> Tensor:
        """The inverse tangent, in (-pi/2, pi/2).

        >>> from tg_tensor import Tensor
        >>> round(Tensor([1.0]).atan().item(), 4)  # pi / 4
        0.7854
        """
        x = self._float()
        return (x / (1 + x * x).sqrt()).asin()

    # ---- hyperbolics ----
    def sinh(self: Tensor) -> Tensor:
        """The hyperbolic sine.

        >>> from tg_tensor import Tensor
        >>> Tensor([0.0]).sinh().tolist()
        [0.0]
        """
        return (self.exp() - (-self).exp()) / 2

    def cosh(self: Tensor) -> Tensor:
        """The hyperbolic cosine.

        >>> from tg_tensor import Tensor
        >>> Tensor([0.0]).cosh().tolist()
        [1.0]
        """
        return (self.exp() + (-self).exp()) / 2

    def tanh(self: Tensor) -> Tensor:
        """The hyperbolic tangent.

        >>> from tg_tensor import Tensor
        >>> Tensor([0.0]).tanh().tolist()
        [0.0]
        """
        return 2.0 * (2.0 * self._float()).sigmoid() - 1.0

    def asinh(self: Tensor) -> Tensor:
        """The inverse hyperbolic sine.

        >>> from tg_tensor import Tensor
        >>> Tensor([0.0]).asinh().tolist()
        [0.0]
        """
        return self._float()._odd(lambda a: (a + (a * a + 1).sqrt()).log())

    def acosh(self: Tensor) -> Tensor:
        """The inverse hyperbolic cosine (x >= 1).

        >>> from tg_tensor import Tensor
        >>> Tensor([1.0]).acosh().tolist()
        [0.0]
        """
        return (self + (self * self - 1).sqrt()).log()

    def atanh(self: Tensor) -> Tensor:
        """The inverse hyperbolic tangent (|x| < 1).

        >>> from tg_tensor import Tensor
        >>> Tensor([0.0]).atanh().tolist()
        [0.0]
        """
        return ((1 + self) / (1 - self)).log() / 2

    def erf(self: Tensor) -> Tensor:
        """The error function (a polynomial approximation, abs error < 1.5e-7).

        >>> from tg_tensor import Tensor
        >>> Tensor([0.0]).erf().tolist()
        [0.0]
        """

        def erf_pos(a: Tensor) -> Tensor:
            t = 1.0 / (1.0 + ERF_P * a)
            return 1.0 - _horner(t, ERF_COEFFS[:-1], ERF_COEFFS[-1]) * t * (-(a * a)).exp()

        return self._float()._odd(erf_pos)

    def _odd(self: Tensor, f: Callable[[Tensor], Tensor]) -> Tensor:
        """The odd function equal to f on x >= 0: sign(x) * f(|x|), with f's slope at 0 (not sign's 0)."""
        neg = self < 0
        y = f(neg.where(-self, self))
        return neg.where(-y, y)

    def _negative_part(self: Tensor) -> Tensor:
        """min(x, 0) with slope 1 at 0, for exp(...) branches: a large x never reaches exp (whose inf
        times the masked-out gradient 0 would be NaN)."""
        return (self > 0).where(0.0, self)

    # ---- activations ----
    def relu(self: Tensor) -> Tensor:
        """max(x, 0) (NaN stays NaN); the gradient is 1 for x > 0 and 0 elsewhere, 0 at 0 as in PyTorch and
        tinygrad (`x.maximum(0)` splits a tie: 0.5 at 0, as torch.maximum).

        >>> from tg_tensor import Tensor
        >>> Tensor([-1.0, 0.0, 2.0]).relu().tolist()
        [0.0, 0.0, 2.0]
        """
        return (self > 0).where(self, self.maximum(0).detach())

    def relu6(self: Tensor) -> Tensor:
        """min(max(x, 0), 6); the gradient is 1 strictly inside (0, 6) and 0 at both ends (PyTorch)."""
        return self.relu()._clip_top(6)

    def _clip_top(self: Tensor, top: float) -> Tensor:
        """min(x, top) with slope 0 at top (PyTorch's hardtanh family); NaN stays NaN."""
        return ((self < top) | self.ne(self)).where(self, top)

    def leaky_relu(self: Tensor, neg_slope: float = 0.01) -> Tensor:
        """x for x >= 0, neg_slope * x below.

        >>> from tg_tensor import Tensor
        >>> Tensor([-2.0, 3.0]).leaky_relu(0.5).tolist()
        [-1.0, 3.0]
        """
        return (self < 0).where(self * neg_slope, self)

    def elu(self: Tensor, alpha: float = 1.0) -> Tensor:
        """x for x > 0, alpha (exp(x) - 1) otherwise (the gradient at 0 is alpha, as in PyTorch)."""
        return (self > 0).where(self, alpha * (self._negative_part().exp() - 1))

    def celu(self: Tensor, alpha: float = 1.0) -> Tensor:
        """max(0, x) + min(0, alpha * (exp(x / alpha) - 1)).

        >>> from tg_tensor import Tensor
        >>> Tensor([0.0, 2.0]).celu().tolist()
        [0.0, 2.0]
        """
        return (self > 0).where(self, alpha * ((self._negative_part() / alpha).exp() - 1))

    def selu(self: Tensor, alpha: float = 1.67326, gamma: float = 1.0507) -> Tensor:
        """Scaled ELU: gamma * elu(x, alpha) with the self-normalizing constants.

        >>> from tg_tensor import Tensor
        >>> Tensor([0.0]).selu().tolist()
        [0.0]
        """
        return gamma * self.elu(alpha)

    def sigmoid(self: Tensor) -> Tensor:
        """1 / (1 + exp(-x)), computed from e = exp(-|x|) <= 1 so that neither the value nor the
        gradient meets an inf far into saturation (the gradient there is 0, never NaN)."""
        x = self._float()
        pos = x >= 0
        e = (pos.where(-x, x) * (1 / math.log(2))).exp2()
        return pos.where(1.0, e) / (1 + e)

    def logsigmoid(self: Tensor) -> Tensor:
        """log(sigmoid(x)), computed as -softplus(-x) (no overflow).

        >>> from tg_tensor import Tensor
        >>> round(Tensor([0.0]).logsigmoid().item(), 4)
        -0.6931
        """
        return -(-self).softplus()

    def hardsigmoid(self: Tensor, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor:
        # alpha x + beta clipped to [0, 1]; the gradient is 0 at both ends (PyTorch)
        """alpha * x + beta clipped to [0, 1].

        >>> from tg_tensor import Tensor
        >>> Tensor([-6.0, 0.0, 6.0]).hardsigmoid().tolist()
        [0.0, 0.5, 1.0]
        """
        return (alpha * self + beta).relu()._clip_top(1.0)

    def gelu(self: Tensor, approximate: str = "tanh") -> Tensor:
        """GELU. approximate="tanh" (tinygrad's default): 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)));
        "none": the exact 0.5x(1 + erf(x / sqrt(2))).

        >>> from tg_tensor import Tensor
        >>> round(Tensor([1.0]).gelu(approximate="none").item(), 4)
        0.8413
        """
        if approximate == "none":
            return 0.5 * self * (1 + (self / math.sqrt(2)).erf())
        if approximate != "tanh":
            raise ValueError(f"gelu: approximate must be 'tanh' or 'none', got {approximate!r}")
        return 0.5 * self * (1 + (math.sqrt(2 / math.pi) * (self + 0.044715 * self * self * self)).tanh())

    def quick_gelu(self: Tensor) -> Tensor:
        """x * sigmoid(1.702 x), GELU's fast approximation.

        >>> from tg_tensor import Tensor
        >>> Tensor([0.0]).quick_gelu().tolist()
        [0.0]
        """
        return self * (self * 1.702).sigmoid()

    def silu(self: Tensor) -> Tensor:
        """x * sigmoid(x) (also called swish).

        >>> from tg_tensor import Tensor
        >>> Tensor([0.0]).silu().tolist()
        [0.0]
        """
        return self * self.sigmoid()

    def swish(self: Tensor) -> Tensor:
        """The same as `silu`: x * sigmoid(x).

        >>> from tg_tensor import Tensor
        >>> Tensor([0.0]).swish().tolist()
        [0.0]
        """
        return self.silu()

    def softplus(self: Tensor, beta: float = 1.0) -> Tensor:
        """log(1 + exp(beta x)) / beta, computed without overflow."""
        bx = self._float() * beta
        pos = bx >= 0  # max(bx, 0) + log(1 + exp(-|bx|)), with the slope 1/2 at 0
        return (pos.where(bx, 0.0) + (1 + pos.where(-bx, bx).exp()).log()) / beta

    def mish(self: Tensor) -> Tensor:
        """x * tanh(softplus(x)).

        >>> from tg_tensor import Tensor
        >>> Tensor([0.0]).mish().tolist()
        [0.0]
        """
        return self * self.softplus().tanh()

    def softsign(self: Tensor) -> Tensor:
        """x / (1 + |x|).

        >>> from tg_tensor import Tensor
        >>> Tensor([-1.0, 3.0]).softsign().tolist()
        [-0.5, 0.75]
        """
        return self / (1 + self.abs())

    def hardswish(self: Tensor) -> Tensor:
        """x * relu6(x + 3) / 6.

        >>> from tg_tensor import Tensor
        >>> Tensor([-4.0, 0.0, 4.0]).hardswish().tolist()
        [-0.0, 0.0, 4.0]
        """
        return self * (self + 3).relu6() * (1 / 6)

    def hardtanh(self: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
        """x clipped to [min_val, max_val].

        >>> from tg_tensor import Tensor
        >>> Tensor([-2.0, 0.5, 2.0]).hardtanh().tolist()
        [-1.0, 0.5, 1.0]
        """
        return self.clip(min_val, max_val)
