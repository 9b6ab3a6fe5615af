"""Value semantics for in-place writes: a lazy tensor keeps the values it was built from.

`w.assign(v)` writes w's buffer in place under a new BUFFER node (a new version of that memory).
A lazy tensor built from the older version before the write (`y = w * 2`) must still see the old
values when it is realized later, as if it had been computed eagerly. Views behave as in PyTorch:
a tensor that is only a view of the old version (`Tensor(w.uop)`, `w.reshape(4)`, `w[1:]`) shares the
memory and sees the write.

When a schedule contains in-place writes, every live tensor is checked once (shared subgraphs are
visited once; realized nodes stop the walk):
  - a view of an overwritten version is re-pointed at the new version;
  - a lazy graph that computes from an overwritten version needs its old values: one copy kernel,
    ordered before the write, saves them, and the old BUFFER node is re-bound to the copy;
  - an old version nobody live reads is marked stale: a graph still holding it (an autograd graph
    of a realized tensor, say) raises when it is scheduled instead of reading the new values.
With no live reader (the usual training step: `Tensor.realize(loss, *opt.schedule_step())`), this
adds no kernel and no copy; under TinyJit the copies are recorded and replayed like any kernel.

>>> from tg_tensor import Tensor
>>> w = Tensor([1.0, 2.0]).realize()
>>> y = w * 2
>>> _ = w.assign(Tensor([10.0, 20.0])).realize()
>>> y.tolist(), w.tolist()
([2.0, 4.0], [10.0, 20.0])
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from tg_runtime.device import Buffer
from tg_tensor.engine.realizer import ScheduleItem, current
from tg_tensor.engine.schedule import buffer_of, create_copy_kernel
from tg_uop import GroupOp, Ops, UOp


def _written(items: list[ScheduleItem]) -> list[UOp]:
    """The version nodes that the in-place writes of this schedule produce."""
    return [it.writes for it in items if it.in_place and it.writes is not None]


def _newest(written: list[UOp]) -> dict[int, UOp]:
    """id(runtime Buffer) -> the newest version written."""
    out: dict[int, UOp] = {}
    for node in written:
        key = id(buffer_of(node))
        if key not in out or out[key].arg[0] < node.arg[0]:
            out[key] = node
    return out


def view_chain(u: UOp, resolve: bool = True, through_assigns: bool = False) -> tuple[UOp, list[tuple[Ops, Any]]] | None:
    """(BUFFER, movement ops from the top down) when `u` is only a view of a buffer, else None.

    With `resolve`, lazy nodes that were realized count as their buffers; with `through_assigns`, assigns that ran
    count as the memory they wrote.
    """
    rz = current()

    def step(n: UOp) -> UOp:
        if resolve or (through_assigns and n.op is Ops.ASSIGN):
            return rz.realized.get(n, n)
        return n

    ops: list[tuple[Ops, Any]] = []
    node = step(u)
    while node.op in GroupOp.Movement:
        ops.append((node.op, node.arg))
        node = step(node.src[0])
    return (node, ops) if node.op is Ops.BUFFER else None


class _Scan:
    """Classifies the live tensors' reads of overwritten versions (see the module docstring)."""

    def __init__(self, written: dict[int, UOp]) -> None:
        self.written = written
        self.r = current()
        self.seen: set[UOp] = set()
        self.to_copy: dict[UOp, None] = {}  # old versions a live lazy graph computes from

    def newer(self, node: UOp) -> UOp | None:
        """The version that overwrites `node`'s memory in this schedule, when `node` is an older one."""
        buf = self.r.buffers.get(node)
        new = self.written.get(id(buf)) if buf is not None else None
        return new if new is not None and new.arg[0] > node.arg[0] else None

    def visit(self, t: Any) -> None:
        if t.uop.op is Ops.ASSIGN and (done := self.r.realized.get(t.uop)) is not None:
            t.uop = done  # an assign that ran: its tensor is the buffer now (and drops the assign's graph)
        chain = view_chain(t.uop)
        if chain is not None:
            base, ops = chain
            if (new := self.newer(base)) is not None:
                t.uop = rebuild_view(new, ops)  # a view shares the memory: it sees the write
            return
        node, moves = t.uop, []
        while node.op in GroupOp.Movement:  # (a view of a tensor on several devices: `cache[:, :, 3:4]`)
            moves.append((node.op, node.arg))
            node = node.src[0]
        if node.op is Ops.MULTI and (shards := self.views_of_shards(node)) is not None:
            if shards != node.src:  # a tensor on several devices whose shards are views: each sees its write
                t.uop = rebuild_view(UOp(Ops.MULTI, node.dtype, shards, node.arg), moves)
            return
        self.walk(t.uop)

    def views_of_shards(self, multi: UOp) -> tuple[UOp, ...] | None:
        """A MULTI node's sources with each shard that views an overwritten version re-pointed at the new one
        (`cache[:, :, i].assign(x)` on a sharded cache writes each device's shard through a view); None when a
        shard is not a view of a buffer."""
        out = []
        for s in multi.src[:-1]:
            if (chain := view_chain(s)) is None:
                return None
            base, ops = chain
            new = self.newer(base)
            out.append(s if new is None else rebuild_view(new, ops))
        return (*out, multi.src[-1])

    def walk(self, root: UOp) -> None:
        stack = [root]
        while stack:
            node = stack.pop()
            if node in self.seen:
                continue
            self.seen.add(node)
            r = self.r.resolve(node)
            if r is not node:
                node = r.base
            if node.op is Ops.BUFFER:
                if self.newer(node) is not None:
                    self.to_copy[node] = None
                continue
            stack.extend(node.src)


def pending_writes() -> list[Any]:
    """Live tensors holding an in-place write (`assign`) that has not run yet (on one device, then on several).

    TinyJit runs these at the end of the function it records, so the writes are part of the recording.
    """
    rz, live = current(), list(current().live_tensors)
    ones = [t for t in live if t.uop.op is Ops.ASSIGN and t.uop not in rz.realized]
    return ones + [t for t in live if t.uop.op is Ops.MULTI and any(s.op is Ops.ASSIGN for s in t.uop.src[:-1])]


def rebuild_view(base: UOp, ops: list[tuple[Ops, Any]]) -> UOp:
    node = base
    for op, arg in reversed(ops):
        node = UOp(op, node.dtype, (node,), arg)
    return node


def protect_old_values(items: list[ScheduleItem]) -> tuple[list[ScheduleItem], Callable[[], None]]:
    """Items plus the copies that keep overwritten values for live readers, and what to do once ordered.

    The returned callable re-binds the copied BUFFER nodes to their copies and marks unread old
    versions stale; call it after the items are ordered (ordering looks at the old bindings).
    """
    written = _written(items)
    if not written:
        return items, _nothing
    rz = current()
    scan = _Scan(_newest(written))
    for t in list(rz.live_tensors):
        scan.visit(t)
    copies: list[ScheduleItem] = []
    rebind: list[tuple[UOp, Buffer]] = []
    swap: dict[UOp, UOp] = {}
    for old in scan.to_copy:
        item, copy = create_copy_kernel(old)
        copies.append(item)
        rebind.append((old, buffer_of(copy)))
        swap[old] = copy
    if swap:  # readers of a copied version read the copy: ordering must not keep them before the write
        items = [_reads_swapped(it, swap) for it in items]
    unread = rz.replaced_versions(written)

    def finish() -> None:
        for old, buf in rebind:
            rz.rebind(old, buf)
        for p in unread:
            if p not in scan.to_copy:
                rz.mark_stale(p)

    return copies + items, finish


def _reads_swapped(item: ScheduleItem, swap: dict[UOp, UOp]) -> ScheduleItem:
    """`item` reading the copies of copied versions (its `reads` and its buffers).

    Without this, a kernel reading both an old version (kept by a copy) and a value computed after the
    write was ordered both before and after the write: a cycle (randn drawn twice, then a backward).
    """
    reads = item.reads
    if not any(u in swap for u in reads):
        return item
    new = copy.copy(item)  # the item may sit in a schedule cache: never edit it in place
    new.reads = tuple(swap.get(u, u) for u in reads)
    new.bufs = list(item.bufs)  # buffers are outputs first, then one per read, in order
    for k, u in enumerate(reads):
        if u in swap:
            new.bufs[item.outputs + k] = buffer_of(swap[u])
    return new


def _nothing() -> None:
    return None
