"""The live tensors, indexed by the node each one stands for.

A realize re-points the other live tensors that stood for a node it computed (after
`A = t * 4; B = t * 4; A.realize()`, B stands for A's buffer too). Finding them by walking every live
tensor costs O(live tensors) per realize; this index finds them in O(holders of that node).

Each registered tensor has one plain weak reference (its `ref`, kept on the tensor with the index as
`Tensor._live`); the index remembers the node each reference is filed under. `Tensor.uop`'s setter calls
`moved` so the index follows the tensor, and a dead tensor leaves the index through the reference's callback.

>>> from tg_tensor import Tensor
>>> from tg_tensor.engine.realizer import fresh
>>> with fresh() as r:
...     a = Tensor([1.0, 2.0]) * 4
...     b = Tensor(a.uop)
...     print(len(r.live_tensors.holders(a.uop)), len(r.live_tensors.holders(b.uop)) == 2)
2 True
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Generic, TypeVar

from tg_uop import UOp

T = TypeVar("T")  # (the front end's tensors: the engine never sees their class)


class LiveTensors(Generic[T]):
    """Every live Tensor of one Realizer, found by its node (`holders`) or all at once (iteration)."""

    def __init__(self) -> None:
        self._by_node: dict[UOp, dict[int, weakref.ref[T]]] = {}  # node -> {id(ref): ref} of its holders
        self._node_of: dict[int, UOp] = {}  # id(ref) -> the node that tensor is filed under
        self.visits = 0  # tensors looked at by `holders` (a test checks that a realize visits few)

    def add(self, t: T, node: UOp) -> weakref.ref[T]:
        """File `t` under `node`; returns its reference (kept on the tensor, so `moved` finds it)."""
        ref = weakref.ref(t, self._gone)  # (a plain reference: a subclass with fields costs 5x as much to make)
        key = id(ref)
        self._node_of[key] = node
        if (bucket := self._by_node.get(node)) is None:
            self._by_node[node] = {key: ref}
        else:
            bucket[key] = ref
        return ref

    def moved(self, ref: weakref.ref[T], node: UOp) -> None:
        """The tensor of `ref` now stands for `node`."""
        key = id(ref)
        old = self._node_of[key]
        if old is node:
            return
        bucket = self._by_node[old]
        del bucket[key]
        if not bucket:
            del self._by_node[old]
        self._node_of[key] = node
        if (new := self._by_node.get(node)) is None:
            self._by_node[node] = {key: ref}
        else:
            new[key] = ref

    def _gone(self, ref: weakref.ref[T]) -> None:
        node = self._node_of.pop(id(ref), None)
        if node is None:
            return
        bucket = self._by_node[node]
        del bucket[id(ref)]
        if not bucket:
            del self._by_node[node]

    def holders(self, node: UOp) -> list[T]:
        """The live tensors that stand for `node` now."""
        bucket = self._by_node.get(node)
        if bucket is None:
            return []
        out = [t for e in list(bucket.values()) if (t := e()) is not None]
        self.visits += len(out)
        return out

    def __iter__(self) -> Iterator[T]:
        for bucket in list(self._by_node.values()):
            for e in list(bucket.values()):
                if (t := e()) is not None:
                    yield t

    def __len__(self) -> int:
        return len(self._node_of)
