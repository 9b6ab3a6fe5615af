"""Dropout whose random numbers are made on the device, so it works inside TinyJit.

`Tensor.dropout` draws its mask on the host (numpy), and host data is frozen into a TinyJit
recording (TinyJit refuses it). `Dropout` instead hashes element indices with a per-layer counter
that a kernel increments in place on every call: each call, and each replay, gets a new mask.

>>> from tg_tensor import Tensor
>>> drop = Dropout(0.5, seed=1)
>>> with Tensor.train():
...     a, b = drop(Tensor.ones(1000)).numpy(), drop(Tensor.ones(1000)).numpy()
>>> sorted(set(a.tolist())), 400 < int((a == 0).sum()) < 600, bool((a != b).any())
([0.0, 2.0], True, True)
"""

from __future__ import annotations

from tg_nn.util import own_buffer
from tg_tensor import Tensor
from tg_uop import dtypes

_GOLDEN = 0x9E3779B9  # spreads consecutive counters far apart in the index space


def _hash32(x: Tensor) -> Tensor:
    """A 32-bit integer hash with good avalanche (lowbias32); uint32 arithmetic wraps."""
    x = x ^ (x >> 16)
    x = x * 0x7FEB352D
    x = x ^ (x >> 15)
    x = x * 0x846CA68B
    return x ^ (x >> 16)


def random_bits(shape: tuple[int, ...], counter: Tensor) -> Tensor:
    """uint32 pseudo-random bits of `shape`, a pure function of the counter's current value."""
    n = 1
    for s in shape:
        n *= int(s)
    idx = Tensor.arange(n, dtype=dtypes.uint32, device=counter.device)
    return _hash32(idx + counter * _GOLDEN).reshape(shape)


class Dropout:
    """Zero each element with probability p in training (`Tensor.training`) and scale the rest by 1/(1-p)."""

    def __init__(self, p: float = 0.5, seed: int = 0) -> None:
        if not 0 <= p < 1:
            raise ValueError(f"Dropout: p must be in [0, 1), got {p}")
        self.p = p
        self.counter = own_buffer(Tensor([seed * 2654435761 % 2**32], dtype=dtypes.uint32), requires_grad=False)

    def __call__(self, x: Tensor) -> Tensor:
        if not Tensor.training or self.p == 0:
            return x
        if x.device != self.counter.device:
            self.counter = own_buffer(self.counter.to(x.device), requires_grad=False)
        self.counter.assign(self.counter + 1).realize()
        keep = random_bits(tuple(int(s) for s in x.shape), self.counter) >= int(self.p * 2**32)
        return keep.where(x, 0.0) * (1 / (1 - self.p))
