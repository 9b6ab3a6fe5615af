"""Chains of movement ops recorded once per shape and replayed: the graph without the Python that derives it.

conv2d's view of its input (padding, every window as axes, the output-channel broadcast) is ~30 movement ops, each
a Tensor method that checks and derives its arguments: ~400 us of Python per call on a 2-core EPYC, ~600 on the
16-core Xeon host, 5x the seed conv's kernel there. Each op depends only on the input's shape and the call's
parameters, so `movement_chain` records the nodes `build` made on the first call (op, dtype, arg from the input up)
and later calls with the same key re-make them as UOps directly. UOps are hash-consed: the replay gives the very
nodes the Tensor methods would give.

>>> from tg_tensor import Tensor
>>> x = Tensor.empty(2, 3)
>>> def build(t): return t.pad(((1, 1), (0, 0))).permute(1, 0)
>>> movement_chain(x, ("demo",), build).uop is movement_chain(x, ("demo",), build).uop
True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tg_uop import DType, GroupOp, Ops, UOp
from tg_uop.helpers import all_int

if TYPE_CHECKING:
    from tg_tensor.tensor import Tensor

Chain = tuple[tuple[Ops, DType, Any], ...]

# the ops a chain may hold: movement ops, and the DETACH that no_grad puts over each of them
_CHAIN_OPS = GroupOp.Movement | {Ops.DETACH}


def movement_chain(x: Tensor, key: tuple[Any, ...], build: Callable[[Tensor], Tensor]) -> Tensor:
    """`build(x)`, where `build` applies only movement ops to x and depends only on x's shape and `key`: recorded
    on the first call for x's shape, dtype and kind of base (and no_grad), replayed as UOps on the later ones. A
    tensor on several devices or of symbolic shape is always built. The recordings live in the Realizer
    (front.py's `movement_chains`, the most recently used MOVEMENT_CHAIN_MAX of them)."""
    from tg_tensor.front import front
    from tg_tensor.tensor import Tensor

    u = x.uop
    if not isinstance(u.device, str) or not all_int(x.shape) or u.base.op is Ops.CONST:
        return build(x)
    full, chains = (key, x.shape, u.dtype, u.base.op, Tensor.no_grad), front().movement_chains
    if (found := chains.get(full)) is not None:
        if (chain := found[0]) is None:  # (build's graph is no chain: always built)
            return build(x)
        for op, dtype, arg in chain:
            u = UOp(op, dtype, (u,), arg)
        return Tensor(u)
    ret = build(x)
    chains[full] = (_record(ret.uop, u),)
    return ret


def _record(top: UOp, bottom: UOp) -> Chain | None:
    """The nodes from `bottom` (exclusive) up to `top`, bottom first, if each has one source, the node below it, and
    is a movement op (or DETACH); else None."""
    chain: list[tuple[Ops, DType, Any]] = []
    node = top
    while node is not bottom:
        if node.op not in _CHAIN_OPS or len(node.src) != 1:
            return None
        chain.append((node.op, node.dtype, node.arg))
        node = node.src[0]
    return tuple(reversed(chain))
