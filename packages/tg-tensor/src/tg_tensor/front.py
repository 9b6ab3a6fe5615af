"""What the front end remembers between calls, apart from realization state.

The Realizer (realizer.py) owns realization: which node a buffer holds, versions of memories, the queue. What
Tensor's methods, autograd, TinyJit and the graph views remember lives here, in one `FrontState` per Realizer
(made on first use; a `fresh()` Realizer starts with an empty one), so the engine never holds a Tensor cache.

>>> from tg_tensor import Tensor
>>> from tg_tensor.engine.realizer import fresh
>>> with fresh():
...     _ = Tensor([1.0]) * 2.5
...     len(front().scalar_views)
1
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tg_tensor.engine.realizer import Realizer, current
from tg_uop import UOp
from tg_uop.helpers import LRUCache, getenv

if TYPE_CHECKING:
    from tg_tensor.rng import RandomState
    from tg_tensor.tensor import Tensor


def _chains() -> LRUCache[tuple[Any, ...], tuple[Any]]:
    return LRUCache(getenv("MOVEMENT_CHAIN_MAX", 512))  # (the most recently used of them)


@dataclass(eq=False)
class FrontState:
    """The front end's caches and flags for one Realizer."""

    # (value, its type, sign, dtype, device, shape) -> a Python scalar viewed at a shape (elementwise._scalar_view)
    scalar_views: dict[tuple[Any, ...], UOp] = field(default_factory=dict)
    # (key, shape, dtype, base op, no_grad) -> movement ops recorded by chains.movement_chain (a 1-tuple: None where
    # the built graph was no chain)
    movement_chains: LRUCache[tuple[Any, ...], tuple[Any]] = field(default_factory=_chains)
    # rng.py: 0..n-1 index ranges kept on the device; the stream Tensor.rand draws from (made on first use)
    index_ranges: dict[tuple[int, str], Tensor] = field(default_factory=dict)
    random: RandomState | None = None
    # node -> (inputs, rule): gradients given by a function instead of the node's op (gradient.custom_gradient)
    custom_grads: weakref.WeakKeyDictionary[UOp, tuple[tuple[UOp, ...], Any]] = field(
        default_factory=weakref.WeakKeyDictionary
    )
    jit_running: list[str] = field(default_factory=list)  # names of jitted functions running their Python body
    schedules_shown: int = 0  # realizes reported to GRAPH/VIZ (visibility.py)
    graph_files: list[str] = field(default_factory=list)  # GRAPH=1: this run's folder, then the DOT files written


def front(rz: Realizer | None = None) -> FrontState:
    """The front end's state for `rz` (the current Realizer when None)."""
    rz = current() if rz is None else rz
    st: FrontState | None = rz.front
    if st is None:
        st = rz.front = FrontState()
    return st
