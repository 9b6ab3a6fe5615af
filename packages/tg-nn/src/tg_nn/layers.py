"""Layers. Linear uses tinygrad's default initialisation: uniform in +-1/sqrt(in_features).

>>> from tg_nn.layers import Linear
>>> Linear(4, 2).weight.shape
(2, 4)
"""

from __future__ import annotations

import math

import numpy as np

from tg_tensor import Tensor


class Linear:
    """y = x @ weight.T + bias, for inputs of shape (..., in_features)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, seed: int | None = None) -> None:
        if in_features <= 0 or out_features <= 0:
            raise ValueError(f"Linear: feature counts must be positive, got in={in_features} out={out_features}")
        rng = np.random.default_rng(seed)
        bound = 1 / math.sqrt(in_features)
        self.in_features, self.out_features = in_features, out_features
        self.weight = Tensor(rng.uniform(-bound, bound, (out_features, in_features)).astype(np.float32))
        self.bias = Tensor(rng.uniform(-bound, bound, (out_features,)).astype(np.float32)) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        if not x.shape or x.shape[-1] != self.in_features:
            raise ValueError(f"Linear: input shape {x.shape} does not end in in_features={self.in_features}")
        # matmul as broadcast-multiply then sum over the shared axis: one fused kernel
        w = self.weight.reshape((1,) * (x.ndim - 1) + (self.out_features, self.in_features))
        y = (x.reshape(x.shape[:-1] + (1, self.in_features)) * w).sum(axis=-1)
        return y + self.bias if self.bias is not None else y
