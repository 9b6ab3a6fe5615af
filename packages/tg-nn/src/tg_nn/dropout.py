"""Dropout as a layer: `Tensor.dropout` with its p (and, optionally, a random stream of its own).

Its mask is made on the device (Threefry-2x32 of a seed and a call counter in device buffers), so
it works inside TinyJit: every call, and every replay, gets a new mask.

>>> from tg_tensor import Tensor
>>> drop = Dropout(0.5, seed=1)
>>> with Tensor.train():
...     a, b = drop(Tensor.ones(1000)).numpy(), drop(Tensor.ones(1000)).numpy()
>>> sorted(set(a.tolist())), 400 < int((a == 0).sum()) < 600, bool((a != b).any())
([0.0, 2.0], True, True)
"""

from __future__ import annotations

from tg_tensor import Tensor
from tg_tensor.rng import RandomState


class Dropout:
    """Zero each element with probability p in training (`Tensor.training`) and scale the rest by 1/(1-p).

    With `seed=None` (the default) the mask comes from the global stream (`Tensor.manual_seed`);
    with a seed, from a stream of this layer's own (two layers with one seed drop the same elements).
    """

    def __init__(self, p: float = 0.5, seed: int | None = None) -> None:
        if not 0 <= p <= 1:  # (Tensor.dropout's range: p=1 drops everything, as in torch)
            raise ValueError(f"Dropout: p must be in [0, 1], got {p}")
        self.p = p
        self.state = RandomState(seed) if seed is not None else None

    def __call__(self, x: Tensor) -> Tensor:
        return x.dropout(self.p, self.state)
