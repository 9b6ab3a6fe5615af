"""Helpers shared by the layers and optimizers.

>>> from tg_tensor import Tensor
>>> a, b = own_buffer(Tensor.zeros(2)), own_buffer(Tensor.zeros(2))
>>> _ = a.assign(a + 1).realize()
>>> a.tolist(), b.tolist()
([1.0, 1.0], [0.0, 0.0])
"""

from __future__ import annotations

from tg_tensor import Tensor


def own_buffer(t: Tensor, requires_grad: bool | None = None) -> Tensor:
    """`t`'s values, realized into a buffer of their own, so that in-place updates change nothing else.

    Identical lazy graphs are one node in tg (hash-consing): two `Tensor.zeros(3).contiguous()` would
    share one buffer, and an update of one would show in the other. A fresh empty buffer never does.
    """
    ret = t.empty_like()  # (on several devices: split as t is)
    ret.assign(t.detach()).realize()
    ret.requires_grad = requires_grad
    return ret
