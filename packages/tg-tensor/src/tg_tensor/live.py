"""The live tensors, indexed by the node each one stands for.

A realize re-points the other live tensors that stood for a node it computed (after
`A = t * 4; B = t * 4; A.realize()`, B stands for A's buffer too). Finding them by walking every live
tensor costs O(live tensors) per realize; this index finds them in O(holders of that node).

Each registered tensor has one `_Entry` (a weak reference that remembers the node it is filed under);
`Tensor.uop`'s setter calls `moved` so the index follows the tensor, and a dead tensor leaves the
index through the reference's callback.

>>> from tg_tensor import Tensor
>>> from tg_tensor.realizer import fresh
>>> with fresh() as r:
...     a = Tensor([1.0, 2.0]) * 4
...     b = Tensor(a.uop)
...     print(len(r.live_tensors.holders(a.uop)), len(r.live_tensors.holders(b.uop)) == 2)
2 True
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from tg_uop import UOp

if TYPE_CHECKING:
    from tg_tensor.tensor import Tensor


class _Entry(weakref.ref["Tensor"]):
    """A weak reference to a Tensor and the node it is filed under in its LiveTensors."""

    __slots__ = ("node", "owner")

    def __new__(cls, t: Tensor, owner: LiveTensors, node: UOp) -> _Entry:
        return super().__new__(cls, t, owner._gone)

    def __init__(self, t: Tensor, owner: LiveTensors, node: UOp) -> None:
        super().__init__(t, owner._gone)  # type: ignore[call-arg]  # (typeshed gives ref no __init__; it has one)
        self.node, self.owner = node, owner


class LiveTensors:
    """Every live Tensor of one Realizer, found by its node (`holders`) or all at once (iteration)."""

    def __init__(self) -> None:
        self._by_node: dict[UOp, dict[int, _Entry]] = {}
        self._count = 0
        self.visits = 0  # tensors looked at by `holders` (a test checks that a realize visits few)

    def add(self, t: Tensor, node: UOp) -> _Entry:
        """File `t` under `node`; returns its entry (kept on the tensor, so `moved` finds it)."""
        entry = _Entry(t, self, node)
        self._by_node.setdefault(node, {})[id(entry)] = entry
        self._count += 1
        return entry

    def moved(self, entry: _Entry, node: UOp) -> None:
        """The tensor of `entry` now stands for `node`."""
        old = entry.node
        if old is node:
            return
        bucket = self._by_node[old]
        del bucket[id(entry)]
        if not bucket:
            del self._by_node[old]
        entry.node = node
        self._by_node.setdefault(node, {})[id(entry)] = entry

    def _gone(self, entry: Any) -> None:
        bucket = self._by_node.get(entry.node)
        if bucket is not None and bucket.pop(id(entry), None) is not None:
            self._count -= 1
            if not bucket:
                del self._by_node[entry.node]

    def holders(self, node: UOp) -> list[Tensor]:
        """The live tensors that stand for `node` now."""
        bucket = self._by_node.get(node)
        if bucket is None:
            return []
        out = [t for e in list(bucket.values()) if (t := e()) is not None]
        self.visits += len(out)
        return out

    def __iter__(self) -> Iterator[Tensor]:
        for bucket in list(self._by_node.values()):
            for e in list(bucket.values()):
                if (t := e()) is not None:
                    yield t

    def __len__(self) -> int:
        return self._count
