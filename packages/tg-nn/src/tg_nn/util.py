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
    return own_buffers([t], requires_grad)[0]


def own_buffers(ts: list[Tensor], requires_grad: bool | None = None) -> list[Tensor]:
    """`own_buffer` of each tensor, realized together: one schedule, so the kernels that a new process has to
    compile (a layer's weight and bias, an optimizer's state) are built in one batch instead of one by one.

    >>> w, b = own_buffers([Tensor.ones(2, 2), Tensor.zeros(2)])
    >>> w.tolist(), b.tolist()
    ([[1.0, 1.0], [1.0, 1.0]], [0.0, 0.0])
    """
    rets = [t.empty_like() for t in ts]  # (on several devices: split as t is)
    for ret, t in zip(rets, ts):
        ret.assign(t.detach())
    if rets:
        Tensor.realize(*rets)
    for ret in rets:
        ret.requires_grad = requires_grad
    return rets
