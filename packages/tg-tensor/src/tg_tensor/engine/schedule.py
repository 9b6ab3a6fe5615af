"""The scheduler: cut a lazy tensor graph into as few kernels as possible.

Every kernel writes one node of the graph to a fresh buffer. A node gets its own kernel when it is
asked for (a root, CONTIGUOUS, COPY) or when fusing it would be wrong or wasteful:
  - a movement op other than a reshape-into-the-output sits on top of a reduction
    (e.g. the `expand` in softmax: fusing would recompute the reduction per element);
  - two reductions of different shapes would share one kernel;
  - a padded view sits on an op with f(0) != 0 (exp, log, reciprocal, division...);
  - an elementwise node that is costly to recompute is read through a view that repeats each of its
    elements many times (the output gradient of a conv or matmul, expanded across its reduction):
    computing it once and loading it is cheaper than recomputing it per use.
Each of these is discovered while building the kernel; the offending node is then realized first.
An assign that reads its target at the very element it stores (`x.assign(mask.where(v, x))`) reads it from the
output buffer itself, so that codegen can store v only where the mask holds (lowerer.keep_old).

>>> from tg_tensor.engine.schedule import create_schedule  # doctest: +SKIP
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

from tg_runtime.device import Buffer, Device, DeviceSet
from tg_shape import ShapeTracker
from tg_tensor.engine.fusion_cost import FusionCost
from tg_tensor.engine.lift_consts import lift_changing_consts
from tg_tensor.engine.provenance import made_by
from tg_tensor.engine.realizer import Realizer, ScheduleItem, current
from tg_tensor.engine.siblings import merge_siblings
from tg_tensor.engine.source import is_source_kernel, source_program
from tg_tensor.engine.split_reduce import compares_with_arange, split_reduces
from tg_tensor.engine.symbolic import max_size
from tg_tensor.engine.util import is_contiguous_buffer
from tg_uop import DType, GroupOp, Ops, UOp, dtypes
from tg_uop.helpers import DEBUG, prod
from tg_uop.structure import merge_leaves, structure
from tg_uop.trace import TRACE
from tg_uop.uop import arg_key, sint

Movement = tuple[tuple[Ops, object], ...]


def check_not_stale(buf: UOp) -> None:
    """Raise when `buf` is an overwritten version (its values are gone) or a failed realize never wrote it."""
    current().check_not_stale(buf)


def buffer_of(u: UOp) -> Buffer:
    """The runtime Buffer behind a BUFFER node (created on first use, allocated when a kernel runs)."""
    return current().buffer_of(u)


class _Fail(Exception):
    """Building a kernel hit a node that must be realized on its own first."""

    def __init__(self, node: UOp) -> None:
        super().__init__(node.op.name)
        self.node = node


class _TwoVersions(Exception):
    """A kernel reads two versions of one memory (before and after an assign): `node`, the older, needs a copy."""

    def __init__(self, node: UOp) -> None:
        super().__init__(f"BUFFER {node.arg[0]}")
        self.node = node


def movement_st(shape: tuple[sint, ...], ops: Movement) -> ShapeTracker:
    """The view of a buffer of `shape` through the movement ops `ops` (applied first to last)."""
    st = ShapeTracker.from_shape(shape)
    for op, arg in ops:
        st = MOVES[op](st, arg)
    return st


# movement op -> the ShapeTracker method that applies it (named after the op)
MOVES: dict[Ops, Callable[..., ShapeTracker]] = {op: getattr(ShapeTracker, op.name.lower()) for op in GroupOp.Movement}


def _pad_safe(node: UOp) -> bool:
    """Whether a padded view may be pushed through `node`: f(0, ..., 0) must be exactly 0.
    Not a float NEG: -(0.0) is -0.0, and the padding must hold 0.0."""
    return node.op in GroupOp.PadSafe and not (node.op is Ops.NEG and dtypes.is_float(node.dtype))


def _store(out_buf: UOp, st: ShapeTracker, value: UOp) -> UOp:
    g0 = UOp(Ops.DEFINE_GLOBAL, out_buf.dtype.ptr(), (), 0)
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (g0, UOp(Ops.VIEW, dtypes.void, (), st), value)),))


def write_view(target: UOp) -> ShapeTracker | None:
    """Where an assign to `target` (movement ops over a BUFFER) writes: None for the whole buffer in order.

    Raises ValueError for views that cannot be written (expanded, padded, or not one strided window).
    """
    ops: list[tuple[Ops, object]] = []
    node = target
    while node.op in GroupOp.Movement:
        ops.append((node.op, node.arg))
        node = node.src[0]
    if node.op is not Ops.BUFFER:
        raise ValueError(f"assign: the target is not a view of a buffer ({node.op})")
    if all(op is Ops.RESHAPE for op, _ in ops):
        return None
    st = movement_st((node.arg[1],), tuple(reversed(ops)))
    view = st.views[-1]
    bad = len(st.views) > 1 or view.mask is not None or any(s == 0 and n > 1 for s, n in zip(view.strides, view.shape))
    if bad:
        raise ValueError(
            f"assign: cannot write through this view of shape {tuple(target.shape or ())} (expanded, padded, or "
            "not one strided window of the buffer); assign to the whole tensor instead"
        )
    return st


class _KernelBuilder:
    """Builds the AST of one kernel whose output is `root`."""

    def __init__(self, sched: Scheduler, root: UOp) -> None:
        self.sched, self.root = sched, root
        self.inputs: list[UOp] = []  # BUFFER nodes read, in DEFINE_GLOBAL order (after the output)
        self.memo: dict[tuple[UOp, Movement], UOp] = {}
        self.full_shape: tuple[int, ...] | None = None
        self.overwritten: tuple[UOp, ShapeTracker] | None = None  # an assign's output buffer and where it stores
        self.read_in_place: UOp | None = None  # the version of it read from the output itself (data0)

    def build(self, out_buf: UOp) -> UOp:
        root = self.root
        inner = root.src[0] if root.op is Ops.CONTIGUOUS else root.src[1] if root.op is Ops.ASSIGN else root
        if root.op is Ops.ASSIGN and (view := write_view(root.src[0])) is not None:
            self.overwritten = (out_buf, view)
            value = self._build(inner, ())  # an assign through a view: stored where the view points
            return _store(out_buf, view, value)
        space = self._output_space(inner)
        top: Movement = ((Ops.RESHAPE, space),) if space != tuple(root.shape or ()) else ()
        st = movement_st((prod(root.shape or ()),), ((Ops.RESHAPE, space),))
        if root.op is Ops.ASSIGN:
            self.overwritten = (out_buf, st)
        value = self._build(inner, top)
        return _store(out_buf, st, value)

    def _output_space(self, node: UOp) -> tuple[int, ...]:
        """The shape the kernel computes in: a reduction's output shape when only reshapes lead up to it."""
        shape = tuple(node.shape or ())
        stack, seen = [node], set()
        while stack:
            n = self.sched.r.resolve(stack.pop())
            if n in seen or n.op is Ops.BUFFER or self.sched.is_boundary(n, self.root):
                continue
            seen.add(n)
            if n.op is Ops.REDUCE_AXIS:
                rshape = tuple(n.shape or ())
                return rshape if prod(rshape) == prod(shape) else shape
            if n.op in GroupOp.Elementwise or n.op in (Ops.RESHAPE, Ops.DETACH):
                stack.extend(n.src)
        return shape

    def _load(self, buf: UOp, st: ShapeTracker) -> UOp:
        buf = self.sched.copies.get(buf, buf)
        if buf.arg[1] == 0:  # every position of a view of nothing is padding: never pass an empty buffer
            return UOp(Ops.CONST, buf.dtype, (UOp(Ops.VIEW, dtypes.void, (), st),), dtypes.as_const(0, buf.dtype))
        in_place = self._reads_what_it_overwrites(buf, st)
        if in_place or buf not in self.inputs:
            self._check_one_version(buf)
        if in_place:
            # an assign reading the very element it stores reads it from its output: codegen turns a store of
            # where(c, v, old) into a store of v where c (lowerer.keep_old), so a masked update writes its slots only
            self.read_in_place, arg = buf, 0
        else:
            if buf not in self.inputs:
                self.inputs.append(buf)
            arg = self.inputs.index(buf) + 1
        g = UOp(Ops.DEFINE_GLOBAL, buf.dtype.ptr(), (), arg)
        return UOp(Ops.LOAD, buf.dtype, (g, UOp(Ops.VIEW, dtypes.void, (), st)))

    def _check_one_version(self, buf: UOp) -> None:
        """`buf` is readable, and no other version of its memory is read by this kernel (else _TwoVersions)."""
        check_not_stale(buf)
        memory = buffer_of(buf)
        read = (*self.inputs, self.read_in_place)
        other = next((i for i in read if i is not None and i is not buf and buffer_of(i) is memory), None)
        if other is not None:
            raise _TwoVersions(min(other, buf, key=lambda b: b.arg[0]))

    def _reads_what_it_overwrites(self, buf: UOp, st: ShapeTracker) -> bool:
        """Is this the assign's own output memory, read at the element each thread stores?"""
        if self.overwritten is None:
            return False
        out, out_st = self.overwritten
        return buf.dtype == out.dtype and st == out_st and buffer_of(buf) is buffer_of(out)

    def _build(self, node: UOp, ops: Movement) -> UOp:
        key = (node, ops)
        if key in self.memo:
            return self.memo[key]
        ret = self._build_uncached(self.sched.r.resolve(node), ops)
        self.memo[key] = ret
        return ret

    def _build_uncached(self, node: UOp, ops: Movement) -> UOp:
        op = node.op
        if op is Ops.BUFFER:
            return self._load(node, movement_st((node.arg[1],), ops))
        if node is not self.root and self.sched.is_boundary(node, self.root):
            buf = self.sched.realize_first(node)
            return self._load(buf, movement_st(tuple(node.shape or ()), ops))
        if op in GroupOp.Movement:
            return self._build(node.src[0], ((op, node.arg),) + ops)
        if op is Ops.CONST:
            st = movement_st((), ops)
            return UOp(Ops.CONST, node.dtype, (UOp(Ops.VIEW, dtypes.void, (), st),), node.arg)
        if op is Ops.ARANGE:  # computed from the loop indices, like a load from a buffer holding 0..n-1
            st = movement_st((node.arg,), ops)
            return UOp(Ops.ARANGE, node.dtype, (UOp(Ops.VIEW, dtypes.void, (), st),), node.arg)
        if op in (Ops.DETACH, Ops.CONTIGUOUS):
            return self._build(node.src[0], ops)
        if op in GroupOp.Elementwise:
            if ops:
                st = movement_st(tuple(node.shape or ()), ops)
                if not _pad_safe(node) and _has_mask(st):
                    raise _Fail(node)
                if node is not self.root and self._costly_to_repeat(node, st):
                    raise _Fail(node)
            return UOp(op, node.dtype, tuple(self._build(s, ops) for s in node.src), node.arg)
        if op is Ops.REDUCE_AXIS:
            shape = tuple(node.shape or ())
            if ops and movement_st(shape, ops) != ShapeTracker.from_shape(shape):
                raise _Fail(node)
            src_shape = tuple(node.src[0].shape or ())
            if self.full_shape is None:
                self.full_shape = src_shape
            elif self.full_shape != src_shape:
                raise _Fail(node)
            return UOp(Ops.REDUCE_AXIS, node.dtype, (self._build(node.src[0], ()),), node.arg)
        raise NotImplementedError(f"the scheduler cannot put {op} in a kernel")

    def _costly_to_repeat(self, node: UOp, st: ShapeTracker) -> bool:
        """Is `node`, read through `st`, used many times per element and costly to recompute each time?"""
        shape = tuple(node.shape or ())
        if not all(isinstance(s, int) for s in shape) or compares_with_arange(node, self.sched.r.realized):
            return False  # (a one-hot index mask folds into an indexed load in codegen: keep it in the kernel)
        uses = prod(st.shape) // max(1, prod(shape))
        if uses < REPEAT_MIN_USES:
            return False
        if node.op is Ops.CAST and node.dtype in HALF_FLOATS and node.src[0].dtype.itemsize > node.dtype.itemsize:
            return True  # a matmul operand narrowed to 16 bits is stored so: reread at half the bytes, on tensor cores
        alus, bufs = self.sched.elementwise_cost(node, self.root)
        return alus >= REPEAT_MAX_ALUS or bufs >= REPEAT_MAX_BUFFERS


# an elementwise node read at least REPEAT_MIN_USES times per element gets its own kernel when it costs
# REPEAT_MAX_ALUS ALU ops or reads REPEAT_MAX_BUFFERS buffers (cheap ones, like a relu, stay fused)
REPEAT_MIN_USES = 8
REPEAT_MAX_ALUS = 4
REPEAT_MAX_BUFFERS = 3
HALF_FLOATS = (dtypes.float16, dtypes.bfloat16)


def _elements(n: UOp) -> int | None:
    """How many elements a BUFFER or a realized node holds (None: a symbolic shape)."""
    shape = (n.arg[1],) if n.op is Ops.BUFFER else tuple(n.shape or ())
    return prod(shape) if all(isinstance(s, int) for s in shape) else None


def _has_mask(st: ShapeTracker) -> bool:
    return any(v.mask is not None for v in st.views)


class Scheduler:
    """Turns lazy roots into ScheduleItems, realizing extra nodes only where fusion is impossible."""

    def __init__(self) -> None:
        self.r = current()
        self.items: list[ScheduleItem] = []
        self.forced: set[UOp] = set()  # nodes that must get their own kernel
        self.in_progress: set[UOp] = set()
        self.copies: dict[UOp, UOp] = {}  # an older version of a memory that a kernel reads with a newer one -> copy

    def is_boundary(self, node: UOp, current_root: UOp) -> bool:
        """Is `node` computed by a kernel of its own (so the current kernel loads it)?"""
        own = (Ops.CONTIGUOUS, Ops.COPY, Ops.ASSIGN, Ops.COLLECTIVE, Ops.CUSTOM)
        return node in self.forced or node.op in own or node in self.r.realized

    def elementwise_cost(self, node: UOp, current_root: UOp) -> tuple[int, int]:
        """(ALU ops, distinct buffers) of the elementwise graph under `node`, down to loads and constants.

        A one-element buffer (a scalar broadcast, like RMSNorm's 1/rms) is not counted: each thread loads it once,
        whatever the repetition."""
        alus, bufs, stack, seen = 0, set[UOp](), [node], set[UOp]()
        while stack:
            n = self.r.resolve(stack.pop())
            if n in seen:
                continue
            seen.add(n)
            if n.op is Ops.BUFFER or (n is not node and self.is_boundary(n, current_root)):
                if _elements(n) != 1:
                    bufs.add(n)
            elif n.op in GroupOp.Elementwise:
                alus += 1
                stack.extend(n.src)
            elif n.op in GroupOp.Movement or n.op in (Ops.DETACH, Ops.CONTIGUOUS):
                stack.extend(n.src)
            elif n.op is Ops.REDUCE_AXIS:
                bufs.add(n)  # realized on its own when repeated (a view over a reduction)
        return alus, len(bufs)

    def realize_first(self, node: UOp) -> UOp:
        """Schedule `node`'s kernel (if not done yet) and return the BUFFER holding it."""
        node = self.r.resolve(node)
        if node.op is Ops.BUFFER:  # computed already (an assign that ran resolves to the memory it wrote)
            return node
        done = self.r.realized.get(node)
        if done is None:
            self.schedule_node(node)
            done = self.r.realized[node]
        return done.base

    def schedule_node(self, node: UOp) -> None:
        """Schedule the kernel (or copy) computing `node`, after the kernels it depends on."""
        if node in self.r.realized:
            return
        if node in self.in_progress:
            raise RuntimeError(f"scheduler: cycle through {node.op}")
        self.in_progress.add(node)
        try:
            if node.op is Ops.COPY:
                self._schedule_copy(node)
            elif node.op is Ops.COLLECTIVE:
                self._schedule_collective(node)
            elif is_source_kernel(node):
                self._schedule_source(node)
            else:
                self._schedule_kernel(node)
        finally:
            self.in_progress.discard(node)

    def _new_output(self, node: UOp) -> UOp:
        shape = tuple(node.shape or ())
        assert node.device is not None
        # a symbolic shape gets a buffer of its largest size (the kernel writes the bound part, row-major), so the
        # buffer, like the kernel, serves every value of the variables
        size = prod(s if isinstance(s, int) else max_size(s) for s in shape)
        return UOp.new_buffer(node.device, size, node.dtype)

    def _schedule_copy(self, node: UOp) -> None:
        src = node.src[0]
        src_buf = self.buffer_for(src)
        out = self._new_output(node)
        self.items.append(
            ScheduleItem(
                UOp(Ops.COPY, node.dtype, (src_buf,), None),
                [buffer_of(out), buffer_of(src_buf)],
                writes=out,
                reads=(src_buf,),
            )
        )
        self.r.realized[node] = out.reshape(tuple(node.shape or ()))

    def _schedule_collective(self, node: UOp) -> None:
        """One item for a collective over several devices: it writes every device's output (multi.py builds them)."""
        *inputs, _ = node.src
        ins = [self.buffer_for(s) for s in inputs]
        siblings = [UOp(Ops.COLLECTIVE, node.dtype, (*inputs, UOp(Ops.DEVICE, arg=i.device)), node.arg) for i in inputs]
        outs = [self._new_output(s) for s in siblings]
        self.items.append(
            ScheduleItem(
                UOp(Ops.COLLECTIVE, node.dtype, (), node.arg[:2]),
                [buffer_of(o) for o in outs] + [buffer_of(b) for b in ins],
                outputs=len(outs),
                writes=outs[0],
                also_writes=tuple(outs[1:]),
                reads=tuple(ins),
            )
        )
        for s, o in zip(siblings, outs):
            self.r.realized[s] = o

    def _schedule_source(self, node: UOp) -> None:
        """One item for a kernel given as source (tg_tensor.custom.source_kernel): its inputs as contiguous buffers."""
        ins = [self.buffer_for(s) for s in node.src[:-1]]
        out = self._new_output(node)
        bufs = [buffer_of(out)] + [buffer_of(b) for b in ins]
        ast = source_program(node, tuple(b.dtype for b in bufs))
        self.items.append(ScheduleItem(ast, bufs, writes=out, reads=tuple(ins)))
        self.r.realized[node] = out.reshape(tuple(node.shape or ()))

    def buffer_for(self, node: UOp) -> UOp:
        """A BUFFER holding `node` contiguously (a kernel is scheduled when it is not one already; a reshape's is the
        buffer of what it reshapes: the same elements in the same order, not a copy)."""
        node = self.r.resolve(node)
        if is_contiguous_buffer(node):
            check_not_stale(node.base)
            return node.base
        if node.op is Ops.RESHAPE:
            return self.buffer_for(node.src[0])
        self.forced.add(node)
        return self.realize_first(node)

    def _schedule_kernel(self, node: UOp) -> None:
        if node.op is Ops.ASSIGN and len(node.src) > 2:
            self.realize_first(node.src[2])  # the assign this one follows writes the memory first
        for _ in range(10_000):
            builder = _KernelBuilder(self, node)
            out = node.src[0].base if node.op is Ops.ASSIGN else self._new_output(node)  # ASSIGN writes in place
            try:
                ast = builder.build(out)
            except _Fail as f:
                self.forced.add(f.node)
                self.schedule_node(f.node)
                continue
            except _TwoVersions as v:
                self.copies[v.node] = self.realize_first(UOp(Ops.CONTIGUOUS, v.node.dtype, (v.node,), _copy_arg()))
                continue
            bufs = [buffer_of(out)] + [buffer_of(b) for b in builder.inputs]
            ast, consts = lift_changing_consts(bufs[0].device, ast, len(bufs))
            bufs += consts
            reads, in_place = tuple(builder.inputs), node.op is Ops.ASSIGN
            item = ScheduleItem(ast, bufs, writes=out, reads=reads, in_place=in_place, consts=tuple(consts))
            self.items.append(item)
            if TRACE.active or DEBUG.value >= 2:  # (VIZ, DEBUG=2 lines) the tensor operations this kernel fuses
                self.r.kernel_ops[ast] = made_by(node, lambda u: u in self.r.realized)
            self.r.realized[node] = node.src[0] if node.op is Ops.ASSIGN else out.reshape(tuple(node.shape or ()))
            return
        raise RuntimeError("scheduler did not converge")


def _chain(node: UOp) -> list[UOp]:
    ret = []
    while node.op in GroupOp.Movement:
        ret.append(node)
        node = node.src[0]
    return ret


@dataclass
class _Recipe:
    """A schedule with its buffers abstracted: inputs by position among the graph's leaves, outputs as specs."""

    # (ast, [(kind, index)], variable values): kind 0 input, 1 new output, 2 fixed; the values are part of the key
    items: list[tuple[UOp, list[tuple[int, int]], dict[UOp, int]]]
    outs: list[tuple[UOp, int, DType]]  # (DEVICE node, size, dtype) of each new buffer
    roots: list[tuple[int, tuple[int, ...]]]  # per root: (output index, shape)
    fixed: list[Buffer] = field(default_factory=list)  # constant buffers the kernels read (lift_consts.py)


INPUT, OUTPUT, FIXED = 0, 1, 2  # (the recipes are cached by graph structure in Realizer.recipes)


def _structure(rz: Realizer, roots: list[UOp]) -> tuple[tuple[object, ...], list[UOp]]:
    """A key of the graph's structure (buffers by position) and its leaf BUFFER nodes, after realized nodes."""
    if (fast := _lazy_structure(rz, roots)) is not None:
        return fast
    resolve = rz.resolve
    ids: dict[UOp, int] = {}
    leaves: list[UOp] = []
    leaf_of: dict[UOp, int] = {}
    key: list[object] = []
    for root in roots:
        stack: list[tuple[UOp, bool]] = [(root, False)]
        while stack:
            node, ready = stack.pop()
            r = resolve(node)
            if node in ids:
                continue
            if r.op is Ops.BUFFER:  # the same buffer reached twice gets one leaf: aliasing is part of the key
                check_not_stale(r)
                ids[node] = len(key)
                if r not in leaf_of:
                    leaf_of[r] = len(leaves)
                    leaves.append(r)
                key.append(("BUF", leaf_of[r], r.dtype, r.arg[1], r.src[0].arg))
            elif ready or not r.src:
                ids[node] = len(key)
                key.append((r.op, r.dtype, arg_key(r.arg), tuple(ids[s] for s in r.src)))  # -0.0 is not 0.0
            else:
                stack.append((node, True))
                stack.extend((s, False) for s in r.src if s not in ids)
        key.append(("ROOT", ids[root]))
    return tuple(key), leaves


def _lazy_structure(rz: Realizer, roots: list[UOp]) -> tuple[tuple[object, ...], list[UOp]] | None:
    """The structure key from per-node memos (tg_uop.structure), when no node of the graph was realized before
    (a realized node would be a leaf: then None, and the graph is walked). Only new nodes cost work."""
    realized = rz.realized.data  # (the weakref-keyed table: no method call per node)
    if len(roots) == 1:  # (one root: its leaves are the graph's, in its order)
        root = roots[0]
        if realized and any(weakref.ref(n) in realized for n in root.toposort):
            return None
        return _one_root_key(rz, root)
    sids: list[int] = []
    leaves: list[UOp] = []
    index: dict[UOp, int] = {}
    maps: list[tuple[int, ...]] = []
    for root in roots:
        if realized and any(weakref.ref(n) in realized for n in root.toposort):
            return None
        sid, root_leaves = structure(root)
        sids.append(sid)
        maps.append(merge_leaves(root_leaves, leaves, index))
    if rz.failed.data or rz.stale.data:
        for leaf in leaves:
            check_not_stale(leaf)
    return ("LAZY", tuple(sids), tuple(maps)), leaves


def _one_root_key(rz: Realizer, root: UOp) -> tuple[tuple[object, ...], list[UOp]]:
    """_lazy_structure of one root (no node of its graph realized before): its key and leaves."""
    sid, root_leaves = structure(root)
    if rz.failed.data or rz.stale.data:  # (weak containers: len() is Python)
        for leaf in root_leaves:
            check_not_stale(leaf)
    return ("LAZY", sid, len(root_leaves)), list(root_leaves)


def _record(items: list[ScheduleItem], leaves: list[UOp], becomes: list[UOp]) -> _Recipe | None:
    """The recipe of a fresh schedule, or None when it does not fit the simple form (roots = new buffers)."""
    inputs = {id(buffer_of(leaf)): i for i, leaf in enumerate(leaves)}
    outs: dict[int, int] = {}
    specs: list[tuple[UOp, int, DType]] = []
    fixed: dict[int, int] = {}
    recipe = _Recipe([], specs, [])
    for item in items:
        if item.ast.op is not Ops.SINK and not (item.ast.op is Ops.CUSTOM and not item.ast.src):
            return None  # a COPY's AST names its source BUFFER: caching it would keep that buffer alive
        if item.in_place:
            return None  # an assign's result is a new version of a memory, not a new buffer
        consts = {id(b) for b in item.consts}
        refs: list[tuple[int, int]] = []
        for b in item.bufs:
            if id(b) in inputs:
                refs.append((INPUT, inputs[id(b)]))
            elif id(b) in consts:
                if id(b) not in fixed:
                    fixed[id(b)] = len(recipe.fixed)
                    recipe.fixed.append(b)
                refs.append((FIXED, fixed[id(b)]))
            else:
                if id(b) not in outs:
                    outs[id(b)] = len(specs)
                    specs.append((UOp(Ops.DEVICE, arg=b.device), b.size, b.dtype))
                refs.append((OUTPUT, outs[id(b)]))
        recipe.items.append((item.ast, refs, dict(item.var_vals)))
    for node in becomes:
        base = node.base
        if base.op is not Ops.BUFFER or id(buffer_of(base)) not in outs or node.op not in (Ops.BUFFER, Ops.RESHAPE):
            return None
        recipe.roots.append((outs[id(buffer_of(base))], tuple(node.shape or ())))
    return recipe


def _replay_launches(
    rz: Realizer, recipe: _Recipe, leaves: list[UOp]
) -> tuple[list[tuple[UOp, list[Buffer], dict[UOp, int]]], list[UOp]]:
    """The recipe's kernels bound to `leaves`' buffers and fresh output buffers, as (AST, buffers, variable values)
    each, and the realized nodes that stand for the recipe's roots (the output BUFFER nodes are filed)."""
    known = rz.buffers.data  # (weakref -> Buffer: no method call per leaf)
    inputs = [b if (b := known.get(weakref.ref(leaf))) is not None else buffer_of(leaf) for leaf in leaves]
    new: list[UOp] = []
    outputs: list[Buffer] = []
    buffers = rz.buffers
    for device, size, dt in recipe.outs:  # (one loop: this runs on every tiny realize)
        node, buf = UOp.new_buffer(device, size, dt), Buffer(device.arg, size, dt)
        buffers[node] = buf
        new.append(node)
        outputs.append(buf)
    pick = (inputs, outputs, recipe.fixed)
    launches = [
        (ast, [pick[kind][i] for kind, i in refs], dict(vals) if vals else {}) for ast, refs, vals in recipe.items
    ]
    return launches, [recorded_view(new[i], shape) for i, shape in recipe.roots]


def recorded_view(buf: UOp, shape: tuple[sint, ...]) -> UOp:
    """The BUFFER node `buf` viewed at `shape`, a shape of its size checked when it was recorded (a replayed
    schedule's or TinyJit recording's output): built without UOp.reshape's checks, which every replay would repeat."""
    return buf if shape == (buf.arg[1],) else UOp(Ops.RESHAPE, buf.dtype, (buf,), shape)


def _replay(rz: Realizer, recipe: _Recipe, leaves: list[UOp]) -> tuple[list[ScheduleItem], list[UOp]]:
    launches, views = _replay_launches(rz, recipe, leaves)
    return [ScheduleItem.replayed(*launch) for launch in launches], views


def _cached(rz: Realizer, roots: list[UOp]) -> tuple[list[UOp], tuple[object, ...], list[UOp], _Recipe | None] | None:
    """The schedule cache's view of `roots` (both ways to a replay go through it): the nodes standing for them now,
    their structure key and leaves, and the recipe cached under that key (None when there is none, or when it holds
    constants and plain buffers are asked for); None when a root is a realized buffer already (no kernel to find)."""
    resolved = [rz.resolve(r) for r in roots] if rz.realized.data else roots
    for r in resolved:
        if r.op is Ops.BUFFER or r.base.op is Ops.BUFFER:
            return None
    key, leaves = _structure(rz, roots)
    recipe = rz.recipes.get(key)
    return resolved, key, leaves, None if recipe is None or (rz.plain_only and recipe.fixed) else recipe


def replay_one(rz: Realizer, root: UOp) -> tuple[UOp, list[Buffer], dict[UOp, int], UOp] | None:
    """(AST, buffers, variable values, the realized node standing for `root`) of the one kernel computing `root`,
    when the schedule cache holds `root`'s structure as one kernel with one output (else None, and nothing
    changed): create_schedule's hit for one root, without a ScheduleItem (the tiny realize's short way).
    The output BUFFER node and its Buffer are filed, and `root` is recorded as realized by it."""
    if not rz.realized.data and root.op is not Ops.BUFFER and root.base.op is not Ops.BUFFER:
        key, leaves = _one_root_key(rz, root)  # (nothing realized is alive: _cached's way, without its lists)
        recipe = rz.recipes.get(key)
        if recipe is not None and rz.plain_only and recipe.fixed:
            return None
    elif (found := _cached(rz, [root])) is not None:
        (root,), _, leaves, recipe = found
    else:
        return None
    if recipe is None or len(recipe.items) != 1 or len(recipe.outs) != 1:
        return None
    ((ast, bufs, var_vals),), (result,) = _replay_launches(rz, recipe, leaves)
    rz.realized[root] = result
    return ast, bufs, var_vals, result


def create_schedule(roots: list[UOp]) -> tuple[list[ScheduleItem], dict[UOp, UOp]]:
    """ScheduleItems computing every root, and for each root the realized node that now stands for it.

    Schedules are cached by graph structure: a graph shaped like one seen before (same ops, constants,
    shapes and buffer sizes; other buffers) reuses the kernels found then without running the scheduler.
    """
    rz = current()
    if (found := _cached(rz, roots)) is None:
        return _create_schedule(roots)
    resolved, key, leaves, recipe = found
    if recipe is not None:
        items, results = _replay(rz, recipe, leaves)
        realized = rz.realized
        for root, res in zip(resolved, results):
            realized[root] = res
        return items, dict(zip(roots, results))
    items, becomes = _create_schedule(roots)
    recipe = _record(items, leaves, [becomes[r] for r in roots])
    if recipe is not None:
        rz.recipes[key] = recipe
    return items, becomes


_copy_ids = itertools.count()


def _copy_arg() -> tuple[str, int]:
    """A unique arg: a copy of a buffer is a new node every time (the buffer's contents change)."""
    return ("copy", next(_copy_ids))


def create_copy_kernel(buf: UOp) -> tuple[ScheduleItem, UOp]:
    """One kernel copying BUFFER `buf` into a fresh buffer, and that buffer's node."""
    items, becomes = _create_schedule([UOp(Ops.CONTIGUOUS, buf.dtype, (buf,), ("copy", next(_copy_ids)))])
    (item,) = items
    return item, next(iter(becomes.values())).base


def compute_units(device: str | tuple[str, ...] | None) -> int:
    """The compute units (a GPU's SMs) a kernel on `device` should fill; 0 for CPUs and device sets."""
    if not isinstance(device, str) or isinstance(device, DeviceSet):
        return 0
    return Device[device].renderer.compute_units


def _create_schedule(roots: list[UOp]) -> tuple[list[ScheduleItem], dict[UOp, UOp]]:
    sched = Scheduler()
    realized = sched.r.realized
    becomes: dict[UOp, UOp] = {}
    rewritten: dict[UOp, UOp] = {}  # by split_reduces, across the roots
    todo: dict[UOp, UOp] = {}  # root -> the node its kernels compute
    for root in roots:
        r = split_reduces(sched.r.resolve(root), realized, rewritten, compute_units(root.device))
        if r.op is Ops.BUFFER or (r.base.op is Ops.BUFFER and all(n.op in GroupOp.Movement for n in _chain(r))):
            becomes[root] = r
        else:
            todo[root] = r
    # nodes several kernels would recompute at a higher cost than loading them get kernels of their own
    cost = FusionCost(sched.r.resolve, lambda n: sched.is_boundary(n, n), buffer_of)
    sched.forced.update(cost.computed_once(todo.values()))
    for root, r in todo.items():
        sched.schedule_node(r)
        becomes[root] = realized[r]
    # the tensors' graph holds the nodes as they were before the split: a later schedule reading one of them (the
    # next layer's, when a decode step realizes layer by layer) must find its buffer, not compute it all again
    for node, new in rewritten.items():
        if new is node or node in realized:
            continue
        views = []  # a split reduction is a reshape of its second stage, the node its kernel realized
        while new not in realized and new.op in GroupOp.Movement:
            views.append(new)
            new = new.src[0]
        if new in realized:
            value = realized[new]
            for v in reversed(views):
                value = v.replace(src=(value,))
            realized[node] = value
    return merge_siblings(sched.items), becomes
