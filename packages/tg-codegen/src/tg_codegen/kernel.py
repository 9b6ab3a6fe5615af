"""Kernel: one kernel AST with its loop shape. All views in a kernel share one `full_shape`.

A kernel AST, as the scheduler builds it:
  SINK(STORE(DEFINE_GLOBAL, VIEW(st), value), ...)
  value := LOAD(DEFINE_GLOBAL, VIEW(st)) | CONST(VIEW(st)) | ALU(value...) | REDUCE_AXIS(value)
Loads under a REDUCE_AXIS have views of the full shape; everything else has the reduced axes set to 1.

>>> from tg_codegen.kernel import Kernel   # doctest: +SKIP
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from tg_codegen.axes import AxisType
from tg_codegen.gather import fold_gathers
from tg_codegen.kblock import apply_kblock, carried
from tg_codegen.limits import assign_dims, check_resources, check_threads
from tg_codegen.opt import KernelOptError, Opt, OptOps
from tg_codegen.renderer import Renderer
from tg_codegen.tc.opts import apply_tc
from tg_codegen.tc.stage import apply_stage, stage_bytes
from tg_shape import ShapeTracker
from tg_uop import GroupOp, Ops, UOp, map_graph
from tg_uop.helpers import prod, to_function_name
from tg_uop.uop import sint


class Kernel:
    """The loop structure of one kernel AST: axes (global first, reduce last) and the views on them.

    Each axis has a type: "thread" (CPU threads), "global" (output loop), "local" (workgroup),
    "reduce" (reduce loop), "group" (reduce across a workgroup), "upcast" (output axis expanded into
    straight-line code), "unroll" (reduce axis expanded). Optimizations (`apply_opt`) split and move axes.
    """

    def __init__(self, ast: UOp, opts: Renderer | None = None) -> None:
        if ast.op is not Ops.SINK or not ast.src or any(s.op is not Ops.STORE for s in ast.src):
            raise ValueError(f"a kernel AST is a SINK of STOREs, got {ast.op}")
        self.opts = opts if opts is not None else Renderer()
        ast = fold_gathers(ast)
        self.ast = ast
        views = [u for u in ast.toposort if u.op is Ops.VIEW]
        reduces = [u for u in ast.toposort if u.op is Ops.REDUCE_AXIS]
        full = _full_shape(views)
        reduce_axes = sorted({a for r in reduces for a in r.arg[1]})
        for r in reduces:
            src_shape = r.src[0].shape
            if src_shape is not None and tuple(src_shape) != full:
                raise ValueError(f"reduce input shape {src_shape} differs from the kernel's full shape {full}")
        # opts need every reduction of the kernel to reduce the same axes
        self.uniform_reduce = all(set(r.arg[1]) == set(reduce_axes) for r in reduces)
        # reduce axes last
        order = [i for i in range(len(full)) if i not in reduce_axes] + reduce_axes
        self.permute_order = tuple(order)
        self.full_shape: tuple[sint, ...] = tuple(full[i] for i in order)
        self.first_reduce = len(full) - len(reduce_axes)
        self.ast = self._permute_ast(ast, self.permute_order) if order != list(range(len(full))) else ast
        self.ast = self._merge_axes(self.ast)
        self.axis_types: list[AxisType] = [AxisType.GLOBAL] * self.first_reduce + [AxisType.REDUCE] * (
            len(self.full_shape) - self.first_reduce
        )
        self.applied_opts: list[Opt] = []
        self.dont_use_locals = False
        self.staged = False  # STAGE applied: shared operand tiles go through shared memory (tc/stage.py)
        self.stage_depth = 0  # STAGE's arg: tiles in flight (2 or more: pipelined copies)
        self.wgmma = False  # TC picked a warpgroup MMA (Hopper): operands read from the staged tiles by descriptor

    # ---- shape plumbing ----
    @property
    def reduceops(self) -> list[UOp]:
        return [u for u in self.ast.toposort if u.op is Ops.REDUCE_AXIS]

    @functools.cached_property
    def bufs(self) -> list[UOp]:
        """DEFINE_GLOBALs in argument order."""
        return sorted((u for u in self.ast.toposort if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg)

    @property
    def sts(self) -> list[ShapeTracker]:
        return [u.arg for u in self.ast.toposort if u.op is Ops.VIEW]

    def _permute_ast(self, ast: UOp, order: tuple[int, ...]) -> UOp:
        inv = {old: new for new, old in enumerate(order)}
        new_axes = lambda axes: tuple(sorted(inv[a] for a in axes))  # noqa: E731
        return _rebuild("kernel: reduce axes last", ast, lambda st: st.permute(order), new_axes)

    def _merge_axes(self, ast: UOp) -> UOp:
        """Merge neighbouring axes that every view can merge (fewer, longer loops)."""
        sts = [u.arg for u in ast.toposort if u.op is Ops.VIEW]
        shape = list(self.full_shape)
        groups: list[list[int]] = []
        for i in range(len(shape)):
            is_red = i >= self.first_reduce
            if (
                groups
                and (groups[-1][-1] >= self.first_reduce) == is_red
                and all(_mergeable(st, groups[-1][-1], i) for st in sts)
            ):
                groups[-1].append(i)
            else:
                groups.append([i])
        if len(groups) == len(shape):
            return ast
        new_full = tuple(prod(shape[i] for i in g) for g in groups)
        new_first_reduce = sum(1 for g in groups if g[0] < self.first_reduce)

        self.full_shape, self.first_reduce = new_full, new_first_reduce
        merged_reduce = tuple(range(new_first_reduce, len(groups)))
        merged = lambda st: st.reshape(tuple(prod(st.shape[i] for i in g) for g in groups))  # noqa: E731
        return _rebuild("kernel: merge axes", ast, merged, lambda _: merged_reduce)

    # ---- axes by type ----
    def axes_of(self, *types: AxisType) -> list[int]:
        """Axis numbers whose type is one of `types`, in order."""
        return [i for i, t in enumerate(self.axis_types) if t in types]

    @property
    def upcast_size(self) -> int:
        """How many copies of the body the upcast and unroll axes make."""
        return int(prod(self.full_shape[i] for i in self.axes_of(AxisType.UPCAST, AxisType.UNROLL)))

    def copy(self) -> Kernel:
        """A fresh Kernel of the same AST with the same opts applied."""
        ret = Kernel.__new__(Kernel)
        ret.__dict__.update(self.__dict__)
        ret.axis_types, ret.applied_opts = list(self.axis_types), list(self.applied_opts)
        ret.__dict__.pop("bufs", None)
        return ret

    # ---- optimizations ----
    def apply_opts(self, opts: list[Opt] | tuple[Opt, ...]) -> Kernel:
        for opt in opts:
            self.apply_opt(opt)
        return self

    def apply_first(self, choices: list[Opt]) -> bool:
        """Apply the first of `choices` that applies; False (kernel unchanged) when none does."""
        for opt in choices:
            try:
                self.apply_opt(opt)
                return True
            except KernelOptError:
                continue
        return False

    def apply_all(self, opts: list[Opt]) -> bool:
        """Apply every one of `opts` in order; False (kernel unchanged) when one of them does not apply."""
        trial = self.copy()
        try:
            trial.apply_opts(opts)
        except KernelOptError:
            return False
        self.apply_opts(opts)
        return True

    def apply_opt(self, opt: Opt) -> None:
        """Apply one optimization; raises KernelOptError (and leaves the kernel unchanged) if it does not apply."""
        if not isinstance(opt, Opt):
            raise TypeError(f"apply_opt needs an Opt, got {opt!r}")
        if not self.uniform_reduce:
            raise KernelOptError("the kernel's reductions reduce different axes; no opts apply")
        handler = _HANDLERS.get(opt.op)
        if handler is None:
            raise KernelOptError(f"{opt.op} is not implemented for this renderer ({self.opts.device or 'generic'})")
        saved = {**self.__dict__, "axis_types": list(self.axis_types)}
        try:
            handler(self, opt)
            if self.opts.limits is not None:
                self.check_launch()
        except KernelOptError as e:
            self.__dict__.clear()
            self.__dict__.update(saved)  # unchanged: the heuristics go on with their next choice
            if str(opt) in str(e):
                raise
            raise KernelOptError(f"{opt}: {e}") from e
        self.applied_opts.append(opt)

    def check_launch(self) -> None:
        """Raise KernelOptError when a launch of this kernel would exceed the renderer's device limits."""
        lim = self.opts.limits
        if lim is None:
            return
        local = [int(self.full_shape[a]) for a in self.axes_of(AxisType.LOCAL, AxisType.GROUP)]
        check_threads(lim, local)
        grid = [
            s
            for s in (self.full_shape[a] for a in self.axes_of(AxisType.GLOBAL, AxisType.THREAD))
            if isinstance(s, int)
        ]
        assign_dims(grid, lim.grid)
        threads = int(prod(local))
        accumulators = int(prod(int(self.full_shape[a]) for a in self.axes_of(AxisType.UPCAST)))
        words = sum(-(-r.dtype.itemsize // 4) for r in self.reduceops)
        shared = stage_bytes(self)
        if self.axes_of(AxisType.GROUP):  # one partial per thread and upcast value for each reduction (lowerer.py)
            shared += sum(r.dtype.itemsize for r in self.reduceops) * accumulators * threads
        check_resources(lim, threads, shared, accumulators * words)

    def _pick(self, opt: Opt, *types: AxisType) -> int:
        axes = self.axes_of(*types)
        if opt.axis is None or opt.axis >= len(axes):
            raise KernelOptError(f"{opt}: axis {opt.axis} does not exist; {len(axes)} axes of type {types}")
        return axes[opt.axis]

    def _amount(self, axis: int, arg: int) -> int:
        size = self.full_shape[axis]
        if not isinstance(size, int):
            raise KernelOptError(f"axis {axis} has a symbolic size {size}")
        amt = size if arg == 0 else arg
        if amt <= 1 or size % amt != 0:
            raise KernelOptError(f"cannot split axis {axis} of size {size} by {amt}")
        return amt

    def _split(self, axis: int, amt: int, new_type: AxisType, inner: bool) -> None:
        """Split `axis` into (size/amt, amt) (or (amt, size/amt) if not inner); the amt part gets `new_type`."""
        size = int(self.full_shape[axis])
        parts = (size // amt, amt) if inner else (amt, size // amt)
        self._reshape_axis(axis, parts)
        moved = axis + 1 if inner else axis
        self.axis_types[axis : axis + 1] = [self.axis_types[axis]] * 2
        self.axis_types[moved] = new_type
        self._move_axis(moved, self._insert_point(moved))

    def _insert_point(self, moved: int) -> int:
        """Final position of a new axis: threads first, then globals, locals, reduces, groups, upcasts, unrolls."""
        limit = _RANK[self.axis_types[moved]]
        return sum(1 for i, t in enumerate(self.axis_types) if i != moved and _RANK[t] <= limit)

    def _move_axis(self, src: int, dest: int) -> None:
        """Move axis `src` so that it ends up at position `dest`."""
        order = list(range(len(self.full_shape)))
        order.insert(dest, order.pop(src))
        if order == list(range(len(self.full_shape))):
            return
        self.axis_types = [self.axis_types[i] for i in order]
        self._map_views(lambda st: st.permute(tuple(order)))

    def _reshape_axis(self, axis: int, parts: tuple[int, ...]) -> None:
        full = int(self.full_shape[axis])

        def reshape(st: ShapeTracker) -> ShapeTracker:
            mine = parts if st.shape[axis] == full else (1,) * len(parts)
            return st.reshape(tuple(st.shape[:axis]) + mine + tuple(st.shape[axis + 1 :]))

        self._map_views(reshape)

    def _map_views(self, fn: Callable[[ShapeTracker], ShapeTracker]) -> None:
        views = [u.replace(arg=fn(u.arg)) for u in self.ast.toposort if u.op is Ops.VIEW]
        self.full_shape = _full_shape(views)
        red = tuple(self.axes_of(AxisType.REDUCE, AxisType.GROUP, AxisType.UNROLL))
        self.ast = _rebuild("kernel: apply opt to views", self.ast, fn, lambda _: red)
        self.__dict__.pop("bufs", None)

    # ---- naming ----
    @property
    def name(self) -> str:
        """tinygrad-style display name: E_ for elementwise, r_ for reductions, then the loop sizes."""
        prefix = "r" if self.reduceops else "E"
        if self.applied_opts:
            prefix = prefix.upper() if prefix == "r" else prefix + "o"
        dims = "_".join(str(s) if isinstance(s, int) else "n" for s in self.full_shape)
        return f"{prefix}_{dims}" if dims else prefix

    @property
    def function_name(self) -> str:
        return to_function_name(self.name)


def _rebuild(
    name: str,
    ast: UOp,
    fn: Callable[[ShapeTracker], ShapeTracker],
    red: Callable[[tuple[int, ...]], tuple[int, ...]],
) -> UOp:
    """The AST with every VIEW's tracker mapped by `fn` and every REDUCE_AXIS's axes by `red` (one named pass)."""

    def one(u: UOp, src: tuple[UOp, ...]) -> UOp:
        if u.op is Ops.VIEW:
            return u.replace(arg=fn(u.arg))
        arg = (u.arg[0], red(u.arg[1])) if u.op is Ops.REDUCE_AXIS else u.arg
        return u.replace(src=src, arg=arg)

    return map_graph(name, one, ast)


def _full_shape(views: list[UOp]) -> tuple[sint, ...]:
    shapes = [tuple(v.arg.shape) for v in views]
    if not shapes:
        return ()
    ndim = len(shapes[0])
    if any(len(s) != ndim for s in shapes):
        raise ValueError(f"kernel views disagree in rank: {shapes}")
    return tuple(max((s[i] for s in shapes), key=lambda x: x if isinstance(x, int) else 1 << 62) for i in range(ndim))


def _mergeable(st: ShapeTracker, a: int, b: int) -> bool:
    """Can axes a and b (neighbours) of this tracker be merged into one loop?"""
    if len(st.views) != 1:
        return False
    v = st.views[0]
    if v.shape[a] != 1 and v.shape[b] == 1 or v.shape[a] == 1 and v.shape[b] != 1:
        return False  # reduce-reshaped dims (kept as 1) must stay apart from full ones
    if v.mask is not None:
        (ab, ae), (bb, be) = v.mask[a], v.mask[b]
        if not (bb == 0 and be == v.shape[b] and (ab == 0 and ae == v.shape[a])):
            return False
    return bool(v.strides[a] == v.strides[b] * v.shape[b])


_RANK = {
    AxisType.THREAD: 0,
    AxisType.GLOBAL: 1,
    AxisType.LOCAL: 2,
    AxisType.REDUCE: 3,
    AxisType.GROUP: 4,
    AxisType.UPCAST: 5,
    AxisType.UNROLL: 6,
}
_RANK.update({AxisType.TCM: 7, AxisType.TCN: 8, AxisType.TCK: 9})  # tensor-core tile axes (see tc/opts.py), kept last
MAX_UPCAST = 1024  # copies of the body that upcast x unroll may make


def _expand_axis(k: Kernel, opt: Opt, from_type: AxisType, to_type: AxisType) -> None:
    """Split an axis of `from_type` so its inner part becomes straight-line copies (`to_type`)."""
    axis = k._pick(opt, from_type)
    amt = k._amount(axis, opt.arg)
    if k.upcast_size * amt > MAX_UPCAST:
        raise KernelOptError(f"{opt}: upcast x unroll would be {k.upcast_size * amt} > {MAX_UPCAST}")
    k._split(axis, amt, to_type, inner=True)


def _upcast(k: Kernel, opt: Opt) -> None:
    _not_carried(k, opt, k._pick(opt, AxisType.GLOBAL))
    _expand_axis(k, opt, AxisType.GLOBAL, AxisType.UPCAST)


def _not_carried(k: Kernel, opt: Opt, axis: int) -> None:
    """KernelOptError for an opt that would run the blocks of a KBLOCK at once (they add up in order)."""
    if carried(k, axis):
        raise KernelOptError(f"{opt}: axis {axis} is the block loop of a KBLOCK; its steps must run one after another")


def _unroll(k: Kernel, opt: Opt) -> None:
    _expand_axis(k, opt, AxisType.REDUCE, AxisType.UNROLL)


def _thread(k: Kernel, opt: Opt) -> None:
    """Split an output axis over CPU threads. A second THREAD opt adds a second axis: the chunks are then the pairs
    of both axes' indices (16 threads and output axes of 8 and 4: 32 chunks, not 8 with half the threads idle)."""
    if not k.opts.has_threads:
        raise KernelOptError(f"{opt}: the {k.opts.device or 'generic'} renderer has no CPU threads")
    if len(threads := k.axes_of(AxisType.THREAD)) >= 2:
        raise KernelOptError(f"{opt}: the kernel is already split over threads along two axes")
    axis = k._pick(opt, AxisType.GLOBAL)
    _not_carried(k, opt, axis)
    if threads and not (isinstance(k.full_shape[threads[0]], int) and isinstance(k.full_shape[axis], int)):
        raise KernelOptError(f"{opt}: chunks over two axes need both axes' sizes known")
    k._split(axis, k._amount(axis, opt.arg), AxisType.THREAD, inner=False)


def _local(k: Kernel, opt: Opt) -> None:
    _need_locals(k, opt)
    axis = k._pick(opt, AxisType.GLOBAL)
    _not_carried(k, opt, axis)
    k._split(axis, k._amount(axis, opt.arg), AxisType.LOCAL, inner=True)


def _group(k: Kernel, opt: Opt) -> None:
    _need_locals(k, opt)
    if not k.opts.has_shared:
        raise KernelOptError(f"{opt}: the {k.opts.device} renderer has no local memory")
    if k.axes_of(AxisType.GROUP):
        raise KernelOptError(f"{opt}: only one GROUP per kernel")
    if k.axes_of(AxisType.TCK):
        raise KernelOptError(f"{opt}: GROUP does not combine with tensor cores (TC)")
    if k.staged:
        raise KernelOptError(f"{opt}: GROUP does not combine with STAGE")
    axis = k._pick(opt, AxisType.REDUCE)
    k._split(axis, k._amount(axis, opt.arg), AxisType.GROUP, inner=opt.op is OptOps.GROUP)


def _need_locals(k: Kernel, opt: Opt) -> None:
    if not k.opts.has_local:
        raise KernelOptError(f"{opt}: the {k.opts.device or 'generic'} renderer has no local (workgroup) dimensions")
    if k.dont_use_locals:
        raise KernelOptError(f"{opt}: NOLOCALS was applied")
    # a GROUP may follow UNROLLs: UNROLL 8 then GROUP 32 reads (loop, lane, 8), each thread 8 neighbouring values
    # (one 16-byte load of halves) and a warp 512 neighbouring bytes; an inner split after the unroll cannot
    # reach the unrolled part, so the other opts are unaffected
    late = (AxisType.UPCAST,) if opt.op in (OptOps.GROUP, OptOps.GROUPTOP) else (AxisType.UPCAST, AxisType.UNROLL)
    if k.axes_of(*late):
        raise KernelOptError(f"{opt}: locals must come before upcasts" + ("" if len(late) == 1 else " and unrolls"))


def _nolocals(k: Kernel, opt: Opt) -> None:
    if k.axes_of(AxisType.LOCAL, AxisType.GROUP):
        raise KernelOptError(f"{opt}: the kernel already has local dimensions")
    if k.dont_use_locals:
        raise KernelOptError(f"{opt}: NOLOCALS was already applied")
    k.dont_use_locals = True


def _swap(k: Kernel, opt: Opt) -> None:
    a = k._pick(opt, AxisType.GLOBAL)
    b = k._pick(Opt(opt.op, opt.arg), AxisType.GLOBAL)
    if a >= b:
        raise KernelOptError(f"{opt}: swap needs axis < arg")
    order = list(range(len(k.full_shape)))
    order[a], order[b] = b, a
    k._map_views(lambda st: st.permute(tuple(order)))


def _padto(k: Kernel, opt: Opt) -> None:
    axis = k._pick(opt, AxisType.GLOBAL, AxisType.REDUCE)
    _not_carried(k, opt, axis)
    size = k.full_shape[axis]
    if not isinstance(size, int) or opt.arg <= 1:
        raise KernelOptError(f"{opt}: needs an int axis size and a pad multiple > 1")
    new = -(-size // opt.arg) * opt.arg
    if new == size or new - size > size:
        raise KernelOptError(f"{opt}: axis {axis} of size {size} is a multiple already or would more than double")
    if k.axis_types[axis] == AxisType.REDUCE and not _pad_safe_reduce(k):
        raise KernelOptError(f"{opt}: padding a reduce axis needs an ADD reduction of pad-safe ops")

    def pad(st: ShapeTracker) -> ShapeTracker:
        grow = new - size if st.shape[axis] == size else 0
        return st.pad(tuple((0, grow if i == axis else 0) for i in range(len(st.shape))))

    k._map_views(pad)


def _pad_safe_reduce(k: Kernel) -> bool:
    for r in k.reduceops:
        if r.arg[0] is not Ops.ADD:
            return False
        ops = {u.op for u in r.src[0].toposort} - {Ops.LOAD, Ops.CONST, Ops.VIEW, Ops.DEFINE_GLOBAL}
        if not ops <= GroupOp.PadSafe:
            return False
    return True


_HANDLERS: dict[OptOps, Callable[[Kernel, Opt], None]] = {
    OptOps.UPCAST: _upcast,
    OptOps.UNROLL: _unroll,
    OptOps.THREAD: _thread,
    OptOps.LOCAL: _local,
    OptOps.GROUP: _group,
    OptOps.GROUPTOP: _group,
    OptOps.NOLOCALS: _nolocals,
    OptOps.SWAP: _swap,
    OptOps.PADTO: _padto,
    OptOps.TC: apply_tc,
    OptOps.STAGE: apply_stage,
    OptOps.KBLOCK: apply_kblock,
}
