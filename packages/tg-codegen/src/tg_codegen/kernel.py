"""Kernel: one kernel AST with its loop shape. All views in a kernel share one `full_shape`.

A kernel AST, as the scheduler builds it:
  SINK(STORE(DEFINE_GLOBAL, VIEW(st), value), ...)
  value := LOAD(DEFINE_GLOBAL, VIEW(st)) | CONST(VIEW(st)) | ALU(value...) | REDUCE_AXIS(value)
Loads under a REDUCE_AXIS have views of the full shape; everything else has the reduced axes set to 1.

>>> from tg_codegen.kernel import Kernel   # doctest: +SKIP
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from tg_shape import ShapeTracker
from tg_uop import Ops, UOp
from tg_uop.helpers import prod, to_function_name
from tg_uop.uop import sint


class KernelOptError(Exception):
    """An optimization that does not apply to this kernel."""


@dataclass(frozen=True)
class AxisInfo:
    size: sint
    reduce: bool


class Kernel:
    """The loop structure of one kernel AST: axes (global first, reduce last) and the views on them."""

    def __init__(self, ast: UOp) -> None:
        if ast.op is not Ops.SINK or not ast.src or any(s.op is not Ops.STORE for s in ast.src):
            raise ValueError(f"a kernel AST is a SINK of STOREs, got {ast.op}")
        self.ast = ast
        views = [u for u in ast.toposort if u.op is Ops.VIEW]
        reduces = [u for u in ast.toposort if u.op is Ops.REDUCE_AXIS]
        full = _full_shape(views)
        reduce_axes = sorted({a for r in reduces for a in r.arg[1]})
        for r in reduces:
            src_shape = r.src[0].shape
            if src_shape is not None and tuple(src_shape) != full:
                raise ValueError(f"reduce input shape {src_shape} differs from the kernel's full shape {full}")
        # reduce axes last
        order = [i for i in range(len(full)) if i not in reduce_axes] + reduce_axes
        self.permute_order = tuple(order)
        self.full_shape: tuple[sint, ...] = tuple(full[i] for i in order)
        self.first_reduce = len(full) - len(reduce_axes)
        self.ast = self._permute_ast(ast, self.permute_order) if order != list(range(len(full))) else ast
        self.ast = self._merge_axes(self.ast)

    # ---- shape plumbing ----
    @property
    def shape_len(self) -> int:
        return len(self.full_shape)

    @property
    def output_shape(self) -> tuple[sint, ...]:
        return self.full_shape[: self.first_reduce] + (1,) * (self.shape_len - self.first_reduce)

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
        """Permute every view and renumber reduce axes in one bottom-up pass.

        (A fixed-point substitute would loop when two views are each other's permutation.)
        """
        inv = {old: new for new, old in enumerate(order)}
        memo: dict[UOp, UOp] = {}
        for u in ast.toposort:  # sources come first
            src = tuple(memo[s] for s in u.src)
            if u.op is Ops.VIEW:
                memo[u] = u.replace(arg=u.arg.permute(order))
            elif u.op is Ops.REDUCE_AXIS:
                memo[u] = u.replace(src=src, arg=(u.arg[0], tuple(sorted(inv[a] for a in u.arg[1]))))
            else:
                memo[u] = u.replace(src=src)
        return memo[ast]

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

        mapping: dict[UOp, UOp] = {}
        for u in ast.toposort:
            if u.op is Ops.VIEW:
                st: ShapeTracker = u.arg
                new_shape = tuple(prod(st.shape[i] for i in g) for g in groups)
                mapping[u] = u.replace(arg=st.reshape(new_shape))
            elif u.op is Ops.REDUCE_AXIS:
                pass
        ret = ast.substitute(mapping)
        remap = {
            u: u.replace(arg=(u.arg[0], tuple(range(new_first_reduce, len(groups)))))
            for u in ret.toposort
            if u.op is Ops.REDUCE_AXIS
        }
        self.full_shape, self.first_reduce = new_full, new_first_reduce
        return ret.substitute(remap) if remap else ret

    # ---- naming ----
    @functools.cached_property
    def name(self) -> str:
        """tinygrad-style display name: E_ for elementwise, r_ for reductions, then the loop sizes."""
        prefix = "r" if self.reduceops else "E"
        dims = "_".join(str(s) if isinstance(s, int) else "n" for s in self.full_shape)
        return f"{prefix}_{dims}" if dims else prefix

    @property
    def function_name(self) -> str:
        return to_function_name(self.name)


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
