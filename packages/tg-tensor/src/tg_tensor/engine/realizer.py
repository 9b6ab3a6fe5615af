"""The Realizer: the one owner of tg_tensor's realization state, and its two entry points.

Everything that realizing tensors remembers between calls lives in one `Realizer` object: which lazy
node is computed by which buffer (`realized`), the runtime Buffer behind each BUFFER node
(`buffers`), versions of a memory an in-place write overwrote (`stale`, `previous`), buffers a failed
realize never wrote (`failed`), the queue of scheduled items not run yet (`pending`), the live
tensors (`live_tensors`, `grad_tensors`) and the caches of realization (schedules by graph structure,
constant families). It changes through named methods (`register`, `new_version`, `rebind`, `mark_stale`,
`unshare`, `recording`, ...). The front end's caches (scalar views, the random stream, custom gradients,
TinyJit's flags) hang off it in `front` (front.py). No other tg_tensor module keeps mutable state at
module level (tests/test_realizer.py checks it).

The two entry points:
  - `schedule(tensors) -> list[ScheduleItem]`: create the kernels (schedule.py), point the tensors at
    their results, protect values an in-place write would overwrite (inplace.py), order the items so
    writes come after reads (ordering.py), and queue them;
  - `run(items)`: run items, consuming the queue in order (an item still queued runs after every item
    queued before it).
The modules of those steps import this one: the front end hands them to the Realizer as `Realizer.stages`
(tensor.py), and tensors reach it as `Holder`s (the engine never imports Tensor).

`Tensor.schedule`/`Tensor.realize` call them on `current()`. A test can isolate itself with
`with fresh(): ...` (a new, empty Realizer for the block); tensors must not cross Realizers (their
buffers are registered in the one they were made in).

>>> from tg_tensor import Tensor
>>> from tg_tensor.engine.realizer import current, fresh
>>> with fresh() as r:
...     t = Tensor([1.0, 2.0]) + 1
...     items = r.schedule([t])
...     print(len(items), len(r.pending), r is current())
...     r.run(items)
...     print(len(r.pending), t.tolist())
1 1 True
0 [2.0, 3.0]
"""

from __future__ import annotations

import time
import weakref
from collections import deque
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar

from tg_runtime.device import Buffer, Device, DeviceSet
from tg_runtime.runner import compile_all, get_runner, run_copy
from tg_tensor.engine.collective import run_collective
from tg_tensor.engine.live import LiveTensors
from tg_tensor.engine.symbolic import unbind_ast
from tg_tensor.engine.util import is_contiguous_buffer
from tg_uop import Ops, UOp
from tg_uop.helpers import DEBUG, GlobalCounters, LRUCache, getenv
from tg_uop.trace import GRAPH, TRACE
from tg_uop.uop import sint

K = TypeVar("K")
V = TypeVar("V")


class Holder(Protocol):
    """What the engine needs of a tensor (the front end's Tensor is one; the engine never imports it): the node it
    stands for (`uop`; `_uop` read without the property), the graph autograd may still differentiate (`_lazy`), and
    whether autograd is off (`no_grad`)."""

    no_grad: ClassVar[bool]
    _lazy: UOp | None

    @property
    def _uop(self) -> UOp: ...
    @property
    def uop(self) -> UOp: ...
    @uop.setter
    def uop(self, node: UOp) -> None: ...


@dataclass
class ScheduleItem:
    """One unit of work: a kernel AST (SINK) or a COPY, with its buffers (outputs first).

    `writes` is the BUFFER node it writes (for an in-place assign, the new version of that memory;
    `also_writes` the other outputs of a collective, one per device),
    `reads` the BUFFER nodes it reads (its buffers after the outputs; an assign reading the element it stores
    reads it through its output, not as one of these), `in_place` whether it writes an existing memory (an assign),
    `consts` the one-element constant buffers it reads after the others (lift_consts.py). Items
    replayed from the schedule cache write fresh buffers only and leave these empty.
    """

    ast: UOp
    bufs: list[Buffer]
    outputs: int = 1
    writes: UOp | None = None
    also_writes: tuple[UOp, ...] = ()  # a collective's outputs on the other devices
    reads: tuple[UOp, ...] = ()
    in_place: bool = False
    consts: tuple[Buffer, ...] = ()
    var_vals: dict[UOp, int] = field(default_factory=dict)  # values of the AST's symbolic variables

    def __post_init__(self) -> None:
        self.ast, found = unbind_ast(self.ast, self.var_vals)  # the AST never holds a value: one kernel per value
        self.var_vals.update(found)

    @classmethod
    def replayed(cls, ast: UOp, bufs: list[Buffer], var_vals: dict[UOp, int]) -> ScheduleItem:
        """An item of a cached schedule: `ast` was unbound when it was first scheduled (no walk of it again)."""
        item = cls.__new__(cls)
        outputs = len(ast.src) if ast.op is Ops.SINK and len(ast.src) > 1 else 1  # (a kernel of several outputs)
        item.ast, item.bufs, item.outputs, item.writes, item.also_writes = ast, bufs, outputs, None, ()
        item.reads, item.in_place, item.consts, item.var_vals = (), False, (), var_vals
        return item


class WeakTable(weakref.WeakKeyDictionary[K, V]):
    """A WeakKeyDictionary whose table (`data`: weak reference -> value) the per-realize fast paths read directly:
    its emptiness, or a lookup by `weakref.ref(key)`, without a Python-level method call per node."""

    data: dict[weakref.ReferenceType[K], V]


class WeakMembers(weakref.WeakSet[K]):
    """A WeakSet whose members (`data`: weak references) the fast paths test for emptiness without a method call."""

    data: set[weakref.ReferenceType[K]]


@dataclass(frozen=True)
class Stages:
    """The steps of `Realizer.schedule`, from modules above this one (the front end installs them on import as
    `Realizer.stages`): schedule.py's create and replay, inplace.py's protection, ordering.py, multi.py's
    lowering, and the views of visibility.py."""

    create_schedule: Callable[[list[UOp]], tuple[list[ScheduleItem], dict[UOp, UOp]]]
    replay_one: Callable[[Realizer, UOp], tuple[UOp, list[Buffer], dict[UOp, int], UOp] | None]
    protect_old_values: Callable[[list[ScheduleItem]], tuple[list[ScheduleItem], Callable[[], None]]]
    order_items: Callable[[list[ScheduleItem]], list[ScheduleItem]]
    needs_lowering: Callable[[list[Holder]], bool]
    schedule_multi: Callable[[list[Holder]], list[ScheduleItem]]
    on_schedule: Callable[[list[UOp], list[UOp], float], None]


class StaleReadError(RuntimeError):
    """A graph reads a tensor version that an in-place assign has overwritten."""


class Realizer:
    """The registries and caches of realization, with `schedule` and `run` (see the module docstring)."""

    stages: ClassVar[Stages]

    def __init__(self) -> None:
        # lazy node -> the realized node (a BUFFER reshaped to the node's shape) that now holds its value
        self.realized: WeakTable[UOp, UOp] = WeakTable()
        # BUFFER node -> runtime Buffer
        self.buffers: WeakTable[UOp, Buffer] = WeakTable()
        # BUFFER nodes whose memory an in-place write overwrote while nothing live read them (inplace.py)
        self.stale: WeakMembers[UOp] = WeakMembers()
        # BUFFER nodes that a failed realize never wrote -> why (reading them raises instead of returning garbage)
        self.failed: WeakTable[UOp, str] = WeakTable()
        # new version (the BUFFER node an assign writes) -> the version it replaces (weakly: dead means unread)
        self.previous: weakref.WeakKeyDictionary[UOp, weakref.ReferenceType[UOp]] = weakref.WeakKeyDictionary()
        # items handed out by schedule() that have not run yet, oldest first (and their ids)
        self.pending: deque[ScheduleItem] = deque()
        self._queued: set[int] = set()
        # every live Tensor (the possible readers of an overwritten version), indexed by its node; those that
        # asked for gradients
        self.live_tensors: LiveTensors[Holder] = LiveTensors()
        self.grad_tensors: WeakMembers[Holder] = WeakMembers()
        # tensors re-pointed to another tensor's realized buffer by share_results (an assign must not write it)
        # (by id: a WeakSet compares members with ==, which builds a Tensor)
        self.shared: weakref.WeakValueDictionary[int, Holder] = weakref.WeakValueDictionary()
        # schedules by graph structure (schedule.py), the most recently used SCHEDULE_CACHE_MAX of them
        self.recipes: LRUCache[tuple[object, ...], Any] = LRUCache(getenv("SCHEDULE_CACHE_MAX", 4096))
        # constant families (device, AST with constants as loads) -> first member; one-element constant buffers
        self.families: LRUCache[tuple[str, UOp], UOp] = LRUCache(getenv("KERNEL_CACHE_MAX", 1024))
        self.const_bufs: LRUCache[tuple[str, Any, Any], Buffer] = LRUCache(getenv("KERNEL_CACHE_MAX", 1024))
        # non-empty while TinyJit records (constants stay folded: `recording`)
        self.plain_only: list[bool] = []
        # called with every item about to run, before its buffers are allocated (TinyJit records its capture here)
        self.item_observers: list[Callable[[ScheduleItem], None]] = []
        # while VIZ records (provenance.py): lazy node -> the tensor operation and user line that made it; kernel
        # AST -> the operations it fuses (filled by the scheduler, read by visibility.on_schedule)
        self.origins: weakref.WeakKeyDictionary[UOp, str] = weakref.WeakKeyDictionary()
        self.kernel_ops: dict[UOp, list[str]] = {}
        # the front end's caches for this Realizer (front.py: scalar views, the random stream, custom gradients, ...)
        self.front: Any = None
        # what the multi-device assigns made since the last schedule lowered (Tensor._assign_shards; see `lowerings`)
        self._lowerings: dict[str, Any] = {}

    # ---- registries ----
    def resolve(self, u: UOp) -> UOp:
        """The realized stand-in for a lazy node, if it was computed before."""
        return self.realized.get(u, u)

    def buffer_of(self, u: UOp) -> Buffer:
        """The runtime Buffer behind a BUFFER node (created on first use, allocated when a kernel runs)."""
        if u.op is not Ops.BUFFER:
            raise TypeError(f"buffer_of needs a BUFFER node, got {u.op}")
        if (buf := self.buffers.get(u)) is None:
            assert u.device is not None
            buf = self.buffers[u] = Buffer(u.device, u.arg[1], u.dtype)
        return buf

    def register(self, buf: Buffer) -> UOp:
        """A new BUFFER node standing for the existing runtime Buffer `buf` (its memory, no copy)."""
        u = UOp.new_buffer(buf.device, buf.size, buf.dtype)
        self.buffers[u] = buf
        return u

    def new_version(self, target: UOp) -> UOp:
        """A new BUFFER node for the memory of `target` (a BUFFER node), the version an in-place write makes: it
        shares target's Buffer and remembers target as the version it replaces (inplace.py keeps or retires it)."""
        buf = self.buffer_of(target)
        alias = UOp.new_buffer(buf.device, target.arg[1], target.dtype)
        self.buffers[alias] = buf
        self.previous[alias] = weakref.ref(target)
        return alias

    def replaced_versions(self, written: Collection[UOp]) -> list[UOp]:
        """The old versions (still alive) that the new versions `written` replace."""
        return [p for new in written if (ref := self.previous.get(new)) is not None and (p := ref()) is not None]

    def rebind(self, node: UOp, buf: Buffer) -> None:
        """From now on the BUFFER node `node` reads `buf` (an old version moved to the copy that keeps it)."""
        self.buffers[node] = buf

    def mark_stale(self, node: UOp) -> None:
        """The version `node` was overwritten while nothing live read it: reading it later raises."""
        self.stale.add(node)

    def unshare(self, t: Holder) -> bool:
        """Was `t` re-pointed at another tensor's result (share_results)? It no longer is (it gets its own)."""
        if self.shared.get(id(t)) is t:
            del self.shared[id(t)]
            return True
        return False

    @contextmanager
    def recording(self, observe: Callable[[ScheduleItem], None]) -> Iterator[None]:
        """While TinyJit records: `observe` sees every item about to run, and constants stay folded in kernels (a
        recording is per set of Python values, so lifting them into buffers buys nothing)."""
        self.item_observers.append(observe)
        self.plain_only.append(True)
        try:
            yield
        finally:
            self.item_observers.remove(observe)
            self.plain_only.pop()

    def check_not_stale(self, buf: UOp) -> None:
        """Raise when `buf` is an overwritten version (its values are gone) or a failed realize never wrote it."""
        if (why := self.failed.get(buf)) is not None:
            raise RuntimeError(
                f"this tensor was never computed: the realize that should have computed it failed ({why})"
            )
        if buf in self.stale:
            raise StaleReadError(
                f"this graph reads a buffer (BUFFER {buf.arg[0]}, {buf.arg[1]} x {buf.dtype}) whose values an in-place "
                "assign overwrote after the graph was built, while no live tensor held the graph; realize it before "
                "the assign (or keep a tensor of it alive)"
            )

    def forget_constants(self, *nodes: UOp) -> None:
        """Drop the realized records of constant-only graphs that a cache keeps alive (scalar views, take_rows).

        A kept node stays equal to any later one (hash-consing), so `Tensor.full(s, 2.5).realize()` would otherwise
        make every later `t * 2.5` load that buffer, which an assign may have overwritten since (a stale read) and
        which stops fusion and the gather fold. A constant graph reads no memory: computing it again is the same.
        """
        realized = self.realized
        for node in nodes:
            for u in node.toposort:
                if u in realized:
                    del realized[u]

    # ---- realize ----
    def realize(self, tensors: Sequence[Holder]) -> None:
        """Schedule the kernels computing `tensors` and run everything queued (`schedule`, then `run_pending`).

        One tensor whose graph's structure is in the schedule cache as one kernel, with nothing else queued and
        nothing watching (no TinyJit capture, DEBUG, trace or graph view), takes a short way: the same replay,
        re-pointing and launch, without the queue and the general schedule's steps (and a tensor that is a
        realized buffer already, or a reshape of one, has nothing to do).
        """
        if tensors and type(dev := tensors[0].uop.device) is str and dev.startswith("CPU"):
            Device[dev].prepare()  # (the thread pool's sleeping workers start waking while Python schedules)
        if len(tensors) == 1 and not self.pending and not self.item_observers and self._realize_replayed(tensors[0]):
            return
        self.schedule(tensors)
        self.run_pending()

    def _realize_replayed(self, t: Holder) -> bool:
        if DeviceSet.made or DEBUG.value or TRACE.active or TRACE.profiling or GRAPH.value:
            return False
        if is_contiguous_buffer(t._uop):  # realized already (`loss.item()` after `loss.realize()`): nothing to do
            return True
        root, shape = _strip_reshapes(t._uop)
        if (hit := self.stages.replay_one(self, root)) is None:
            return False
        ast, bufs, var_vals, result = hit
        self._point_at_results((t,), [(root, shape)], {root: result})
        if bufs[0].size == 0:  # (writes_nothing: never launched)
            return True
        try:
            get_runner(bufs[0].device, ast).run_replayed(bufs, var_vals)
        except BaseException as e:  # the output is marked failed, as `_run_one` does
            self._roll_back([ScheduleItem.replayed(ast, bufs, var_vals)], e)
            raise
        return True

    # ---- schedule ----
    def lowerings(self) -> dict[str, Any]:
        """Scratch space of the multi-device lowering, emptied by every schedule: between two schedules nothing new
        is realized, so a global node's per-device form stays what it was (an optimizer assigns each replicated
        parameter a value read from one backward graph: lowered once, not once per parameter)."""
        return self._lowerings

    def schedule(self, tensors: Sequence[Holder]) -> list[ScheduleItem]:
        """The kernels that realizing `tensors` would run, queued; the tensors now refer to their outputs.

        A tensor that is only a reshape of a lazy node realizes that node (so `x.mean()` and the
        mean inside `x.std()` share one kernel).
        """
        steps = self.stages
        self._lowerings.clear()
        if DeviceSet.made and steps.needs_lowering(list(tensors)):  # some live on several devices: every device's
            return steps.schedule_multi(list(tensors))  # graph is scheduled (it schedules them through here)
        roots = [_strip_reshapes(t._uop) for t in tensors]
        shown = TRACE.active or TRACE.profiling or GRAPH.value or DEBUG >= 2  # (DEBUG=2 lines name each kernel's ops)
        start_us = TRACE.now_us() if shown else 0.0
        items, becomes = steps.create_schedule([r for r, _ in roots])  # create
        if shown:
            steps.on_schedule([t.uop for t in tensors], [it.ast for it in items], start_us)
        self._point_at_results(tensors, roots, becomes)
        for it in items:
            if it.in_place or it.reads:  # (items replayed from the schedule cache do neither: nothing to do)
                items, finish = steps.protect_old_values(items)  # protect
                items = steps.order_items(items)  # order
                finish()
                break
        self.pending.extend(items)
        self._queued.update(map(id, items))
        return items

    def _point_at_results(
        self, tensors: Sequence[Holder], roots: list[tuple[UOp, tuple[sint, ...]]], becomes: dict[UOp, UOp]
    ) -> None:
        keeps_graph = not type(tensors[0]).no_grad and self.grad_tensors.data
        if len(tensors) == 1 and not keeps_graph:  # (one tensor that autograd does not need: every tiny realize)
            t, ((root, shape),) = tensors[0], roots
            old, result = t._uop, becomes[root]
            t.uop = _view_as(result, shape)
            if old.op not in _OWN and old is not t._uop:
                self._share(old, t, (id(t),))
            return
        grad_nodes = self.grad_nodes() if keeps_graph else set()
        before = [t._uop for t in tensors]
        for t, (root, shape) in zip(tensors, roots):
            # keep the pre-realize graph only where autograd may still need it: it keeps every
            # intermediate buffer of that graph alive (and so out of TinyJit's memory planner)
            if grad_nodes and root.op is not Ops.ASSIGN and not is_contiguous_buffer(t.uop):
                if _reads_any(t.uop, grad_nodes):
                    t._lazy = t.uop
            result = becomes[root]
            t.uop = _view_as(result, shape)
        self._share_results(tensors, before)

    def _share_results(self, tensors: Sequence[Holder], before: list[UOp]) -> None:
        """Other live tensors that stood for the same lazy node now stand for the same buffer.

        Equal specifications are one UOp, so after `A = t * 4; B = t * 4; A.realize()` B is realized
        too (`A.uop is B.uop`), as in tinygrad.
        """
        done = {old: t for old, t in zip(before, tensors) if old.op not in _OWN and old is not t._uop}
        if done:
            scheduled = {id(t) for t in tensors}
            for old, t in done.items():  # only the holders of a computed node are visited (not every live tensor)
                self._share(old, t, scheduled)

    def _share(self, old: UOp, t: Holder, skip: Collection[int]) -> None:
        """The live tensors that stand for `old` (but those in `skip`, by id) now stand for what `t` does."""
        for other in self.live_tensors.holders(old):
            if id(other) not in skip:
                other._lazy = t._lazy if t._lazy is not None else other._lazy
                other.uop = t.uop
                self.shared[id(other)] = other

    def grad_nodes(self) -> set[UOp]:
        """The nodes that the tensors asking for gradients stand for, or stood for before they were realized."""
        return {n for g in list(self.grad_tensors) for n in (g.uop, g._lazy) if n is not None}

    def unqueue(self, item: ScheduleItem | None = None) -> None:
        """Take `item` (every item when None) off the queue without running it."""
        self._drop({id(p) for p in self.pending} if item is None else {id(item)} & self._queued)

    def _drop(self, ids: set[int]) -> None:
        """Take the items with these ids off the queue."""
        if ids:
            kept = [p for p in self.pending if id(p) not in ids]
            self.pending.clear()
            self.pending.extend(kept)
            self._queued -= ids

    # ---- run ----
    def run_pending(self) -> None:
        """Run the items that schedule() handed out and nobody ran yet."""
        if len(self.pending) == 1 and DEBUG.value < 1:  # (one item, a tiny realize: no queue walk for it)
            item = self.pending.popleft()
            self._queued.discard(id(item))
            self._run_one(item, (), set())
            return
        self.run(list(self.pending))

    def run(self, items: Sequence[ScheduleItem]) -> None:
        """Execute the items in order, allocating output buffers as they are first written.

        An item still queued runs after the items queued before it (they run first, taken off the queue).
        When an item fails, it and the items after it are dropped (none stays queued to fail the
        next, unrelated realize) and what they would have written is marked failed (reading it raises).
        """
        st = time.perf_counter()
        kernels = 0
        if len(items) > 1:  # (one kernel: nothing to compile in parallel)
            compile_all(
                [(it.bufs[0].device, it.ast) for it in items if it.ast.op is Ops.SINK and not writes_nothing(it)]
            )
        ran: set[int] = set()
        for i, item in enumerate(items):
            if id(item) in ran:
                continue
            while self.pending and id(item) in self._queued:  # the queue is consumed from its front, in order
                first = self.pending.popleft()
                self._queued.discard(id(first))
                ran.add(id(first))
                kernels += self._run_one(first, [first, *items[i:]], ran)
            if id(item) not in ran:
                ran.add(id(item))
                kernels += self._run_one(item, items[i:], ran)
        if DEBUG.value >= 1 and items:
            et = time.perf_counter() - st
            print(
                f"realize: {len(items)} items, {kernels} kernels, {et * 1e3:.2f} ms "
                f"({GlobalCounters.global_ops * 1e-9 / max(et, 1e-9):.2f} GFLOPS total counted)"
            )

    def _run_one(self, item: ScheduleItem, rest: Sequence[ScheduleItem], ran: set[int]) -> int:
        """Run one item; 1 when it launched a kernel. On failure, `rest` (not yet in `ran`) is rolled back."""
        try:
            if writes_nothing(item):
                return 0
            for observe in self.item_observers:
                observe(item)
            for b in item.bufs:
                if b._opaque is None:  # (allocated already: the inputs, the usual case; no method call)
                    b.ensure_allocated()
            if item.ast.op is Ops.COPY:
                run_copy(item.bufs[0], item.bufs[1])
                return 0
            if item.ast.op is Ops.COLLECTIVE:
                kind, op = item.ast.arg
                run_collective(kind, op, item.bufs[: item.outputs], item.bufs[item.outputs :])
                return 0
            get_runner(item.bufs[0].device, item.ast)(item.bufs, item.var_vals)
            return 1
        except BaseException as e:
            self._roll_back([item] + [x for x in rest if id(x) not in ran], e)
            raise

    def _roll_back(self, lost: list[ScheduleItem], error: BaseException) -> None:
        """Forget the items that did not run: off the queue, their outputs marked failed."""
        self._drop({id(item) for item in lost})
        outs = {id(b) for item in lost for b in item.bufs[: item.outputs]}
        why = f"{type(error).__name__}: {error}"
        for u, b in list(self.buffers.items()):
            if id(b) in outs:
                self.failed[u] = why
        for node, value in list(self.realized.items()):  # a later graph with one of these nodes computes it again
            if value.base in self.failed:
                del self.realized[node]


def writes_nothing(item: ScheduleItem) -> bool:
    """Does the item write no element (a kernel or copy over an empty shape)? Such items are never launched:
    a launch over zero threads is an error on some drivers, and there is nothing to compute."""
    if item.outputs == 1:
        return item.bufs[0].size == 0
    return all(b.size == 0 for b in item.bufs[: item.outputs])


def _shape_of(result: UOp) -> tuple[sint, ...] | None:
    """The shape of a realized node (a BUFFER's is its size, a view's its arg: no shape computed for a new node)."""
    if result.op is Ops.BUFFER:
        return (result.arg[1],)
    return result.arg if result.op is Ops.RESHAPE and type(result.arg) is tuple else result.shape


def _view_as(result: UOp, shape: tuple[sint, ...]) -> UOp:
    """A realized node seen at `shape` (the tensor's, of as many elements: its graph's root under the reshapes
    `_strip_reshapes` took off). A view of a whole buffer is viewed again from the buffer (a matmul's root has a
    trailing axis of 1: its tensor gets RESHAPE(BUFFER), a contiguous buffer, not a reshape of that root's view)."""
    if _shape_of(result) == shape:
        return result
    if result.op is Ops.RESHAPE and result.src[0].op is Ops.BUFFER:
        result = result.src[0]
    if result.op is Ops.BUFFER:  # (no checks: the reshapes taken off were checked when they were built)
        return result if shape == (result.arg[1],) else UOp(Ops.RESHAPE, result.dtype, (result,), tuple(shape))
    return result.reshape(shape)


def _strip_reshapes(u: UOp) -> tuple[UOp, tuple[sint, ...]]:
    """The node under a chain of reshapes (when it is lazy), and the shape to view it as."""
    # (a reshape's arg is its shape: no shape computed for the new node a matmul's result is)
    shape = u.arg if u.op is Ops.RESHAPE and type(u.arg) is tuple else tuple(u.shape or ())
    node = u
    while node.op is Ops.RESHAPE and node.src[0].op not in (Ops.BUFFER, Ops.CONST):
        node = node.src[0]
    return node, shape


def _reads_any(graph: UOp, nodes: set[UOp]) -> bool:
    """Does `graph` contain one of `nodes`?"""
    return bool(nodes) and any(n in nodes for n in graph.toposort)


# nodes whose result is a buffer of their own (an assign's target; `Tensor.zeros(3).contiguous()`, to assign into):
# other holders of the node do not share it
_OWN = (Ops.ASSIGN, Ops.CONTIGUOUS)

_CURRENT = Realizer()  # the Realizer every Tensor uses (swapped only by `fresh`)


def current() -> Realizer:
    """The Realizer in use."""
    return _CURRENT


def run_schedule(items: list[ScheduleItem]) -> None:
    """Execute the items in order (Realizer.run): queued items run after the ones queued before them.

    >>> from tg_tensor import Tensor
    >>> t = Tensor([1, 2]) * 3
    >>> run_schedule(t.schedule()); t.tolist()
    [3, 6]
    """
    current().run(items)


@contextmanager
def fresh(realizer: Realizer | None = None) -> Iterator[Realizer]:
    """Use a new (or the given) Realizer inside the block: empty registries, queue and caches."""
    global _CURRENT
    prev, _CURRENT = _CURRENT, realizer if realizer is not None else Realizer()
    try:
        yield _CURRENT
    finally:
        _CURRENT = prev
