# mypy: disable-error-code="misc"
# (mixin methods annotate `self: Tensor`, the class they are mixed into; mypy flags that as "misc")
"""Matrix decompositions from tensor ops (qr, svd, newton_schulz) and small tensor utilities tinygrad has
(replace, to_, invalids, max_shape, max_numel).

qr is Householder reflections, one per column; svd is one-sided Jacobi rotations (a fixed number of
sweeps over all column pairs). Both unroll into a graph of O(n) (qr) or O(sweeps * n^2) (svd) steps:
meant for the small matrices of model code, on every device, batched over leading dims.

>>> from tg_tensor import Tensor
>>> q, r = Tensor([[3.0, 0.0], [4.0, 5.0]]).qr()
>>> [round(v, 4) for v in (q @ r).flatten().tolist()]
[3.0, 0.0, 4.0, 5.0]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tg_uop import DType, dtypes
from tg_uop.helpers import prod

if TYPE_CHECKING:
    from tg_tensor.tensor import Tensor

SVD_SWEEPS = 12  # one-sided Jacobi converges quadratically; 12 sweeps reach float32 precision for n <= 64


def _eye_like(x: Tensor, n: int) -> Tensor:
    eye = type(x).eye(n, dtype=x.dtype, device=x.device)
    return eye.reshape(*([1] * (x.ndim - 2)), n, n).expand(*x.shape[:-2], n, n)


class DecompMixin:
    """qr, svd, newton_schulz and utilities."""

    __slots__ = ()

    def _need_matrix(self: Tensor, what: str) -> None:
        if self.ndim < 2:
            raise RuntimeError(f"{what}: expected a matrix (or a batch of them), got shape {self.shape}")
        if not dtypes.is_float(self.dtype):
            raise RuntimeError(f"{what}: expected a float tensor, got {self.dtype}")

    def qr(self: Tensor) -> tuple[Tensor, Tensor]:
        """Q (m, m) orthogonal and R (m, n) upper triangular with self = Q @ R (Householder; full mode, as tinygrad).

        >>> from tg_tensor import Tensor
        >>> q, r = Tensor([[1.0, 2.0], [3.0, 4.0]]).qr()
        >>> float(round(abs(r.numpy()[1, 0]), 6))
        0.0
        """
        self._need_matrix("qr")
        m, n = int(self.shape[-2]), int(self.shape[-1])
        r, q = self, _eye_like(self, m)
        rows = type(self).arange(m, device=self.device).reshape(m, 1)
        for j in range(min(m - 1, n)):
            below = (rows >= j).cast(self.dtype)  # the rows the reflection works on
            col = r[..., :, j : j + 1] * below  # (..., m, 1)
            norm = (col * col).sum(-2, keepdim=True).sqrt()
            top = r[..., j : j + 1, j : j + 1]
            sign = (top >= 0).where(1.0, -1.0).cast(self.dtype)
            e_j = (rows == j).cast(self.dtype)
            v = col + sign * norm * e_j  # Householder vector: reflects col onto -sign*norm*e_j
            vv = (v * v).sum(-2, keepdim=True)
            scale = (vv > 0).where(2.0 / vv.maximum(1e-30), 0.0)  # a zero column needs no reflection
            r = r - v * (scale * (v * r).sum(-2, keepdim=True))
            q = q - (q @ v) * (scale * v.transpose(-1, -2))
        return q, r

    def svd(self: Tensor, full_matrices: bool = True) -> tuple[Tensor, Tensor, Tensor]:
        """U, S, V^T with self = U @ diag(S) @ V^T, S descending (one-sided Jacobi).

        full_matrices=False gives U (m, k), V^T (k, n) with k = min(m, n); True completes U and V^T to square
        orthogonal matrices (as torch; the extra columns are any orthonormal completion).

        >>> from tg_tensor import Tensor
        >>> [round(s, 4) for s in Tensor([[3.0, 0.0], [0.0, 4.0]]).svd()[1].tolist()]
        [4.0, 3.0]
        """
        self._need_matrix("svd")
        m, n = int(self.shape[-2]), int(self.shape[-1])
        if m < n:  # work on the transpose: A^T = V S U^T
            u, s, vt = self.transpose(-1, -2).svd(full_matrices)
            return vt.transpose(-1, -2), s, u.transpose(-1, -2)
        a, v = self, _eye_like(self, n)
        for _ in range(SVD_SWEEPS if n > 2 else n - 1):  # two columns: one rotation is exact
            for p in range(n - 1):
                for q_ in range(p + 1, n):
                    a, v = _rotate(a, v, p, q_)
        norms = (a * a).sum(-2).sqrt()  # (..., n): the singular values, unsorted
        order = norms.argsort(-1, descending=True)
        s = norms.gather(-1, order)
        pick = order.unsqueeze(-2).expand(*a.shape[:-2], m, n)
        u = a.gather(-1, pick) / s.unsqueeze(-2).maximum(1e-30)
        vt = v.gather(-1, order.unsqueeze(-2).expand(*v.shape[:-2], n, n)).transpose(-1, -2)
        if full_matrices and m > n:
            u = _complete_basis(u)
        return u, s, vt

    def newton_schulz(self: Tensor, steps: int, params: tuple[float, ...], eps: float = 1.0e-7) -> Tensor:
        """Newton-Schulz iteration of an odd polynomial (coefficients `params`) toward the orthogonal polar factor.

        Each step maps G to sum_i params[i] * (G G^T)^i G (Muon uses params (3.4445, -4.7750, 2.0315)).
        """
        if self.ndim < 2:
            raise RuntimeError(f"newton_schulz: expected a matrix (or a batch), got shape {self.shape}")
        if self.shape[-2] > self.shape[-1]:
            return self.transpose(-2, -1).newton_schulz(steps, params, eps).transpose(-2, -1)
        g = self / ((self * self).sum((-2, -1), keepdim=True).sqrt() + eps)
        for _ in range(steps):
            gram = g @ g.transpose(-2, -1)
            term, total = g, None
            for c in params:
                total = term * c if total is None else total + term * c
                term = gram @ term
            g = total if total is not None else g
        return g

    # ---- utilities ----
    def replace(self: Tensor, x: Tensor) -> Tensor:
        """Make this tensor stand for `x` (same shape; dtype and device may differ); returns self.

        >>> from tg_tensor import Tensor
        >>> t = Tensor([1, 2])
        >>> t.replace(Tensor([3.0, 4.0])).tolist()
        [3.0, 4.0]
        """
        if not isinstance(x, type(self)):
            raise TypeError(f"replace: expected a Tensor, got {type(x).__name__}")
        if x.shape != self.shape:
            raise RuntimeError(f"replace: shape {x.shape} does not match the tensor's shape {self.shape}")
        self.uop = x.uop
        return self

    def to_(self: Tensor, device: str | tuple[str, ...] | None) -> Tensor:
        """Move this tensor (and its .grad) to `device` in place; returns self."""
        moved = self.to(device) if device is not None else self
        if self.grad is not None:
            self.grad.to_(device)
        return self.replace(moved)

    @classmethod
    def invalids(cls: type[Tensor], *shape: Any, device: str | None = None, dtype: DType | str | None = None) -> Tensor:
        """A tensor whose values are unspecified (tinygrad's Invalid fill): tg gives an empty buffer."""
        return cls.empty(*shape, device=device, dtype=dtype)

    @property
    def max_shape(self: Tensor) -> tuple[int, ...]:
        """The shape with every symbolic dim replaced by its largest value."""
        return tuple(int(s) if isinstance(s, int) else int(s.vmax) for s in self.shape)

    def max_numel(self: Tensor) -> int:
        """The number of elements of max_shape."""
        return int(prod(self.max_shape))


def _rotate(a: Tensor, v: Tensor, p: int, q: int) -> tuple[Tensor, Tensor]:
    """One Jacobi rotation of columns p and q of `a` (and `v`) that makes them orthogonal."""
    ap, aq = a[..., :, p : p + 1], a[..., :, q : q + 1]
    alpha = (ap * ap).sum(-2, keepdim=True)
    beta = (aq * aq).sum(-2, keepdim=True)
    gamma = (ap * aq).sum(-2, keepdim=True)
    small = gamma.abs() <= 1e-30
    zeta = (beta - alpha) / (2 * gamma + small.cast(a.dtype))
    t = zeta.sign().where(zeta.sign(), 1.0) / (zeta.abs() + (1 + zeta * zeta).sqrt())
    t = small.where(0.0, t)
    c = 1 / (1 + t * t).sqrt()
    s = c * t
    # a kernel boundary per rotation: each reads its input three times, so fusing a chain would recompute it
    return _mix(a, p, q, c, s).contiguous(), _mix(v, p, q, c, s).contiguous()


def _mix(x: Tensor, p: int, q: int, c: Tensor, s: Tensor) -> Tensor:
    """Replace columns p, q of x by c*xp - s*xq and s*xp + c*xq."""
    n = int(x.shape[-1])
    cols = type(x).arange(n, device=x.device)
    xp, xq = x[..., :, p : p + 1], x[..., :, q : q + 1]
    new_p, new_q = c * xp - s * xq, s * xp + c * xq
    return (cols == p).where(new_p, (cols == q).where(new_q, x))


def _complete_basis(u: Tensor) -> Tensor:
    """Extend orthonormal columns u (..., m, k) to an (m, m) orthogonal matrix.

    The Q of [u | I] is orthogonal and its first k columns span u's space, so its other columns complete u.
    """
    m, k = int(u.shape[-2]), int(u.shape[-1])
    q = u.cat(_eye_like(u, m), dim=-1).qr()[0]
    return u.cat(q[..., :, k:], dim=-1)
