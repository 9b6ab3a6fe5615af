"""Lowering: a Kernel's AST becomes loops (RANGE), indices (from ShapeTrackers) and REDUCE nodes.

The lowered graph uses:
  RANGE(end) arg=(axis, kind)         a loop variable, 0 <= r < end; kind is "loop" or "reduce"
  INDEX(buf, index)                   address of buf[index]
  LOAD(INDEX[, gate])                 read (0 where gate is false)
  STORE(INDEX, value[, gate])         write (skipped where gate is false)
  REDUCE(value, *ranges) arg=alu op   reduce value over the ranges
"""

from __future__ import annotations

from tg_codegen.kernel import Kernel
from tg_uop import Ops, UOp, dtypes, graph_rewrite
from tg_uop.symbolic import symbolic


def _identity(op: Ops, dtype: object) -> float | int | bool:
    from tg_uop.dtype import DType

    assert isinstance(dtype, DType)
    if op is Ops.ADD:
        return False if dtype == dtypes.bool else 0
    if op is Ops.MUL:
        return True if dtype == dtypes.bool else 1
    if op is Ops.MAX:
        return dtypes.min(dtype)
    raise ValueError(f"no identity element for reduce op {op}")


def reduce_identity(op: Ops, dtype: object) -> float | int | bool:
    """The value a reduction starts from (0 for ADD, 1 for MUL, the dtype minimum for MAX)."""
    return _identity(op, dtype)


class Lowerer:
    """Turns the kernel AST into a lowered graph with explicit loops."""

    def __init__(self, k: Kernel) -> None:
        self.k = k
        full = k.full_shape
        self.ranges = [
            UOp(
                Ops.RANGE,
                dtypes.int32,
                (UOp.const(dtypes.int32, s) if isinstance(s, int) else s,),
                (i, "reduce" if i >= k.first_reduce else "loop"),
            )
            for i, s in enumerate(full)
        ]
        zero = UOp.const(dtypes.int32, 0)
        self.full_idxs = [r if full[i] != 1 else zero for i, r in enumerate(self.ranges)]
        self.out_idxs = [r if i < k.first_reduce and full[i] != 1 else zero for i, r in enumerate(self.ranges)]
        self.memo: dict[tuple[UOp, bool], UOp] = {}

    def lower(self) -> UOp:
        stores = [self._lower(s, inside_reduce=False) for s in self.k.ast.src]
        return graph_rewrite(UOp(Ops.SINK, dtypes.void, tuple(stores)), symbolic)

    def _lower(self, u: UOp, inside_reduce: bool) -> UOp:
        key = (u, inside_reduce)
        if key in self.memo:
            return self.memo[key]
        idxs = self.full_idxs if inside_reduce else self.out_idxs
        op = u.op
        if op is Ops.STORE:
            buf, view, value = u.src
            index, valid = view.arg.to_indexed_uops(idxs)
            val = self._lower(value, inside_reduce)
            ret = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, buf.dtype, (buf, index)), val) + _gate(valid))
        elif op is Ops.LOAD:
            buf, view = u.src
            index, valid = view.arg.to_indexed_uops(idxs)
            ret = UOp(Ops.LOAD, u.dtype, (UOp(Ops.INDEX, buf.dtype, (buf, index)),) + _gate(valid))
        elif op is Ops.CONST and u.src:
            _, valid = u.src[0].arg.to_indexed_uops(idxs)
            c = UOp.const(u.dtype, u.arg)
            gate = _gate(valid)
            ret = gate[0].where(c, c.const_like(0)) if gate else c
        elif op is Ops.REDUCE_AXIS:
            alu_op, axes = u.arg
            val = self._lower(u.src[0], inside_reduce=True)
            rngs = tuple(self.ranges[a] for a in axes if self.k.full_shape[a] != 1)
            ret = UOp(Ops.REDUCE, u.dtype, (val, *rngs), alu_op) if rngs else val
        else:
            ret = u.replace(src=tuple(self._lower(s, inside_reduce) for s in u.src))
        self.memo[key] = ret
        return ret


def _gate(valid: UOp) -> tuple[UOp, ...]:
    valid = valid.simplify()
    if valid.op is Ops.CONST and valid.arg is True:
        return ()
    return (valid,)


def lower(k: Kernel) -> UOp:
    """The lowered SINK for a kernel."""
    return Lowerer(k).lower()
