"""Normalisation layers: BatchNorm, LayerNorm (and LayerNorm2d), GroupNorm, InstanceNorm, RMSNorm.

Affine weights start at one and biases at zero, as in tinygrad and PyTorch.

>>> from tg_tensor import Tensor
>>> LayerNorm(4)(Tensor([[1.0, 2.0, 3.0, 4.0]])).shape
(1, 4)
"""

from __future__ import annotations

from tg_nn.util import own_buffer
from tg_tensor import Tensor
from tg_uop import dtypes


def _check_channels(name: str, x: Tensor, channels: int) -> None:
    if x.ndim < 2 or x.shape[1] != channels:
        raise ValueError(f"{name}: expected input of shape (N, {channels}, ...), got {x.shape}")


class BatchNorm:
    """Normalise over the batch (and spatial) axes per channel of (N, C, ...) inputs.

    In training mode (`Tensor.training`) it uses the batch statistics and updates the running ones
    in place (realized with the optimizer's step); otherwise it uses the running statistics.
    """

    def __init__(
        self, sz: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True, momentum: float = 0.1
    ) -> None:
        if not isinstance(sz, int) or sz <= 0:
            raise ValueError(f"BatchNorm: the number of channels must be a positive int, got {sz!r}")
        self.sz, self.eps, self.track_running_stats, self.momentum = sz, eps, track_running_stats, momentum
        self.weight: Tensor | None = own_buffer(Tensor.ones(sz)) if affine else None
        self.bias: Tensor | None = own_buffer(Tensor.zeros(sz)) if affine else None
        if track_running_stats:
            self.running_mean = own_buffer(Tensor.zeros(sz), False)
            self.running_var = own_buffer(Tensor.ones(sz), False)
            self.num_batches_tracked = own_buffer(Tensor.zeros(1, dtype=dtypes.int32), False)

    def __call__(self, x: Tensor) -> Tensor:
        _check_channels("BatchNorm", x, self.sz)
        axes = tuple(i for i in range(x.ndim) if i != 1)
        shape = (1, self.sz) + (1,) * (x.ndim - 2)
        if Tensor.training or not self.track_running_stats:
            mean = x.mean(axis=axes)
            centered = x - mean.reshape(shape)
            var = (centered * centered).mean(axis=axes)
            if Tensor.training and self.track_running_stats:
                self._update_running(mean, var, x.numel() // self.sz)
        else:
            mean, var = self.running_mean, self.running_var
        return x.batchnorm(self.weight, self.bias, mean, (var + self.eps).rsqrt())

    def _update_running(self, mean: Tensor, var: Tensor, n: int) -> None:
        m = self.momentum
        unbiased = var.detach() * (n / max(n - 1, 1))
        self.running_mean.assign((1 - m) * self.running_mean + m * mean.detach())
        self.running_var.assign((1 - m) * self.running_var + m * unbiased)
        self.num_batches_tracked.assign(self.num_batches_tracked + 1)


BatchNorm2d = BatchNorm
BatchNorm1d = BatchNorm
BatchNorm3d = BatchNorm


class LayerNorm:
    """Normalise over the last len(normalized_shape) axes, then scale and shift elementwise."""

    def __init__(self, normalized_shape: int | tuple[int, ...], eps: float = 1e-5, elementwise_affine: bool = True):
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        if not self.normalized_shape or not all(isinstance(s, int) and s > 0 for s in self.normalized_shape):
            raise ValueError(f"LayerNorm: normalized_shape must be positive ints, got {normalized_shape!r}")
        self.axis = tuple(-1 - i for i in range(len(self.normalized_shape)))
        self.eps = eps
        self.weight = own_buffer(Tensor.ones(*self.normalized_shape)) if elementwise_affine else None
        self.bias = own_buffer(Tensor.zeros(*self.normalized_shape)) if elementwise_affine else None

    def __call__(self, x: Tensor) -> Tensor:
        if tuple(x.shape[-len(self.normalized_shape) :]) != self.normalized_shape:
            raise ValueError(f"LayerNorm: input shape {x.shape} does not end in {self.normalized_shape}")
        return x.layernorm(axis=self.axis, eps=self.eps, weight=self.weight, bias=self.bias)


class LayerNorm2d(LayerNorm):
    """LayerNorm over the channels of (N, C, H, W) inputs."""

    def __call__(self, x: Tensor) -> Tensor:
        return super().__call__(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class GroupNorm:
    """Split the channels of (N, C, ...) into groups and normalise each group per sample."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True) -> None:
        if num_groups <= 0 or num_channels <= 0 or num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_groups={num_groups} must divide num_channels={num_channels}")
        self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
        self.weight = own_buffer(Tensor.ones(num_channels)) if affine else None
        self.bias = own_buffer(Tensor.zeros(num_channels)) if affine else None

    def __call__(self, x: Tensor) -> Tensor:
        _check_channels("GroupNorm", x, self.num_channels)
        y = x.reshape(x.shape[0], self.num_groups, -1).layernorm(eps=self.eps).reshape(x.shape)
        if self.weight is None or self.bias is None:
            return y
        shape = (1, -1) + (1,) * (x.ndim - 2)
        return y * self.weight.reshape(shape) + self.bias.reshape(shape)


class InstanceNorm:
    """Normalise each channel of each sample of (N, C, ...) over its spatial axes."""

    def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True) -> None:
        if num_features <= 0:
            raise ValueError(f"InstanceNorm: num_features must be positive, got {num_features}")
        self.num_features, self.eps = num_features, eps
        self.weight = own_buffer(Tensor.ones(num_features)) if affine else None
        self.bias = own_buffer(Tensor.zeros(num_features)) if affine else None

    def __call__(self, x: Tensor) -> Tensor:
        _check_channels("InstanceNorm", x, self.num_features)
        y = x.reshape(x.shape[0], self.num_features, -1).layernorm(eps=self.eps).reshape(x.shape)
        if self.weight is None or self.bias is None:
            return y
        shape = (1, -1) + (1,) * (x.ndim - 2)
        return y * self.weight.reshape(shape) + self.bias.reshape(shape)


class RMSNorm:
    """x / sqrt(mean(x^2, last axis) + eps) * weight."""

    def __init__(self, dim: int, eps: float = 1e-6, elementwise_affine: bool = True) -> None:
        if dim <= 0:
            raise ValueError(f"RMSNorm: dim must be positive, got {dim}")
        self.dim, self.eps = dim, eps
        self.weight = own_buffer(Tensor.ones(dim)) if elementwise_affine else None

    def __call__(self, x: Tensor) -> Tensor:
        if not x.shape or x.shape[-1] != self.dim:
            raise ValueError(f"RMSNorm: input shape {x.shape} does not end in dim={self.dim}")
        y = x * (x.square().mean(axis=-1, keepdim=True) + self.eps).rsqrt()
        return y if self.weight is None else y * self.weight
