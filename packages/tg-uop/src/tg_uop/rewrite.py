"""Pattern matching and graph rewriting: rules are data, not nested ifs.

>>> from tg_uop import UOp, UPat, PatternMatcher, graph_rewrite, dtypes, Ops
>>> fold = PatternMatcher([(UPat.cvar("c1") + UPat.cvar("c2"), lambda c1, c2: c1.const_like(c1.arg + c2.arg))])
>>> graph_rewrite(UOp.const(dtypes.int, 3) + 4, fold).arg
7
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tg_uop.dtype import DType
from tg_uop.ops import GroupOp, Ops
from tg_uop.trace import TRACE, RuleFire, Step
from tg_uop.uop import UOp

Store = dict[str, UOp]


class UPat:
    """A pattern over UOps.

    op: one op or a collection of ops (None: any). dtype: one or a collection. src: a tuple matches the
    sources in order, a list matches them in any order, a single UPat matches every source.
    arg: must equal the node's arg. name: binds the matched node for the rewrite function.
    """

    __slots__ = ("op", "dtype", "src", "arg", "name", "allow_any_len", "_any_order")

    def __init__(
        self,
        op: Ops | Iterable[Ops] | None = None,
        dtype: DType | Iterable[DType] | None = None,
        src: UPat | tuple[UPat, ...] | list[UPat] | None = None,
        arg: Any = None,
        name: str | None = None,
        allow_any_len: bool = False,
    ) -> None:
        self.op: frozenset[Ops] | None = None if op is None else frozenset((op,) if isinstance(op, Ops) else op)
        self.dtype: frozenset[DType] | None = (
            None if dtype is None else frozenset((dtype,) if isinstance(dtype, DType) else dtype)
        )
        self._any_order = isinstance(src, list)
        self.src: tuple[UPat, ...] | UPat | None = tuple(src) if isinstance(src, (list, tuple)) else src
        self.arg, self.name, self.allow_any_len = arg, name, allow_any_len

    # ---- constructors ----
    @staticmethod
    def var(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
        """Any node, bound to `name`."""
        return UPat(dtype=dtype, name=name)

    @staticmethod
    def cvar(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
        """A constant, bound to `name`."""
        return UPat(Ops.CONST, dtype=dtype, name=name)

    @staticmethod
    def const(dtype: DType | Iterable[DType] | None, value: Any) -> UPat:
        """The constant `value`."""
        return UPat(Ops.CONST, dtype=dtype, arg=value)

    # ---- operator sugar (commutative ops match in any order) ----
    def alu(self, op: Ops, *src: UPat) -> UPat:
        operands = [self, *src]
        return UPat(op, None, operands if op in GroupOp.Commutative else tuple(operands))

    def __add__(self, x: UPat | Any) -> UPat:
        return self.alu(Ops.ADD, _to_pat(x))

    def __radd__(self, x: UPat | Any) -> UPat:
        return _to_pat(x).alu(Ops.ADD, self)

    def __sub__(self, x: UPat | Any) -> UPat:
        return self.alu(Ops.SUB, _to_pat(x))

    def __rsub__(self, x: UPat | Any) -> UPat:
        return _to_pat(x).alu(Ops.SUB, self)

    def __truediv__(self, x: UPat | Any) -> UPat:
        return self.alu(Ops.FDIV, _to_pat(x))

    def __and__(self, x: UPat | Any) -> UPat:
        return self.alu(Ops.AND, _to_pat(x))

    def __or__(self, x: UPat | Any) -> UPat:
        return self.alu(Ops.OR, _to_pat(x))

    def __xor__(self, x: UPat | Any) -> UPat:
        return self.alu(Ops.XOR, _to_pat(x))

    def __mul__(self, x: UPat | Any) -> UPat:
        return self.alu(Ops.MUL, _to_pat(x))

    def __rmul__(self, x: UPat | Any) -> UPat:
        return _to_pat(x).alu(Ops.MUL, self)

    def __floordiv__(self, x: UPat | Any) -> UPat:
        return self.alu(Ops.IDIV, _to_pat(x))

    def __mod__(self, x: UPat | Any) -> UPat:
        return self.alu(Ops.MOD, _to_pat(x))

    def __neg__(self) -> UPat:
        return self.alu(Ops.NEG)

    def __lt__(self, x: UPat | Any) -> UPat:
        return self.alu(Ops.CMPLT, _to_pat(x))

    def ne(self, x: UPat | Any) -> UPat:
        return self.alu(Ops.CMPNE, _to_pat(x))

    def maximum(self, x: UPat | Any) -> UPat:
        return self.alu(Ops.MAX, _to_pat(x))

    def where(self, a: UPat | Any, b: UPat | Any) -> UPat:
        return self.alu(Ops.WHERE, _to_pat(a), _to_pat(b))

    def cast(self, dtype: DType | None = None) -> UPat:
        return UPat(Ops.CAST, dtype, (self,))

    # ---- matching ----
    def match(self, uop: UOp, store: Store) -> list[Store]:
        """Every way this pattern matches `uop`, as dicts of bound names."""
        if self.op is not None and uop.op not in self.op:
            return []
        if self.dtype is not None and uop.dtype not in self.dtype and uop.dtype.scalar() not in self.dtype:
            return []
        if self.arg is not None and not _arg_equal(self.arg, uop.arg):
            return []
        if self.name is not None:
            bound = store.get(self.name)
            if bound is not None and bound is not uop:
                return []
            store = {**store, self.name: uop}
        if self.src is None:
            return [store]
        if isinstance(self.src, UPat):
            return _match_seq((self.src,) * len(uop.src), uop.src, store)
        if len(self.src) != len(uop.src) and not (self.allow_any_len and len(uop.src) >= len(self.src)):
            return []
        if not self._any_order:
            return _match_seq(self.src, uop.src[: len(self.src)], store)
        if len(self.src) == 2:  # the common case (commutative binary ops): no permutation objects
            first = _match_seq(self.src, uop.src, store)
            return first if first else _match_seq((self.src[1], self.src[0]), uop.src, store)
        results: list[Store] = []
        for perm in itertools.permutations(self.src):
            results.extend(_match_seq(perm, uop.src, store))
            if results:
                break
        return results

    def __repr__(self) -> str:
        ops = None if self.op is None else sorted(o.name for o in self.op)
        return f"UPat(op={ops}, name={self.name!r}, arg={self.arg!r}, src={self.src!r})"


def _arg_equal(pattern_arg: Any, arg: Any) -> bool:
    if type(pattern_arg) is not type(arg) and not (
        isinstance(pattern_arg, (int, float)) and isinstance(arg, (int, float))
    ):
        return False
    return bool(pattern_arg == arg)


def _match_seq(pats: Sequence[UPat], srcs: Sequence[UOp], store: Store) -> list[Store]:
    for p, s in zip(pats, srcs):  # cheap op check first: most candidate rules fail here
        if p.op is not None and s.op not in p.op:
            return []
    stores = [store]
    for p, s in zip(pats, srcs):
        stores = p.match(s, stores[0]) if len(stores) == 1 else [m for st in stores for m in p.match(s, st)]
        if not stores:
            return []
    return stores


def _to_pat(x: UPat | Any) -> UPat:
    return x if isinstance(x, UPat) else UPat.const(None, x)


RewriteFn = Callable[..., UOp | None]


class PatternMatcher:
    """An ordered list of (UPat, function) rules, indexed by op. `+` concatenates matchers.

    A rule's function gets the pattern's bound names as keyword arguments (and `ctx` if it asks for it)
    and returns the replacement UOp, or None to decline.
    """

    def __init__(self, patterns: Sequence[tuple[UPat, RewriteFn]], name: str | None = None) -> None:
        self.patterns = list(patterns)
        self.name = name  # the pass name the viewer shows (graph_rewrite's `name` overrides it)
        # set by `remember_results`: the attribute under which each node keeps its rewritten form
        self.memo: str | None = None
        self.by_op: dict[Ops, list[tuple[UPat, RewriteFn, bool]]] = {}
        self.any_op: list[tuple[UPat, RewriteFn, bool]] = []
        for pat, fn in self.patterns:
            entry = (pat, fn, "ctx" in inspect.signature(fn).parameters)
            if pat.op is None:
                self.any_op.append(entry)
                for lst in self.by_op.values():
                    lst.append(entry)
            else:
                for op in pat.op:
                    self.by_op.setdefault(op, list(self.any_op)).append(entry)

    def remember_results(self, attr: str) -> PatternMatcher:
        """Let each node keep its rewritten form (as `attr`, while it lives), so a later `graph_rewrite` with
        this matcher and no ctx starts from the nodes it rewrote before instead of walking them again.

        Only for rules that are functions of the node alone (no ctx, no global state): the symbolic rules,
        whose `simplify()` the lowerer calls on thousands of index expressions that share most of their parts.
        """
        self.memo = attr
        return self

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        return PatternMatcher(self.patterns + other.patterns, self.name or other.name)

    def rewrite(self, uop: UOp, ctx: Any = None) -> UOp | None:
        """The first rule's replacement for `uop`, or None when no rule fires."""
        for pat, fn, wants_ctx in self.by_op.get(uop.op, self.any_op):
            for store in pat.match(uop, {}):
                ret = fn(ctx=ctx, **store) if wants_ctx else fn(**store)
                if ret is not None and ret is not uop:
                    return ret
        return None

    def rewrite_logged(self, uop: UOp, ctx: Any, log: list[RuleFire]) -> UOp | None:
        """`rewrite`, appending the rule that fired (pattern and where its function is defined) to `log`."""
        for pat, fn, wants_ctx in self.by_op.get(uop.op, self.any_op):
            for store in pat.match(uop, {}):
                ret = fn(ctx=ctx, **store) if wants_ctx else fn(**store)
                if ret is not None and ret is not uop:
                    code = getattr(fn, "__code__", None)
                    where = f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno}" if code else repr(fn)
                    log.append(RuleFire(_short_pattern(pat), where, uop, ret, code.co_filename if code else ""))
                    return ret
        return None


def _short_pattern(pat: UPat) -> str:
    ops = "any" if pat.op is None else "|".join(sorted(o.name for o in pat.op))
    srcs = pat.src if isinstance(pat.src, tuple) else (pat.src,) if pat.src is not None else ()
    inner = f"({', '.join(_short_pattern(s) for s in srcs)})" if srcs else ""
    return f"{ops}{':' + pat.name if pat.name else ''}{inner}"


def graph_rewrite(
    sink: UOp, pm: PatternMatcher, ctx: Any = None, bottom_up: bool = False, name: str | None = None
) -> UOp:
    """Rewrite a graph with `pm` until no rule fires, memoized per node.

    Default order: sources first, then the node (repeatedly). `bottom_up=True` tries rules on a node
    before its sources, which lets a rule see the original subtree. `name` labels the pass in the
    trace (VIZ=1) and in the pass list (`TRACE.collect_passes`, DEBUG=5); when neither is on this
    costs two flag checks.
    """
    if not TRACE.active and TRACE.passes is None:
        if pm.memo is not None and ctx is None and not bottom_up:
            return _Rewriter(pm, ctx, bottom_up).run_remembered(sink, pm.memo)
        return _Rewriter(pm, ctx, bottom_up).run(sink)
    return _traced_rewrite(sink, pm, ctx, bottom_up, name)


def _traced_rewrite(sink: UOp, pm: PatternMatcher, ctx: Any, bottom_up: bool, name: str | None) -> UOp:
    import sys

    if TRACE.depth > 0:  # a rewrite inside a rule or a pass (e.g. simplify): part of the outer step
        return _Rewriter(pm, ctx, bottom_up).run(sink)
    label = name or pm.name or sys._getframe(2).f_code.co_name
    log: list[RuleFire] = []
    rw = _Rewriter(pm, ctx, bottom_up)
    if TRACE.active:

        def logged(node: UOp, c: Any) -> UOp | None:
            return pm.rewrite_logged(node, c, log)

        rw.rewrite = logged
    return _recorded(label, sink, rw.run, log)


def run_pass(name: str, fn: Callable[[UOp], UOp], sink: UOp) -> UOp:
    """Run a hand-written graph pass `fn` as a named pass: recorded like a `graph_rewrite` (VIZ trace, pass list).

    For walks that read more clearly than rules (a lowering that builds a new graph, a grouping that
    looks at the whole graph). Rewrites run inside it are part of it.

    >>> from tg_uop import UOp, dtypes
    >>> run_pass("double", lambda u: u * 2, UOp.const(dtypes.int, 3)).simplify().arg
    6
    """
    if not TRACE.active and TRACE.passes is None or TRACE.depth > 0:
        return fn(sink)
    log: list[RuleFire] = []
    out = _recorded(name, sink, fn, log)
    if TRACE.active and not log and out is not sink:
        log.extend(_changes(name, fn, sink, out))
    return out


def _changes(name: str, fn: Callable[[UOp], UOp], sink: UOp, out: UOp) -> list[RuleFire]:
    """What a pass that reported nothing changed, as steps: each output (a SINK's source) that differs, or the
    whole graph when the outputs do not line up."""
    code = getattr(fn, "__code__", None)
    path = code.co_filename if code is not None else ""
    where = f"{path.rsplit('/', 1)[-1]}:{code.co_firstlineno}" if code is not None else repr(fn)
    if sink.op is out.op and len(sink.src) == len(out.src):
        return [RuleFire(name, where, b, a, path) for b, a in zip(sink.src, out.src) if a is not b]
    return [RuleFire(name, where, sink, out, path)]


def map_graph(name: str, fn: Callable[[UOp, tuple[UOp, ...]], UOp], sink: UOp) -> UOp:
    """A named pass visiting every node once, sources first: `fn(node, its new sources)` gives its new node.

    Unlike a rewrite, a node made by `fn` is never visited again (a mapping of views or dtypes, say).

    >>> from tg_uop import UOp, dtypes
    >>> times10 = lambda u, src: u.replace(src=src, arg=u.arg * 10 if u.op is Ops.CONST else u.arg)
    >>> map_graph("consts x10", times10, UOp.const(dtypes.int, 1) + 2).simplify().arg
    30
    """

    def walk(root: UOp) -> UOp:
        done: dict[UOp, UOp] = {}
        for u in root.toposort:
            srcs = tuple(done[s] for s in u.src)
            done[u] = new = fn(u, srcs)
            if TRACE.log is not None and (new.op, new.dtype, new.arg) != (u.op, u.dtype, u.arg):
                code = getattr(fn, "__code__", None)
                TRACE.fire(name, u, new, f"{code.co_filename}:{code.co_firstlineno}" if code else None)
        return done[root]

    return run_pass(name, walk, sink)


def _recorded(label: str, sink: UOp, fn: Callable[[UOp], UOp], log: list[RuleFire]) -> UOp:
    import time

    if TRACE.passes is not None:
        TRACE.passes.append(label)
    TRACE.depth += 1
    saved_log, TRACE.log = TRACE.log, (log if TRACE.active else None)  # (hand-written passes fire into it)
    st = time.perf_counter()
    try:
        out = fn(sink)
    finally:
        TRACE.depth -= 1
        TRACE.log = saved_log
    if TRACE.active:
        TRACE.add_step(Step(label, "rewrite", graph=out, before=sink, rules=log, seconds=time.perf_counter() - st))
    return out


_SAME = object()  # (a remembered result that is the node itself)


class _Rewriter:
    def __init__(self, pm: PatternMatcher, ctx: Any, bottom_up: bool) -> None:
        self.pm, self.ctx, self.bottom_up = pm, ctx, bottom_up
        self.rewrite: Callable[[UOp, Any], UOp | None] = pm.rewrite
        self.done: dict[UOp, UOp] = {}
        self.memo: str | None = None  # (run_remembered)

    def _fixed_point(self, node: UOp) -> UOp:
        for _ in range(10_000):
            nxt = self.rewrite(node, self.ctx)
            if nxt is None:
                return node
            node = nxt
        raise RuntimeError(f"graph_rewrite did not converge on {node.op}")

    def run_remembered(self, root: UOp, attr: str) -> UOp:
        """`run`, taking the results nodes kept from earlier runs, and keeping this run's (a node that rewrites
        to itself keeps a marker: a reference to itself would be a cycle that outlives it)."""
        if (hit := root.__dict__.get(attr)) is not None:
            return root if hit is _SAME else hit
        self.memo = attr
        out = self.run(root)
        for node, result in self.done.items():
            if attr not in node.__dict__:
                node.__dict__[attr] = _SAME if result is node else result
        return out

    def run(self, root: UOp) -> UOp:
        # explicit stack: (node, stage, payload); stage 0 = enter, 1 = sources done, 2 = result of a rewrite
        stack: list[tuple[UOp, int, UOp | None]] = [(root, 0, None)]
        done, memo = self.done, self.memo
        while stack:
            node, stage, payload = stack.pop()
            if stage == 0:
                if node in done:
                    continue
                if memo is not None and (hit := node.__dict__.get(memo)) is not None:
                    done[node] = node if hit is _SAME else hit
                    continue
                if self.bottom_up:
                    nxt = self._fixed_point(node)
                    if nxt is not node:
                        stack.append((node, 2, nxt))
                        stack.append((nxt, 0, None))
                        continue
                stack.append((node, 1, None))
                stack.extend((s, 0, None) for s in reversed(node.src) if s not in done)
            elif stage == 1:
                new_src = tuple(done[s] for s in node.src)
                rebuilt = node if all(a is b for a, b in zip(new_src, node.src)) else node.replace(src=new_src)
                rewritten = self.rewrite(rebuilt, self.ctx)
                if rewritten is None:
                    done[node] = rebuilt
                else:
                    stack.append((node, 2, rewritten))
                    stack.append((rewritten, 0, None))
            else:
                assert payload is not None
                done[node] = done[payload]
        return done[root]


substitute_matcher = PatternMatcher([(UPat(name="x"), lambda ctx, x: ctx.get(x))])
