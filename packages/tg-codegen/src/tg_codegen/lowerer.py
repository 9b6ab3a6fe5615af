"""Lowering: a Kernel's AST becomes loops (RANGE), indices (from ShapeTrackers) and REDUCE nodes.

The lowered graph uses:
  RANGE(end) arg=(axis, kind)         a loop variable, 0 <= r < end; kind a RangeKind (loop, reduce, thread)
  INDEX(buf, index)                   address of buf[index]
  LOAD(INDEX[, gate])                 read (0 where gate is false)
  STORE(INDEX, value[, gate])         write (skipped where gate is false)
  REDUCE(value, *ranges) arg=alu op   reduce value over the ranges
"""

from __future__ import annotations

import functools
import itertools

from tg_codegen.axes import AxisType, RangeKind
from tg_codegen.gpudims import special_indexes
from tg_codegen.kernel import Kernel
from tg_codegen.linearize import acc_slot
from tg_codegen.tc.stage import Stager
from tg_codegen.vectorize import VECTOR_WIDTHS, pack_stores
from tg_codegen.wide_index import index_dtype
from tg_shape import ShapeTracker
from tg_uop import DType, Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite, run_pass
from tg_uop.helpers import LRUCache, prod
from tg_uop.symbolic import symbolic
from tg_uop.trace import TRACE


class Lowerer:
    """Turns the kernel AST into a lowered graph with explicit loops.

    Loop axes (thread, global, local, reduce, group) become RANGEs; upcast and unroll axes are expanded:
    the body is lowered once per value of those axes with that value as a constant index, so the
    output gets one STORE per upcast value and each reduction combines its unrolled copies.
    """

    def __init__(self, k: Kernel) -> None:
        self.k = k
        self.idx_dt = self._index_dtype()
        zero = UOp.const(self.idx_dt, 0)
        self.loop: list[UOp] = []
        for i, (s, t) in enumerate(zip(k.full_shape, k.axis_types)):
            if t in (AxisType.UPCAST, AxisType.UNROLL) or s == 1:
                self.loop.append(zero)
                continue
            end = UOp.const(self.idx_dt, s) if isinstance(s, int) else s.cast(self.idx_dt)
            reduces = t in (AxisType.REDUCE, AxisType.GROUP)
            kind = RangeKind.REDUCE if reduces else RangeKind.THREAD if t == AxisType.THREAD else RangeKind.LOOP
            self.loop.append(UOp(Ops.RANGE, self.idx_dt, (end,), (i, kind)))
        self._thread_pair()
        self.in_bounds: tuple[UOp, ...] = ()  # launch ids of symbolic axes below their size (launched at the largest)
        if k.opts.has_local:
            self._launch_ids()
        self.memo: dict[tuple[UOp, tuple[UOp, ...]], UOp] = {}
        self.n_locals = 0
        self.stager = Stager(self) if k.staged else None

    def _thread_pair(self) -> None:
        """Two THREAD axes (sizes a and b) run as one chunk loop of a * b: the first axis's index is chunk // b,
        the second's chunk % b (the C renderer hands one loop's iterations to the thread pool)."""
        threads = [a for a in self.k.axes_of(AxisType.THREAD) if self.loop[a].op is Ops.RANGE]
        if len(threads) != 2:
            return
        (first, second), inner = threads, int(self.k.full_shape[threads[1]])
        total = UOp.const(self.idx_dt, int(self.k.full_shape[first]) * inner)
        chunk = UOp(Ops.RANGE, self.idx_dt, (total,), (first, RangeKind.THREAD))
        self.loop[first], self.loop[second] = chunk // inner, chunk % inner

    def _index_dtype(self) -> DType:
        """int32 index maths, or int64 when this kernel's sizes can pass 2^31 (wide_index.py)."""
        return index_dtype(self.k)

    def _launch_ids(self) -> None:
        """GPU style: output axes are group ids, local and group axes local ids (no loops for them)."""
        for types, prefix in (((AxisType.GLOBAL, AxisType.THREAD), "gidx"), ((AxisType.LOCAL, AxisType.GROUP), "lidx")):
            axes = self.k.axes_of(*types)
            lim = self.k.opts.limits
            maxes = None if lim is None else lim.grid if prefix == "gidx" else lim.block
            sizes = [self.k.full_shape[a] for a in axes]
            largest = [s if isinstance(s, int) else int(s.vmax) for s in sizes]
            for a, size, idx in zip(axes, sizes, special_indexes(largest, prefix, maxes)):
                self.loop[a] = idx.cast(self.idx_dt)
                if not isinstance(size, int):  # a symbolic axis: launched at its largest size, the rest gated off
                    self.in_bounds += (self.loop[a] < size.cast(self.idx_dt),)

    def _group_gate(self) -> tuple[UOp, ...]:
        """Only the first thread of a GROUP writes the result."""
        groups = [self.loop[a] for a in self.k.axes_of(AxisType.GROUP) if self.k.full_shape[a] != 1]
        return tuple(g.eq(0) for g in groups)

    def _combos(self, types: tuple[AxisType, ...], last: int | None = None) -> list[dict[int, int]]:
        """Every assignment of values to the axes of these types (axis `last` varies fastest)."""
        combos: list[dict[int, int]] = [{}]
        axes = [a for a in self.k.axes_of(*types) if a != last] + ([last] if last is not None else [])
        for a in axes:
            combos = [{**c, a: v} for c in combos for v in range(int(self.k.full_shape[a]))]
        return combos

    def _idxs(self, fixed: dict[int, int], inside_reduce: bool) -> tuple[UOp, ...]:
        red = (AxisType.REDUCE, AxisType.GROUP, AxisType.UNROLL)
        ret = []
        for i, t in enumerate(self.k.axis_types):
            if i in fixed:
                ret.append(UOp.const(self.idx_dt, fixed[i]))
            elif t in red and not inside_reduce:
                ret.append(UOp.const(self.idx_dt, 0))
            else:
                ret.append(self.loop[i])
        return tuple(ret)

    def lower(self) -> UOp:
        """Lower (a named pass), simplify the index maths, drop gates that became true, pack vector stores."""
        vaxis, width = self._vector_axis()
        lower_all = lambda ast: self._lower_stores(ast, vaxis)  # noqa: E731
        sink = run_pass("lower: indexing, ranges, loads and stores", lower_all, self.k.ast)
        sink = drop_true_gates(graph_rewrite(sink, symbolic, name="simplify lowered kernel"))
        if vaxis is None:
            return sink
        return run_pass("vectorize stores", lambda s: _pack(s, width), sink)

    def _lower_stores(self, ast: UOp, vaxis: int | None) -> UOp:
        combos = self._combos((AxisType.UPCAST,), last=vaxis)
        stores = [self._lower(s, self._idxs(c, inside_reduce=False), c) for s in ast.src for c in combos]
        return UOp(Ops.SINK, dtypes.void, tuple(stores) + (self.stager.finish() if self.stager is not None else ()))

    def _vector_axis(self) -> tuple[int | None, int]:
        """(axis, lanes) to pack into vectors: an upcast axis the first store walks with stride 1, else the last."""
        itemsize = max(s.src[0].dtype.itemsize for s in self.k.ast.src)
        widths = [w for w in VECTOR_WIDTHS if w * itemsize <= self.k.opts.vector_bytes]
        cands = [a for a in self.k.axes_of(AxisType.UPCAST) if any(int(self.k.full_shape[a]) % w == 0 for w in widths)]
        if not cands:
            return None, 1
        strides = self.k.ast.src[0].src[1].arg.real_strides()
        unit = [a for a in cands if strides[a] == 1]
        axis = unit[0] if unit else cands[-1]
        return axis, max(w for w in widths if int(self.k.full_shape[axis]) % w == 0)

    def _lower(self, u: UOp, idxs: tuple[UOp, ...], fixed: dict[int, int]) -> UOp:
        key = (u, idxs)
        if key in self.memo:
            return self.memo[key]
        op = u.op
        if op is Ops.STORE:
            buf, view, value = u.src
            index, valid = self._indexed(view.arg, idxs)
            val = self._lower(value, idxs, fixed)
            gates = _gate(valid) + self._group_gate() + self.in_bounds
            gate = (functools.reduce(lambda a, b: a & b, gates),) if gates else ()
            ret = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, buf.dtype, (buf, index)), val) + gate)
        elif op is Ops.LOAD and self.stager is not None and (staged := self.stager.read(u, idxs)) is not None:
            ret = staged
        elif op is Ops.LOAD:
            buf, view = u.src[:2]
            index, valid = self._indexed(view.arg, idxs)
            index, valid = self._gathered(u, index, valid, idxs, fixed)
            gates = _gate(valid) + self.in_bounds
            gate = (functools.reduce(lambda a, b: a & b, gates),) if gates else ()
            ret = UOp(Ops.LOAD, u.dtype, (UOp(Ops.INDEX, buf.dtype, (buf, index)),) + gate)
        elif op is Ops.CONST and u.src:
            valid = _valid(u.src[0].arg, idxs)
            c = UOp.const(u.dtype, u.arg)
            cgate = _gate(valid)
            ret = cgate[0].where(c, c.const_like(0)) if cgate else c
        elif op is Ops.ARANGE:  # the value at a position is the index it reads in a buffer of 0..n-1
            index, valid = self._indexed(u.src[0].arg, idxs)
            index = index.cast(u.dtype) if index.dtype != u.dtype else index
            agate = _gate(valid)
            ret = agate[0].where(index, index.const_like(0)) if agate else index
        elif op is Ops.REDUCE_AXIS:
            ret = self._lower_reduce(u, fixed)
        else:
            ret = u.replace(src=tuple(self._lower(s, idxs, fixed) for s in u.src))
        self.memo[key] = ret
        if TRACE.log is not None and op in _SHOWN:  # VIZ: each load, store, reduce lowered is a step
            TRACE.fire(f"lower {op.name}", u, ret, _branch(op))
        return ret

    def _gathered(
        self, u: UOp, index: UOp, valid: UOp, idxs: tuple[UOp, ...], fixed: dict[int, int]
    ) -> tuple[UOp, UOp]:
        """A gathered load (gather.py) reads `idx * stride` further along, gated by 0 <= idx < n."""
        for idx_ast, (stride, n) in zip(u.src[2:], u.arg or ()):
            idx = self._lower(idx_ast, idxs, fixed)
            idx = idx.cast(dtypes.int32) if idx.dtype != dtypes.int32 else idx
            index = index + idx * stride
            in_range = (idx < n) & (idx < 0).logical_not()
            valid = in_range if valid.op is Ops.CONST and valid.arg is True else valid & in_range
        return index, valid

    def _indexed(self, st: ShapeTracker, idxs: tuple[UOp, ...]) -> tuple[UOp, UOp]:
        """st.to_indexed_uops(idxs), shared by the lanes that differ only on axes `st` ignores.

        The lanes of a register tile repeat a load along the axes it is broadcast over; simplifying
        its index once per distinct address instead of once per lane keeps lowering fast. The answers are
        kept across kernels too (a training step's kernels read the same views at the same loop indexes).
        """
        last = st.views[-1]
        zero = UOp.const(self.idx_dt, 0)
        key_idxs = tuple(
            zero if last.strides[i] == 0 and (last.mask is None or last.mask[i] == (0, last.shape[i])) else x
            for i, x in enumerate(idxs)
        )
        key = (st, key_idxs)
        if (ret := _INDEXED.get(key)) is None:
            ret = _INDEXED[key] = st.to_indexed_uops(list(key_idxs))
        return ret

    def _lower_reduce(self, u: UOp, fixed: dict[int, int]) -> UOp:
        alu_op = u.arg[0]
        parts = [
            self._lower(u.src[0], self._idxs({**fixed, **c}, inside_reduce=True), {**fixed, **c})
            for c in self._combos((AxisType.UNROLL,))
        ]
        val = _tree(alu_op, parts)
        rngs = tuple(
            self.loop[a] for a in self.k.axes_of(AxisType.REDUCE, AxisType.GROUP) if self.loop[a].op is Ops.RANGE
        )
        if self.stager is not None and rngs and alu_op is Ops.ADD:
            # a register tile has many accumulators: acc + p0 + p1 + ... (a chain of FMAs) beats a tree of products
            val = functools.reduce(lambda a, b: a + b, parts, acc_slot(u.dtype))
        if not rngs and alu_op is Ops.ADD and dtypes.is_float(val.dtype):
            # fully unrolled: no accumulator, but a sum still starts from +0.0 as a loop's does (and numpy's):
            # -0.0 + -0.0 is -0.0, their sum is 0.0
            val = val.const_like(0.0) + val
        ret = UOp(Ops.REDUCE, u.dtype, (val, *rngs), alu_op) if rngs else val
        return self._group_reduce(ret, alu_op) if self._group_gate() else ret

    def _group_reduce(self, partial: UOp, alu_op: Ops) -> UOp:
        """Each thread of the group stores its partial in local memory; after a barrier, all are combined.

        A single GROUP axis of n = a * b threads (a, b > 1, a <= b) is combined in two stages: a of its threads each
        combine b partials into a second local buffer, then every thread combines those a values (a + b loads each,
        not n: a 256-thread group's max was ~1000 instructions per thread)."""
        locs = self.k.axes_of(AxisType.LOCAL, AxisType.GROUP)
        sizes = [int(self.k.full_shape[a]) for a in locs]
        buf, barrier = self._share(partial, locs, sizes)
        group = [i for i, a in enumerate(locs) if self.k.axis_types[a] == AxisType.GROUP]
        split = _split(sizes[group[0]]) if len(group) == 1 else None
        if split is not None:
            return self._two_stage(alu_op, buf, barrier, locs, sizes, group[0], split)
        return _tree(
            alu_op, [self._shared_load(buf, barrier, locs, sizes, at) for at in self._assignments(group, sizes)]
        )

    def _share(
        self, value: UOp, locs: list[int], sizes: list[int], at: dict[int, UOp] | None = None, gate: UOp | None = None
    ) -> tuple[UOp, UOp]:
        """A fresh local buffer of prod(sizes), `value` stored at this thread's place (moved by `at`, see _place)
        where `gate` holds, and the barrier after the store."""
        buf = UOp(Ops.DEFINE_LOCAL, value.dtype.ptr(int(prod(sizes)), local=True), (), f"temp{self.n_locals}")
        self.n_locals += 1
        index = UOp(Ops.INDEX, buf.dtype, (buf, self._place(locs, sizes, at or {})))
        store = UOp(Ops.STORE, dtypes.void, (index, value) + (() if gate is None else (gate,)))
        return buf, UOp(Ops.BARRIER, dtypes.void, (store,))

    def _place(self, locs: list[int], sizes: list[int], at: dict[int, UOp]) -> UOp:
        """The row-major index over the local axes `locs` of this thread, with `at` (position in locs -> index)
        replacing its own index on some of them."""
        terms = [(at[i] if i in at else self.loop[a]) * st for i, (a, st) in enumerate(zip(locs, _strides(sizes)))]
        return functools.reduce(lambda a, b: a + b, terms)

    def _shared_load(self, buf: UOp, barrier: UOp, locs: list[int], sizes: list[int], at: dict[int, UOp]) -> UOp:
        index = UOp(Ops.INDEX, buf.dtype, (buf, self._place(locs, sizes, at), barrier))
        return UOp(Ops.LOAD, buf.dtype.base, (index,))

    def _two_stage(
        self, op: Ops, buf: UOp, barrier: UOp, locs: list[int], sizes: list[int], g: int, split: tuple[int, int]
    ) -> UOp:
        """Threads 0..a-1 of group axis `g` combine b partials each into a second buffer; all then combine its a."""
        a, b = split
        lid = self.loop[locs[g]]
        chunk = lid % a  # (every thread computes a chunk's value, so none waits on a branch; a of them store it)
        firsts = [self._shared_load(buf, barrier, locs, sizes, {g: chunk * b + j}) for j in range(b)]
        sizes2 = sizes[:g] + [a] + sizes[g + 1 :]
        buf2, barrier2 = self._share(_tree(op, firsts), locs, sizes2, at={g: chunk}, gate=lid < a)
        seconds = [self._shared_load(buf2, barrier2, locs, sizes2, {g: self._const(c)}) for c in range(a)]
        return _tree(op, seconds)

    def _const(self, v: int) -> UOp:
        return UOp.const(self.idx_dt, v)

    def _assignments(self, group: list[int], sizes: list[int]) -> list[dict[int, UOp]]:
        """Every combination of values of the group axes (positions in the local axes), as index constants."""
        combos = itertools.product(*[range(sizes[i]) for i in group])
        return [{i: self._const(v) for i, v in zip(group, vals)} for vals in combos]


def _strides(sizes: list[int]) -> list[int]:
    return [int(prod(sizes[i + 1 :])) for i in range(len(sizes))]


def _split(n: int) -> tuple[int, int] | None:
    """(a, b) with a * b == n, 1 < a <= b and a as large as possible; None when n is prime or small (< 64)."""
    if n < 64:
        return None
    a = max(d for d in range(1, int(n**0.5) + 1) if n % d == 0)
    return (a, n // a) if a > 1 else None


def _tree(op: Ops, parts: list[UOp]) -> UOp:
    """Combine values pairwise (a balanced tree keeps the dependency chains short)."""
    while len(parts) > 1:
        nxt = [_combine(op, a, b) for a, b in zip(parts[::2], parts[1::2])]
        parts = nxt + ([parts[-1]] if len(parts) % 2 else [])
    return parts[0]


def _combine(op: Ops, a: UOp, b: UOp) -> UOp:
    return a.maximum(b) if op is Ops.MAX else a.alu(op, b)


def _gate(valid: UOp) -> tuple[UOp, ...]:
    """The gate operand for a validity expression (simplified later, with the whole kernel, in one pass)."""
    if valid.op is Ops.CONST and valid.arg is True:
        return ()
    return (valid,)


def _pack(sink: UOp, width: int) -> UOp:
    """Stores of neighbouring lanes, `width` at a time, packed into vector stores (vectorize.py)."""
    stores = [u for u in sink.src if u.op is Ops.STORE]  # (a staged pipeline's last barrier is a source too)
    groups = [stores[i : i + width] for i in range(0, len(stores), width)]
    return UOp(Ops.SINK, dtypes.void, tuple(pack_stores(groups)) + tuple(u for u in sink.src if u.op is not Ops.STORE))


def _valid(st: ShapeTracker, idxs: tuple[UOp, ...]) -> UOp:
    """Where a view of a constant is inside its mask, at loop indexes `idxs` (its index is never needed)."""
    if all(v.mask is None for v in st.views):
        return UOp.const(dtypes.bool, True)
    key = (st, idxs)
    if (ret := _VALID.get(key)) is None:
        ret = _VALID[key] = st.to_indexed_uops_raw(list(idxs))[1].simplify()
    return ret


@functools.cache
def _branch(op: Ops) -> str:
    """file:line of the branch of Lowerer._lower that lowers `op` (what VIZ shows as the step's rule)."""
    import inspect

    lines, first = inspect.getsourcelines(Lowerer._lower)
    plain = [i for i, text in enumerate(lines) if text.rstrip().endswith(f"op is Ops.{op.name}:")]
    loose = [i for i, text in enumerate(lines) if f"op is Ops.{op.name}" in text]
    return f"{__file__}:{first + (plain or loose or [0])[0]}"


# the ops whose lowering VIZ shows as a step of its own (the rest are rebuilt around them)
_SHOWN = frozenset({Ops.STORE, Ops.LOAD, Ops.REDUCE_AXIS, Ops.CONST, Ops.ARANGE})
_VALID: LRUCache[tuple[ShapeTracker, tuple[UOp, ...]], UOp] = LRUCache(4096)
# _indexed's answers by (view, loop indexes): half of a first MNIST step's index expressions were simplified before
_INDEXED: LRUCache[tuple[ShapeTracker, tuple[UOp, ...]], tuple[UOp, UOp]] = LRUCache(4096)

_TRUE = UPat(Ops.CONST, dtype=dtypes.bool, arg=True)
# a LOAD(index, gate) or STORE(index, value, gate) whose gate simplified to true loses it
true_gates = PatternMatcher(
    [
        (UPat(Ops.LOAD, src=(UPat(name="i"), _TRUE), name="x"), lambda x, i: x.replace(src=(i,))),
        (UPat(Ops.STORE, src=(UPat(name="i"), UPat(name="v"), _TRUE), name="x"), lambda x, i, v: x.replace(src=(i, v))),
    ]
)


def _keep_old(x: UOp, i: UOp, c: UOp, a: UOp, b: UOp) -> UOp | None:
    """STORE(i, where(c, a, b)) where a or b is the value already at i: store the other one only where it differs."""
    gate = c if b.op is Ops.LOAD and b.src == (i,) else c.logical_not() if a.op is Ops.LOAD and a.src == (i,) else None
    if gate is None:
        return None
    value = a if gate is c else b
    return x.replace(src=(i, value, gate & x.src[2]) if len(x.src) > 2 else (i, value, gate))


# a store that writes back the value it loaded from the same address where a condition fails (an assign of
# where(mask, new, self), e.g. a KV cache slot update) stores only where the condition holds: a masked update of a
# big buffer then reads nothing and writes only its slots
keep_old = PatternMatcher(
    [
        (
            UPat(
                Ops.STORE,
                src=(UPat(name="i"), UPat(Ops.WHERE, src=(UPat(name="c"), UPat(name="a"), UPat(name="b")))),
                allow_any_len=True,
                name="x",
            ),
            _keep_old,
        )
    ]
)


def drop_true_gates(sink: UOp) -> UOp:
    """Remove gates that simplified to true from LOADs and STOREs, and write-backs of loaded values (a rewrite pass)."""
    return graph_rewrite(sink, true_gates + keep_old, name="drop true gates")
