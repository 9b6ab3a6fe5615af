"""Order schedule items so that in-place writes (assign) run after every read of the old values.

An assign writes a buffer in place under a new BUFFER node. A kernel that reads the same runtime
buffer through an older node wants the values from before the write, so it must run first; kernels
that read the new node depend on the write as usual. Items keep their order where nothing forces a
change.

>>> from tg_tensor.engine.ordering import order_items
>>> order_items([])
[]
"""

from __future__ import annotations

import heapq

from tg_tensor.engine.realizer import ScheduleItem
from tg_tensor.engine.schedule import buffer_of
from tg_uop import UOp


def _edges(items: list[ScheduleItem]) -> list[set[int]]:
    """after[i]: the items that must run after item i."""
    writer = {w: i for i, it in enumerate(items) if (w := it.writes) is not None}
    for i, it in enumerate(items):  # a collective writes one output per device
        for w in it.also_writes:
            writer[w] = i
    by_buffer: dict[int, list[tuple[int, UOp]]] = {}  # id(runtime Buffer) -> (item, node) writing it
    for node, i in writer.items():
        by_buffer.setdefault(id(buffer_of(node)), []).append((i, node))
    after: list[set[int]] = [set() for _ in items]
    for writers in by_buffer.values():  # versions of one memory are written oldest first
        ordered = [i for i, _ in sorted(writers, key=lambda w: int(w[1].arg[0]))]
        for a, b in zip(ordered, ordered[1:]):
            after[a].add(b)
    for i, it in enumerate(items):
        for node in it.reads:
            if node in writer and writer[node] != i:
                after[writer[node]].add(i)  # read after the value is written
            for j, newer in by_buffer.get(id(buffer_of(node)), []):
                if j != i and newer.arg[0] > node.arg[0]:
                    after[i].add(j)  # a later version overwrites what i reads: it comes after i
    return after


def order_items(items: list[ScheduleItem]) -> list[ScheduleItem]:
    """A topological order of `items` (stable: the original order wins ties)."""
    if not any(len(it.reads) for it in items):
        return items
    after = _edges(items)
    indegree = [0] * len(items)
    for succ in after:
        for k in succ:
            indegree[k] += 1
    ready = [i for i, d in enumerate(indegree) if d == 0]
    heapq.heapify(ready)
    out: list[ScheduleItem] = []
    while ready:
        i = heapq.heappop(ready)
        out.append(items[i])
        for k in after[i]:
            indegree[k] -= 1
            if indegree[k] == 0:
                heapq.heappush(ready, k)
    if len(out) != len(items):
        raise RuntimeError("schedule: reads and in-place writes of one buffer form a cycle")
    return out
