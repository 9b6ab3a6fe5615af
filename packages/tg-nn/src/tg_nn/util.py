"""Helpers shared by the layers and optimizers.

>>> from collections.abc import Iterable

from tg_tensor import Tensor
>>> a, b = own_buffer(Tensor.zeros(2)), own_buffer(Tensor.zeros(2))
>>> _ = a.assign(a + 1).realize()
>>> a.tolist(), b.tolist()
([1.0, 1.0], [0.0, 0.0])
"""

from __future__ import annotations

from collections.abc import Iterable

from tg_tensor import Tensor


def own_buffer(t: Tensor, requires_grad: bool | None = None) -> Tensor:
    """`t`'s values, realized into a buffer of their own, so that in-place updates change nothing else.

    Identical lazy graphs are one node in tg (hash-consing): two `Tensor.zeros(3).contiguous()` would
    share one buffer, and an update of one would show in the other. A fresh empty buffer never does.
    """
    return own_buffers([t], requires_grad)[0]


def own_buffers(ts: Iterable[Tensor], requires_grad: bool | None = None) -> list[Tensor]:
    """`own_buffer` of each tensor, realized together: one schedule, so the kernels that a new process has to
    compile (a layer's weight and bias, an optimizer's state) are built side by side instead of one by one.

    Give a generator when the tensors are random draws (`own_buffers(f() for f in makers)`): nothing then keeps
    a lazy draw alive, which would make the schedule save the random counter it read before the next draw
    moves it on.

    >>> w, b = own_buffers([Tensor.ones(2, 2), Tensor.zeros(2)])
    >>> w.tolist(), b.tolist()
    ([[1.0, 1.0], [1.0, 1.0]], [0.0, 0.0])
    """
    rets = [_assigned_copy(t) for t in ts]
    if rets:
        Tensor.realize(*rets)
    for ret in rets:
        ret.requires_grad = requires_grad
    return rets


def _assigned_copy(t: Tensor) -> Tensor:
    ret = t.empty_like()  # (on several devices: split as t is)
    ret.assign(t.detach())
    return ret


def swiglu(y: Tensor) -> Tensor:
    """silu(gate) * up, where `y`'s last axis holds a gate projection then an up projection (the product of a SwiGLU
    MLP's joined gate/up weights): the activation before its down projection, half as wide as `y`.

    >>> [round(v, 4) for v in swiglu(Tensor([[0.0, 1.0, 2.0, 3.0]])).tolist()[0]]
    [0.0, 2.1932]
    """
    half = int(y.shape[-1]) // 2
    if int(y.shape[-1]) != 2 * half:
        raise ValueError(f"swiglu: the last axis of {y.shape} must be even (a gate half, then an up half)")
    return y[..., :half].silu() * y[..., half:]
