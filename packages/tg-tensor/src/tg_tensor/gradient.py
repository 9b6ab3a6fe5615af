"""Reverse-mode autograd over the tensor-level UOp graph.

Each rule in GRAD_RULES maps an op to a function of (output, incoming gradient, *sources) that returns
one gradient (or None) per source. The rules are written with Tensor methods, so a gradient is an
ordinary lazy graph that fuses and schedules like any other.

>>> from tg_tensor import Tensor
>>> x = Tensor([3.0], requires_grad=True)
>>> (x * x).sum().gradient(x)[0].tolist()
[6.0]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from tg_tensor.front import front
from tg_uop import Ops, UOp, dtypes
from tg_uop.helpers import argsort

if TYPE_CHECKING:
    from tg_tensor.tensor import Tensor

Grads = tuple["Tensor | None", ...]
Rule = Callable[..., Grads]
LN2 = math.log(2)


def _max_grad(ret: Tensor, g: Tensor, a: Tensor, b: Tensor) -> Grads:
    """Ties split the gradient evenly, as in tinygrad and torch.maximum, also against a constant
    (`x.maximum(0)` has slope 0.5 at 0; relu is not a MAX: its slope at 0 is 0, see Tensor.relu)."""
    share = (a > b).where(1.0, (a == b).where(0.5, 0.0)).cast(g.dtype)
    return g * share, g * (1 - share)


def _reduce_grad(ret: Tensor, g: Tensor, src: Tensor) -> Grads:
    op, _ = ret.uop.arg
    grad = g.expand(src.shape)
    if op is Ops.ADD:
        return (grad,)
    if op is Ops.MAX:
        big = ret.expand(src.shape)
        mask = (src == big).cast(g.dtype)
        count = mask.sum(ret.uop.arg[1], keepdim=True).expand(src.shape)
        return (grad * mask / count,)
    if op is Ops.MUL:
        return (grad * _product_of_others(src, ret.uop.arg[1]),)
    raise NotImplementedError(f"no gradient for a {op} reduction")


def _product_of_others(src: Tensor, axes: tuple[int, ...]) -> Tensor:
    """d prod(x) / d x_i = the product of the other elements, also where some x are 0.

    With P the product of the non-zero elements and z the number of zeros: P / x_i when z = 0;
    P at the zero (and 0 elsewhere) when z = 1; 0 everywhere when z >= 2.
    """
    tensor, is_zero = type(src), src == 0
    nonzero = tensor(is_zero.where(1.0, src).cast(src.dtype).uop.r(Ops.MUL, axes)).expand(src.shape)
    zeros = tensor(is_zero.cast(dtypes.int32).uop.r(Ops.ADD, axes)).expand(src.shape)
    one_zero = (zeros == 1).where(is_zero.where(nonzero, 0.0), 0.0)
    return (zeros == 0).where(nonzero / is_zero.where(1.0, src), one_zero).cast(src.dtype)


def _expand_grad(ret: Tensor, g: Tensor, src: Tensor) -> Grads:
    axes = tuple(i for i, (s, r) in enumerate(zip(src.shape, ret.shape)) if s != r)
    return (g.sum(axes, keepdim=True).cast(g.dtype),)


def _multi_grad(ret: Tensor, g: Tensor, *shards: Tensor) -> Grads:
    """Each shard gets its slice of the gradient on its own device; a replicated tensor's goes to the first copy."""
    axis, n = ret.uop.arg, len(shards)
    if axis is None:
        return (g.to(shards[0].device), *[None] * (n - 1))
    k = int(ret.shape[axis]) // n
    slices = [tuple((i * k, (i + 1) * k) if j == axis else (0, s) for j, s in enumerate(ret.shape)) for i in range(n)]
    return tuple(g.shrink(sl).to(s.device) for sl, s in zip(slices, shards))


GRAD_RULES: dict[Ops, Rule] = {
    Ops.ADD: lambda ret, g, a, b: (g, g),
    Ops.SUB: lambda ret, g, a, b: (g, -g),
    Ops.MUL: lambda ret, g, a, b: (g * b, g * a),
    Ops.FDIV: lambda ret, g, a, b: (g / b, -g * a / (b * b)),
    Ops.MAX: _max_grad,
    Ops.WHERE: lambda ret, g, c, a, b: (None, c.where(g, 0.0), c.where(0.0, g)),
    Ops.NEG: lambda ret, g, a: (-g,),
    Ops.RECIP: lambda ret, g, a: (-g * ret * ret,),
    Ops.SQRT: lambda ret, g, a: (g / (ret * 2),),
    Ops.EXP2: lambda ret, g, a: (g * ret * LN2,),
    Ops.LOG2: lambda ret, g, a: (g / (a * LN2),),
    Ops.SIN: lambda ret, g, a: (g * a.cos(),),
    Ops.TRUNC: lambda ret, g, a: (g.zeros_like(),),
    Ops.CAST: lambda ret, g, a: (g.cast(a.dtype) if dtypes.is_float(a.dtype) else None,),
    Ops.REDUCE_AXIS: _reduce_grad,
    Ops.RESHAPE: lambda ret, g, a: (g.reshape(a.shape),),
    Ops.PERMUTE: lambda ret, g, a: (g.permute(tuple(argsort(ret.uop.arg))),),
    Ops.EXPAND: _expand_grad,
    Ops.PAD: lambda ret, g, a: (g.shrink(tuple((b, b + s) for (b, _), s in zip(ret.uop.arg, a.shape))),),
    Ops.SHRINK: lambda ret, g, a: (g.pad(tuple((b, s - e) for (b, e), s in zip(ret.uop.arg, a.shape))),),
    Ops.FLIP: lambda ret, g, a: (g.flip(tuple(i for i, f in enumerate(ret.uop.arg) if f)),),
    Ops.CONTIGUOUS: lambda ret, g, a: (g,),
    Ops.COPY: lambda ret, g, a, dev=None: (g.to(a.device),),
    Ops.MULTI: _multi_grad,
}
# ops through which no gradient flows (comparisons, integer and bit ops, DETACH...)
NO_GRAD_OPS = frozenset(
    {Ops.CMPLT, Ops.CMPNE, Ops.IDIV, Ops.MOD, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.BITCAST, Ops.DETACH}
)


def custom_gradient(out: Tensor, inputs: tuple[Tensor, ...], rule: Rule) -> Tensor:
    """`out`, whose gradient to inputs[i] is rule(out, g, *inputs)[i]: gradients reach the inputs through the rule
    only, never through the nodes under `out` (computed from detached inputs, or from the inputs themselves).

    Used by pow, whose gradients are PyTorch's formulas, NaN and inf included. The registry (node -> inputs,
    rule) is the Realizer's, weak in the node; a rule must not hold the output.

    >>> from tg_tensor import Tensor
    >>> x = Tensor([3.0], requires_grad=True)
    >>> y = custom_gradient(x.detach() * 2, (x,), lambda ret, g, a: (g * 10,))
    >>> y.sum().gradient(x)[0].tolist()
    [10.0]
    """
    front().custom_grads[out.uop] = (tuple(t.uop for t in inputs), rule)
    return out


def _on_path(root: UOp, targets: set[UOp]) -> set[UOp]:
    """The nodes under `root` from which some target can be reached (differentiable paths only)."""
    reaches: set[UOp] = set()
    custom_grads = front().custom_grads
    for node in root.toposort:  # sources come first
        custom = custom_grads.get(node)
        srcs = node.src if custom is None else custom[0]
        if node in targets or ((custom or node.op not in NO_GRAD_OPS) and any(s in reaches for s in srcs)):
            reaches.add(node)
    return reaches


def compute_gradient(root: UOp, seed: UOp, targets: list[UOp]) -> dict[UOp, UOp]:
    """Gradients of `root` (seeded with `seed`) with respect to each reachable node in `targets`."""
    from tg_tensor.tensor import Tensor  # the rules build Tensors; tensor.py imports this module

    custom_grads = front().custom_grads
    path = _on_path(root, set(targets))
    grads: dict[UOp, Tensor] = {root: Tensor(seed)} if root in path else {}
    for node in reversed(list(root.toposort)):
        g = grads.get(node)
        custom = custom_grads.get(node) if g is not None else None
        if g is None or (custom is None and node.op not in GRAD_RULES) or not dtypes.is_float(node.dtype):
            continue
        inputs, rule = custom if custom is not None else (node.src, GRAD_RULES[node.op])
        srcs = [Tensor(s) for s in inputs if s.op is not Ops.DEVICE]
        for src, sg in zip(inputs, rule(Tensor(node), g, *srcs)):
            if sg is None or src not in path or not dtypes.is_float(src.dtype):
                continue
            grads[src] = sg if src not in grads else grads[src] + sg
    return {t: grads[t].uop for t in targets if t in grads}
