# mypy: disable-error-code="misc"
# (mixin methods annotate `self: Tensor`, the class they are mixed into; mypy flags that as "misc")
"""Neural-network functions: normalization, dropout, attention, interpolation, losses.

>>> from tg_tensor import Tensor
>>> logits = Tensor([[2.0, 0.0], [0.0, 2.0]])
>>> round(logits.sparse_categorical_crossentropy(Tensor([0, 1])).item(), 4)
0.1269
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tg_tensor.conv import ConvMixin
from tg_tensor.engine.util import ArgumentError, ShapeError, resolve_axes
from tg_tensor.gradient import custom_gradient
from tg_tensor.rng import RandomState, to_unit_float
from tg_uop import dtypes

if TYPE_CHECKING:
    from tg_tensor.tensor import Tensor


def _sum_to(t: Tensor, shape: tuple[int, ...]) -> Tensor:
    """`t` summed over the axes along which a tensor of `shape` was broadcast to t's shape."""
    lead = t.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape) if s == 1 and t.shape[lead + i] != 1)
    return t.sum(axes).reshape(shape) if axes else t


def _layernorm_grad(
    axes: tuple[int, ...], mean: Tensor, rstd: Tensor, has_weight: bool, ret: Tensor, g: Tensor, x: Tensor, *wb: Tensor
) -> tuple[Tensor, ...]:
    """Gradients of layernorm to x (and weight, bias): with xhat = (x - mean) * rstd and gy = g * weight,
    dx = rstd * (gy - mean(gy) - xhat * mean(gy * xhat)) over the normalized axes."""
    xhat = (x - mean) * rstd
    gy = g * wb[0] if has_weight else g
    dx = rstd * (gy - gy.mean(axes, keepdim=True) - xhat * (gy * xhat).mean(axes, keepdim=True))
    grads = [dx]
    if has_weight:
        grads.append(_sum_to(g * xhat, tuple(int(s) for s in wb[0].shape)))
    if len(wb) > int(has_weight):
        grads.append(_sum_to(g, tuple(int(s) for s in wb[-1].shape)))
    return tuple(grads)


def _reduce_loss(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.mean()
    raise ValueError(f"reduction must be 'none', 'sum' or 'mean', got {reduction!r}")


class NNMixin(ConvMixin):
    """layernorm, batchnorm, dropout, scaled_dot_product_attention, interpolate and the losses."""

    __slots__ = ()

    def sequential(self: Tensor, ll: list[Callable[[Tensor], Tensor]]) -> Tensor:
        """Apply each callable in turn: `x.sequential([conv, Tensor.relu, lambda t: t.flatten(1)])`."""
        x = self
        for layer in ll:
            x = layer(x)
        return x

    def layernorm(
        self: Tensor,
        axis: int | tuple[int, ...] = -1,
        eps: float = 1e-5,
        *,
        weight: Tensor | None = None,
        bias: Tensor | None = None,
    ) -> Tensor:
        """(x - mean) / sqrt(var + eps) over `axis` (population variance), times `weight` plus `bias` where given
        (broadcast against x, as nn.LayerNorm's over the trailing axes).

        Its gradients come from the normalized x, recomputed from x, the mean and 1/sqrt(var + eps) of the forward
        pass (`_layernorm_grad`), as PyTorch's fused layer norm does: the backward kernels read x and two numbers
        per row, and the weight's and bias' gradients are plain reductions (autograd through the formula gave the
        GPT step one more kernel per layer norm).

        >>> from tg_tensor import Tensor
        >>> [round(v, 3) for v in Tensor([[1.0, 2.0, 3.0]]).layernorm(weight=Tensor([1.0, 1.0, 2.0])).tolist()[0]]
        [-1.225, 0.0, 2.449]
        """
        axes = resolve_axes(axis, self.ndim)
        mean = self.mean(axes, keepdim=True)
        xc = self - mean
        rstd = ((xc * xc).mean(axes, keepdim=True) + eps).rsqrt()
        ret = xc * rstd
        ret = ret if weight is None else ret * weight
        ret = ret if bias is None else ret + bias
        inputs = (self, *(t for t in (weight, bias) if t is not None))
        if not any(t.requires_grad for t in inputs):
            return ret
        rule = functools.partial(_layernorm_grad, axes, mean, rstd, weight is not None)
        return custom_gradient(ret, inputs, rule)

    def batchnorm(
        self: Tensor,
        weight: Tensor | None,
        bias: Tensor | None,
        mean: Tensor,
        invstd: Tensor,
        axis: int | tuple[int, ...] = 1,
    ) -> Tensor:
        """(x - mean) * invstd * weight + bias, with the parameters laid along `axis`."""
        axes = resolve_axes(axis, self.ndim)
        shape = tuple(s if i in axes else 1 for i, s in enumerate(self.shape))
        x = self - mean.reshape(shape)
        if weight is not None:
            x = x * weight.reshape(shape)
        ret = x * (invstd.reshape(shape) if invstd.ndim == len(axes) else invstd)
        return ret + bias.reshape(shape) if bias is not None else ret

    def dropout(self: Tensor, p: float = 0.5, state: RandomState | None = None) -> Tensor:
        """Zero elements with probability p and scale the rest by 1/(1-p); a no-op unless Tensor.training.

        The mask comes from the global random stream (`Tensor.manual_seed`), or from `state` when given
        (a stream of its own, as `tg_nn.Dropout(p, seed=...)` uses). The one dropout of tg.

        >>> from tg_tensor import Tensor
        >>> with Tensor.train():
        ...     sorted(set(Tensor.ones(100).dropout(0.5).tolist()))
        [0.0, 2.0]
        """
        if not 0 <= p <= 1:
            raise ValueError(f"dropout: p must be in [0, 1], got {p}")
        if not type(self).training or p == 0:
            return self
        if p == 1:
            return self.zeros_like()
        if state is None:
            uniform = type(self).rand(*self.shape, device=self.device)
        else:
            shape = tuple(int(s) for s in self.shape)
            bits, _ = state.bits(shape, self.device)
            uniform = type(self)(to_unit_float(bits, shape, self.device))
        # the mask is stored (a byte per element), not recomputed from the random stream by every kernel that reads
        # it (the forward's and the backward's: ~100 integer operations per element each time)
        keep = (uniform >= p).contiguous()
        return keep.where(self, 0) * (1 / (1 - p))

    def scaled_dot_product_attention(
        self: Tensor,
        key: Tensor,
        value: Tensor,
        attn_mask: Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        enable_gqa: bool = False,
    ) -> Tensor:
        """softmax(q k^T / sqrt(d) + mask) v; a bool mask keeps True positions, is_causal keeps j <= i.

        enable_gqa: key and value may have fewer heads (dim -3) than the query; each serves a group of them.
        """
        if enable_gqa and self.ndim >= 3 and key.shape[-3] != self.shape[-3]:
            heads, kv = int(self.shape[-3]), int(key.shape[-3])
            if kv == 0 or heads % kv or value.shape[-3] != kv:
                msg = f"{heads} query heads cannot be grouped over {kv} key heads"
                raise ValueError(f"scaled_dot_product_attention: {msg}")
            key, value = key.repeat_interleave(heads // kv, -3), value.repeat_interleave(heads // kv, -3)
        scores = self @ key.transpose(-2, -1) / math.sqrt(int(self.shape[-1]))
        if is_causal and attn_mask is not None:
            raise ArgumentError("scaled_dot_product_attention: attn_mask cannot be given with is_causal=True")
        if is_causal:
            causal = type(self).ones(int(self.shape[-2]), int(key.shape[-2]), dtype=dtypes.bool, device=self.device)
            scores = causal.tril().where(scores, -math.inf)
        if attn_mask is not None:
            scores = attn_mask.where(scores, -math.inf) if attn_mask.dtype == dtypes.bool else scores + attn_mask
        return scores.softmax(-1).dropout(dropout_p) @ value

    def interpolate(self: Tensor, size: tuple[int, ...], mode: str = "linear", align_corners: bool = False) -> Tensor:
        """Resize the last len(size) dims ("nearest", "nearest-exact" or "linear", one dim at a time); the result
        has the input's dtype (ints computed in float and cast back; uint8 lerps in fixed point, as tinygrad).

        >>> from tg_tensor import Tensor
        >>> Tensor([[0.0, 2.0]]).interpolate((3,), align_corners=True).tolist()
        [[0.0, 1.0, 2.0]]
        """
        if mode not in ("nearest", "nearest-exact", "linear"):
            raise ValueError(f"interpolate: mode must be 'nearest', 'nearest-exact' or 'linear', got {mode!r}")
        if len(size) > self.ndim:
            raise ValueError(f"interpolate: size {size} has more dims than the input shape {self.shape}")
        x = self
        for j, out in reversed(list(enumerate(size))):  # the last dim first, as tinygrad (uint8 rounds per dim)
            ax = self.ndim - len(size) + j
            x = x._resize_axis(ax, int(out), mode, align_corners)
        return x if x.dtype == self.dtype else x.cast(self.dtype)

    def _resize_axis(self: Tensor, ax: int, out: int, mode: str, align_corners: bool) -> Tensor:
        import numpy as np

        n = int(self.shape[ax])
        dst = np.arange(out, dtype=np.float64)
        if mode.startswith("nearest"):
            offset = 0.5 if mode == "nearest-exact" else 0.0
            src = np.minimum(np.floor((dst + offset) * n / out), n - 1).astype(int)
            return self[(slice(None),) * ax + (src.tolist(),)]
        if align_corners:
            pos = dst * ((n - 1) / (out - 1)) if out > 1 else np.zeros(out)
        else:
            pos = np.maximum((dst + 0.5) * (n / out) - 0.5, 0)
        lo = np.minimum(np.floor(pos).astype(int), n - 1)
        hi = np.minimum(lo + 1, n - 1)
        w = (pos - lo).astype(np.float32).reshape((out,) + (1,) * (self.ndim - ax - 1))
        if self.dtype == dtypes.uint8:  # fixed-point lerp, uint8 in and out (tinygrad's, PyTorch's rounding)
            lo_u8 = self[(slice(None),) * ax + (lo.tolist(),)]
            hi_u8 = self[(slice(None),) * ax + (hi.tolist(),)]
            return lo_u8.lerp(hi_u8, type(self)(w, device=self.device)._broadcast_to(lo_u8.shape))
        x = self._float()
        x_lo = x[(slice(None),) * ax + (lo.tolist(),)]
        x_hi = x[(slice(None),) * ax + (hi.tolist(),)]
        wt = type(self)(w, device=self.device).cast(x.dtype)
        return x_lo * (1 - wt) + x_hi * wt

    # ---- losses ----
    def cross_entropy(self: Tensor, Y: Tensor, reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
        """Cross entropy of logits (N, C, ...) with class indices (N, ...) or probabilities (N, C, ...)."""
        if not 0 <= label_smoothing <= 1:
            raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
        classes = int(self.shape[1]) if self.ndim > 1 else int(self.shape[0])
        cls_axis = 1 if self.ndim > 1 else 0
        want = self.shape if Y.ndim == self.ndim else self.shape[:cls_axis] + self.shape[cls_axis + 1 :]
        if Y.shape != want:
            kind = "probabilities" if Y.ndim == self.ndim else "class indices"
            raise ShapeError(f"cross_entropy: {kind} of shape {Y.shape} for logits {self.shape}: expected {want}")
        if Y.ndim < self.ndim:
            Y = Y.one_hot(classes).cast(self._float().dtype)
            Y = Y.permute((0, Y.ndim - 1, *range(1, Y.ndim - 1))) if Y.ndim > 2 else Y
        Y = (1 - label_smoothing) * Y + label_smoothing / classes
        loss = -(self.log_softmax(cls_axis) * Y).sum(cls_axis)
        return _reduce_loss(loss, reduction)

    def sparse_categorical_crossentropy(
        self: Tensor, Y: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0, reduction: str = "mean"
    ) -> Tensor:
        """Cross entropy of logits (..., C) with int labels (...); labels equal to ignore_index are skipped.

        The mean divides by the number of labels that count.
        """
        if not dtypes.is_int(Y.dtype):
            raise TypeError(f"sparse_categorical_crossentropy: labels must be integers, got dtype {Y.dtype}")
        if Y.shape != self.shape[:-1]:
            raise ValueError(f"sparse_categorical_crossentropy: labels {Y.shape} do not match logits {self.shape}")
        classes = int(self.shape[-1])
        log_probs = self.log_softmax(-1)
        counted = Y.ne(ignore_index)
        hit = (Y.unsqueeze(-1) == type(self).arange(classes, device=self.device)) & counted.unsqueeze(-1)
        nll = hit.where(log_probs, 0).sum(-1)
        smooth = label_smoothing * log_probs.mean(-1)
        loss = counted.where(-(1 - label_smoothing) * nll - smooth, 0)
        if reduction == "mean":
            return loss.sum() / counted.sum().cast(loss.dtype)
        return _reduce_loss(loss, reduction)

    def binary_crossentropy(self: Tensor, Y: Tensor, reduction: str = "mean") -> Tensor:
        """-(Y log p + (1 - Y) log(1 - p)) for probabilities p = self."""
        loss = -(Y * self.log() + (1 - Y) * (1 - self).log())
        return _reduce_loss(loss, reduction)

    def binary_crossentropy_logits(self: Tensor, Y: Tensor, reduction: str = "mean", pos_weight: Any = None) -> Tensor:
        """binary_crossentropy of sigmoid(self), computed stably from the logits."""
        log_p, log_not_p = self.logsigmoid(), (-self).logsigmoid()
        pos = Y * log_p if pos_weight is None else Y * log_p * pos_weight
        return _reduce_loss(-(pos + (1 - Y) * log_not_p), reduction)
